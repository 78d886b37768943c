"""`python -m bench -m <overrides> --cfg job`: the jobs a sweep would run, one line each, without
running them (Hydra itself refuses --cfg with --multirun: "Only one of --run, --multirun,
--cfg, --info and --shell can be specified"). And a plain `--cfg job` [--resolve]: the composed config
as Hydra prints it, but with the scenario's node as its class types it (its keys with their defaults,
no `_target_`: bench.config.shown).

The jobs are expanded by Hydra's own basic sweeper from the command line's overrides after
the sweep a preset writes into `hydra.sweeper.params` (imagenet_schedulers), as `-m` does, so
the list is exactly what `-m` starts. Import-light: no torch, no mlflow.

bench's Hydra launchers by name. hydra/launcher=slurm|slurm_local name classes of
hydra_plugins.bench_launcher (shipped from launchers/hydra_plugins/). Hydra finds plugins by
walking the folders of the hydra_plugins namespace, which an editable install (pip install -e)
maps without a folder to walk, so they are registered by hand as well.

A launcher that hands jobs to a cluster needs the cluster's commands where the sweep starts:
cluster_commands_problem() says so in one sentence before the sweep opens anything (its MLflow
parent run included), instead of submitit's traceback from inside the launcher.
"""

from __future__ import annotations

import logging
import shlex
import shutil
from typing import Any, List, Optional, Sequence, TextIO

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from bench import config_dir
from bench.config import composed, load, shown
from bench.config.argv import hydra_flags
from bench.config.hydra_errors import one_line
from bench.errors import BenchError

MULTIRUN = ("-m", "--multirun")
CFG = ("-c", "--cfg")


def wants_preview(argv: Sequence[str]) -> bool:
    """-m (or --multirun) together with --cfg: a sweep to list, not to run."""
    return any(arg in CFG or arg.startswith("--cfg=") for arg in argv) and any(arg in MULTIRUN for arg in argv)


def wants_job_config(argv: Sequence[str]) -> bool:
    """`--cfg job` (or `-c job`, `--cfg=job`), `--resolve` at most beside it: no other flag of Hydra's."""
    flags = [arg for number, arg in enumerate(argv) if arg.startswith("-") or (number and argv[number - 1] in CFG)]
    return sorted(set(flags) - {"--resolve"}) in (["--cfg", "job"], ["-c", "job"], ["--cfg=job"])


def job_config(argv: Sequence[str], out: TextIO) -> Optional[str]:
    """Print one job's composed config; returns None, or the one-line reason it does not compose."""
    try:
        out.write(OmegaConf.to_yaml(shown(composed(*overrides_of(argv))), resolve="--resolve" in argv))
    except BenchError as exc:
        return str(exc)
    except OmegaConfBaseException as exc:  # --resolve: a ${...} that points nowhere
        return one_line(exc)
    return None


def overrides_of(argv: Sequence[str]) -> List[str]:
    """The command line without Hydra's flags (and their values): the overrides."""
    takes_a_value = hydra_flags(taking_a_value=True)
    found: List[str] = []
    args = iter(argv)
    for arg in args:
        if arg in takes_a_value:
            next(args, None)  # its value
        elif not arg.startswith("-"):
            found.append(arg)
    return found


def jobs_of(overrides: Sequence[str]) -> List[List[str]]:
    """Each job's overrides, in the order -m runs them (Hydra's basic sweeper expands them)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(list(overrides))
    return [job for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]


def job_problem(config: Any) -> Optional[str]:
    """The first job of a multirun (`config`: Hydra's, in the sweep's callback) that its run would
    refuse (`data.batch_size=4,0`, `model=small_cnn,nope`), composed and checked as its run will:
    the sweep is refused before any job runs, not after the jobs before it (Hydra composes a batch
    only once the parent run is open). One line, or None. Quiet: what a config says when it loads
    (a deprecated key's warning) is said by the job's own run."""
    params = OmegaConf.select(config, "hydra.sweeper.params") or {}
    overrides = [f"{key}={value}" for key, value in params.items()] + list(config.hydra.overrides.task)
    logging.disable(logging.WARNING)
    try:
        for job in jobs_of(overrides):
            own = [o for o in job if not o.lstrip("+~").startswith(("hydra.", "hydra/"))]  # the run's keys only
            try:
                # the sweep's own Hydra in its callback; outside one (a launcher's caller), bench's
                load(hydra_compose("config", own) if GlobalHydra.instance().is_initialized() else composed(*own))
            except BenchError as exc:
                return str(exc)
            except (HydraException, OmegaConfBaseException) as exc:
                return one_line(exc)
    finally:
        logging.disable(logging.NOTSET)
    return None


def preset_sweep(overrides: Sequence[str]) -> List[str]:
    """The sweep the command line's presets (+experiment=NAME) write into hydra.sweeper.params, as
    overrides (Hydra's basic sweeper puts them before the command line's, which win)."""
    if not (presets := [o for o in overrides if o.lstrip("+").startswith("experiment=")]):
        return []
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        cfg = hydra_compose(config_name="config", overrides=presets, return_hydra_config=True)
    return [f"{key}={value}" for key, value in (cfg.hydra.sweeper.params or {}).items()]


def _for_a_shell(override: str) -> str:
    """An override as it can be pasted into bash: as it is when plain, else quoted."""
    if shlex.quote(override) == override or "'" not in override:
        return shlex.quote(override)
    return f'"{override}"'  # holds single quotes (a value bench quoted for Hydra): double-quote it


def preview(argv: Sequence[str], out: TextIO) -> Optional[str]:
    """Print the sweep's jobs; returns None, or the one-line reason the overrides do not parse."""
    try:
        overrides = overrides_of(argv)
        jobs = jobs_of(preset_sweep(overrides) + overrides)
    except (HydraException, OmegaConfBaseException) as exc:
        return one_line(exc)
    out.write(
        f"a sweep of {len(jobs)} job{'s' if len(jobs) != 1 else ''} (-m runs them in this order, "
        "each in its own process):\n"
    )
    width = len(str(len(jobs) - 1))
    for number, job in enumerate(jobs):
        out.write(f"  #{number:<{width}}  {' '.join(_for_a_shell(o) for o in job)}\n")
    out.write("one job's composed config: python -m bench <its overrides> --cfg job\n")
    return None


# launcher class name -> the commands it runs in the submitting process (submitit's Slurm
# executor refuses to start without srun; sbatch submits, and is what a login node has)
CLUSTER_COMMANDS = {"SlurmLauncher": ("sbatch", "srun")}


def register_bench_launchers() -> None:
    from hydra.core.plugins import Plugins

    from hydra_plugins.bench_launcher import launchers

    for name in ("SlurmLauncher", "LocalLauncher"):  # absent without hydra-submitit-launcher
        if hasattr(launchers, name):
            Plugins.instance().register(getattr(launchers, name))


def cluster_commands_problem(config: Any) -> Optional[str]:
    """The sentence to refuse a sweep whose launcher's cluster commands are not on PATH, or None."""
    target = str(OmegaConf.select(config, "hydra.launcher._target_", default="") or "")
    needed = CLUSTER_COMMANDS.get(target.rsplit(".", 1)[-1], ())
    if not (missing := [command for command in needed if shutil.which(command) is None]):
        return None
    choice = OmegaConf.select(config, "hydra.runtime.choices", default={}).get("hydra/launcher") or target
    return (
        f"hydra/launcher={choice} needs Slurm's {' and '.join(needed)} on PATH; not found: {', '.join(missing)}. "
        "Use hydra/launcher=slurm_local to run the jobs through submitit's local executor, or run on a Slurm "
        "login node"
    )
