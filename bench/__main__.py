"""`python -m bench`: the Hydra entry point. Thin on purpose: compose, then hand over to
bench.app. Import-light: `--cfg job` and `--help` load neither torch nor mlflow."""

import atexit
import gc
import os
import signal
import sys
from typing import NoReturn, Optional

import hydra
from omegaconf import DictConfig, OmegaConf

from bench import config_dir, run_dirs
from bench.config.argv import PRESET, as_overrides, compose_once, help_groups, presets_help, seed_spelling, unknown_flag
from bench.config.hydra_errors import reporting_one_line, unquoted_space
from bench.config.scenario import named_twice
from bench.config.schema import register_configs
from bench.errors import EXIT_CONFIG, EXIT_SIGINT, EXIT_SIGTERM, BenchError, print_error
from bench.launch.preview import job_config, preview, register_bench_launchers, wants_job_config, wants_preview
from bench.machine.children import die_with_parent, exit_without_teardown
from bench.secrets import command_line_problem, redact_output

register_configs()
# replace: the bad-input table runs this module again in one process
OmegaConf.register_new_resolver("bench_help_groups", help_groups, replace=True)  # conf/hydra/help/bench.yaml


@hydra.main(version_base="1.3", config_path=config_dir(), config_name="config")
def main(cfg: DictConfig) -> int:
    from bench.app import run_from_hydra  # heavy imports (torch, mlflow) start here

    return run_from_hydra(cfg)  # a multirun job's exit code reaches the sweep callback


# keys whose value holds commas that are not a sweep: "0,128,512;5,160,384" is one schedule
ONE_STRING_KEYS = ("data.progressive", "+data.progressive")


def quote_list_values(arg: str) -> str:
    """data.progressive=0,128,512;5,... reaches Hydra quoted, so its commas do not make a sweep."""
    key, _, value = arg.partition("=")
    if key in ONE_STRING_KEYS and "," in value and value[:1] not in ("'", '"'):
        return f"{key}='{value}'"
    return arg


def print_or_refuse(reason: Optional[str]) -> NoReturn:
    """The end of a command that printed what it was asked for (0), or could not (one line, 2)."""
    sys.exit(print_error(reason) if reason else 0)


def cli() -> None:
    """The console script: config keys given as flags (--data.batch_size=8) are read as overrides; a
    bad override is one [ERROR] line (exit 2), and the directory this command made is removed
    again; a multirun exits with the number of jobs that failed. A credential on the command line
    is refused before Hydra saves the overrides in .hydra/ or logs them; what gets through is
    redacted on its way out."""
    redact_output()  # before Hydra makes its log handlers: they write to the wrapped streams
    if "TORCHELASTIC_RUN_ID" in os.environ:
        # A rank torchrun started, in a session of its own: when torchrun dies by SIGKILL nothing
        # else stops it, so the kernel sends it SIGTERM then (it ends its MLflow run KILLED).
        die_with_parent(os.getppid(), signal.SIGTERM, ctrl_c=True)
    # Registered first, so run last of the exit handlers: the interpreter's final garbage
    # collections over torch's, mlflow's and Hydra's ~600k objects took 5 s on a loaded 2-core
    # machine after a Ctrl-C had been answered; left frozen, they are freed with the process.
    atexit.register(gc.freeze)
    if sys.argv[1:] in (["--help", PRESET], ["-h", PRESET]):  # the presets --help counts
        try:
            print(presets_help(), flush=True)
        except BrokenPipeError:  # `| head`: the reader has what it wanted; no traceback
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
    sys.argv[1:], problem = as_overrides(sys.argv[1:])  # --data.batch_size=8 is data.batch_size=8
    problem = problem or unknown_flag(sys.argv[1:])
    problem = problem or command_line_problem(sys.argv[1:]) or unquoted_space(sys.argv[1:])
    problem = problem or (str(named_twice(sys.argv[1:]) or "") or None)  # mode=storage scenario=echo
    if problem:
        sys.exit(print_error(problem))
    sys.argv[1:], read = seed_spelling(sys.argv[1:])  # training.epochs=5 is train.epochs=5
    if read:
        print(f"[INFO] the seed's keys read as bench's: {', '.join(read)}", file=sys.stderr, flush=True)
    sys.argv[1:] = [quote_list_values(arg) for arg in sys.argv[1:]]
    if wants_preview(sys.argv[1:]):  # -m ... --cfg job: list the sweep's jobs (Hydra refuses the pair)
        print_or_refuse(preview(sys.argv[1:], sys.stdout))
    register_bench_launchers()
    if wants_job_config(sys.argv[1:]):  # --cfg job: the scenario's node as its class types it (no _target_)
        print_or_refuse(job_config(sys.argv[1:], sys.stdout))
    # its own directory, even when another command starts in the same second (bench.run_dirs)
    try:
        reserved = run_dirs.for_command(sys.argv[1:])
    except BenchError as exc:  # a named directory that cannot be written, or that another run holds
        print_or_refuse(str(exc))
    if reserved is not None and reserved.override:
        sys.argv.append(reserved.override)
    compose_once()
    try:
        reporting_one_line(main)
    except SystemExit as exc:
        # refused before it ran, or stopped before it wrote anything (a sweep while its server is probed)
        stopped_unwritten = exc.code in (EXIT_SIGINT, EXIT_SIGTERM) and _made_and_empty(reserved)
        if reserved is not None and (exc.code == EXIT_CONFIG or stopped_unwritten):
            run_dirs.discard(reserved)
        raise
    finally:
        if reserved is not None:
            reserved.release()  # the named directory is free for the next run
    from bench.tracking.sweep import failed_jobs

    if failed_jobs():
        sys.exit(min(failed_jobs(), 100))


def _made_and_empty(reserved: Optional[run_dirs.Reserved]) -> bool:
    """The directory this command reserved (not one the user named), still empty."""
    return bool(reserved and reserved.override and reserved.path.is_dir() and not any(reserved.path.iterdir()))


if __name__ == "__main__":
    exit_without_teardown(cli)
