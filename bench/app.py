"""One run, from a composed config to files, MLflow and the final stdout line.

Order matters: validate (no torch), pick the device, check the precision against it, and
only then open an MLflow run, so a bad config never leaves a run behind. Once the run is
open, every way out (success, error, Ctrl-C, SIGTERM) ends it with a final status.
"""

from __future__ import annotations

import logging
import signal
import sys
import traceback
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

from omegaconf import DictConfig, OmegaConf

from bench.validate import ConfigError, validate

log = logging.getLogger("bench")

EXIT_CONFIG = 2  # the config or the device cannot run this
EXIT_FAILED = 1  # the run started and failed


def error(message: str) -> None:
    print(f"[ERROR] {message}", file=sys.stderr, flush=True)


def run_from_hydra(cfg: DictConfig) -> int:
    """The Hydra task. A single run exits with its code; a multirun job returns it instead
    (an exit would end the whole sweep), and bench.sweep counts the failures."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from bench import sweep

    hydra_cfg = HydraConfig.get()
    in_sweep = hydra_cfg.mode == RunMode.MULTIRUN
    try:
        plain = OmegaConf.to_container(cfg, resolve=True)
    except Exception as exc:  # noqa: BLE001 - a broken ${...} interpolation in user overrides
        error(f"the config could not be resolved: {exc}")
        code = EXIT_CONFIG
    else:
        plain.pop("defaults", None)
        code = run(plain, Path(hydra_cfg.runtime.output_dir), Path(hydra_cfg.runtime.cwd),
                   overrides=list(hydra_cfg.overrides.task),
                   sweep_job=sweep.current_job(hydra_cfg) if in_sweep else None)
    if in_sweep and code not in (130, 143):  # Ctrl-C / SIGTERM still stop the whole sweep
        return code
    if code:
        sys.exit(code)
    return code


class _Terminated(BaseException):
    """Raised in the main thread on SIGTERM so the run can end KILLED instead of RUNNING."""


def _raise_terminated(signum: int, _frame: Any) -> None:
    raise _Terminated(f"terminated by signal {signal.Signals(signum).name}")


def run(cfg: Dict[str, Any], out_dir: Path, launch_dir: Path, overrides: Optional[List[str]] = None,
        sweep_job: Optional[Mapping[str, Any]] = None) -> int:
    """Run one benchmark; returns the process exit code. `sweep_job` (parent run id, job
    number) is set for the jobs of a multirun: they run in processes of their own and a job
    that cannot start still leaves a FAILED child run with the reason."""
    device, problem = _checked_device(cfg)
    if device is None:
        if sweep_job:  # a job of a sweep that cannot run: its reason goes to the report and the child run
            out_dir.mkdir(parents=True, exist_ok=True)
            (out_dir / "error.txt").write_text(problem + "\n")
            if sweep_job.get("parent_run_id"):
                _open_tracker(cfg, launch_dir, {}, overrides or [], sweep_job).finish("FAILED", error=problem)
        return EXIT_CONFIG

    from bench.distributed import outside_launcher_context
    from bench.environment import collect_environment
    from bench.results import final_line, headline

    joined = outside_launcher_context(cfg)
    if joined is not None and not joined.is_reporter:
        return _run_joined_rank(cfg, joined, out_dir)
    if joined is None and cfg["mode"] == "train" and cfg["distributed"]["node_rank"] > 0:
        return _run_follower_node(cfg, out_dir)

    environment = collect_environment()
    tracker = _open_tracker(cfg, launch_dir, environment, overrides or [], sweep_job)
    previous_sigterm = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        metrics = _benchmark(cfg, device, out_dir, environment, tracker, launched=sweep_job is not None)
        tracker.finish("FINISHED")
    except BaseException as exc:  # noqa: BLE001 - every way out ends the MLflow run with a status
        return _fail(exc, cfg, device, out_dir, tracker)
    finally:
        signal.signal(signal.SIGTERM, previous_sigterm)

    log.info(headline(metrics))
    log.info("results in %s", out_dir)
    print(final_line(metrics), flush=True)
    return 0


def _run_joined_rank(cfg: Dict[str, Any], ctx: Any, out_dir: Path) -> int:
    """A rank other than 0 under torchrun/Slurm: train, hand the timing to rank 0, report nothing."""
    from bench.distributed import run_rank, setup_rank_logging

    setup_rank_logging(out_dir, ctx.rank)
    try:
        run_rank(cfg, ctx, out_dir)
    except Exception as exc:  # noqa: BLE001 - one line here; rank 0 reports the run
        error(f"rank {ctx.rank} failed: {type(exc).__name__}: {exc}")
        return EXIT_FAILED
    return 0


def _run_follower_node(cfg: Dict[str, Any], out_dir: Path) -> int:
    """Node 1.. of a multi-node run bench launches itself: start this node's workers; node 0
    (which holds rank 0) reports the run."""
    from bench.distributed import WorkerFailure, launch

    try:
        launch(cfg, out_dir)
    except Exception as exc:  # noqa: BLE001 - a worker failure, or a rendezvous that never completed
        reason = str(exc) if isinstance(exc, WorkerFailure) else f"{type(exc).__name__}: {exc}"
        error(f"node {cfg['distributed']['node_rank']} failed: {reason}")
        return EXIT_FAILED
    log.info("node %d done; node 0 reports the run", cfg["distributed"]["node_rank"])
    return 0


def _checked_device(cfg: Dict[str, Any]) -> tuple:
    """Validate the config, pick the device, check the precision against it: (device, None),
    or (None, the one-line problem, also printed as [ERROR]) when the run cannot start.
    No MLflow run exists yet."""
    try:
        validate(cfg)
    except ConfigError as exc:
        error(str(exc))
        return None, str(exc)

    if cfg["mode"] == "storage":  # the storage benchmark emulates the accelerators: no device needed
        import torch

        return torch.device("cpu"), None
    from bench.device import DeviceError, resolve_device  # torch is imported from here on
    from bench.precision import build_precision

    try:
        device = resolve_device(cfg["allow_cpu"])
        build_precision(cfg["precision"], device)
        _check_gpu_count(cfg, device)
    except (DeviceError, ConfigError) as exc:
        error(str(exc))
        return None, str(exc)
    return device, None


def _check_gpu_count(cfg: Mapping[str, Any], device: Any) -> None:
    import torch

    nproc = cfg["distributed"]["nproc_per_node"]
    if device.type == "cuda" and nproc > torch.cuda.device_count():
        raise ConfigError("distributed.nproc_per_node", nproc,
                          f"at most {torch.cuda.device_count()} (the GPUs visible on this node; one per process)")


def _benchmark(cfg: Dict[str, Any], device: Any, out_dir: Path, environment: Mapping[str, Any],
               tracker: Any, launched: bool = False) -> Dict[str, Any]:
    if cfg["mode"] == "storage":
        from bench.iobench import run_storage_benchmark

        return run_storage_benchmark(cfg, out_dir, environment, tracker)

    from bench.device import device_name
    from bench.distributed import RankContext, launch, outside_launcher_context, run_rank, world_size
    from bench.results import merge_ranks, summarize, write_outputs

    joined = outside_launcher_context(cfg)
    if joined is not None:  # rank 0 under torchrun/Slurm
        from bench.distributed import setup_rank_logging

        setup_rank_logging(out_dir, 0, own_process=False)  # this process prints the final line
        outcome = run_rank(cfg, joined, out_dir)
    elif launched or world_size(cfg) > 1:  # workers in processes of their own
        outcome = launch(cfg, out_dir)
    else:
        outcome = run_rank(cfg, RankContext(), out_dir)
    if outcome is None:  # a node of a multi-node launch that does not hold rank 0
        return {}
    result, ranks = merge_ranks(outcome["result"], outcome["ranks"])
    metrics = summarize(result, cfg, device.type, device_name(device), world_size=len(ranks), ranks=ranks)
    metrics.update(result.gpu)
    metrics.update({k: v for k, v in result.extra.items() if k != "checkpoint_path"})
    files = write_outputs(out_dir, cfg, environment, metrics, result, extra={
        "mlflow_run_id": tracker.run_id,
        "ranks": [{k: v for k, v in r.items() if k not in ("step_times_ms", "data_wait_ms")} for r in ranks]})
    _log_results(tracker, metrics, result, files, out_dir, cfg["tracking"]["log_step_metrics"])
    return metrics


def _fail(exc: BaseException, cfg: Mapping[str, Any], device: Any, out_dir: Path, tracker: Any) -> int:
    """End the MLflow run with the right status, say what happened in one line, pick the exit code."""
    import torch

    from bench.device import device_name

    from torch.distributed.elastic.multiprocessing.api import SignalException

    if isinstance(exc, (KeyboardInterrupt, _Terminated, SignalException)):
        reason = str(exc) or "KeyboardInterrupt"
        tracker.finish("KILLED", error=reason)
        error(f"run interrupted: {reason}")
        return 130 if isinstance(exc, KeyboardInterrupt) or "SIGINT" in reason else 143
    if isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc).lower() \
            or "OutOfMemoryError" in str(exc):  # a worker's OOM arrives as a WorkerFailure
        batch = cfg["data"]["batch_size"]
        message = (f"out of memory at data.batch_size={batch} on {device_name(device)}: "
                   f"try data.batch_size={max(1, batch // 2)}")
        tracker.finish("FAILED", error=f"OutOfMemoryError: {message}")
        error(message)
        return EXIT_FAILED
    if not isinstance(exc, Exception):  # SystemExit and friends: not ours to swallow
        tracker.finish("FAILED", error=f"{type(exc).__name__}: {exc}")
        raise exc
    reason = f"{type(exc).__name__}: {exc}"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "error.txt").write_text("".join(traceback.format_exception(exc)))
    tracker.log_artifacts([out_dir / "error.txt"])
    tracker.finish("FAILED", error=reason)
    error(f"run failed: {reason} (traceback in {out_dir / 'error.txt'})")
    return EXIT_FAILED


def _open_tracker(cfg: Mapping[str, Any], launch_dir: Path, environment: Mapping[str, Any],
                  overrides: List[str], sweep_job: Optional[Mapping[str, Any]] = None) -> Any:
    from bench.tracking import Tracker, flatten, resolve_tracking_uri

    tracking = cfg["tracking"]
    if not tracking["enabled"]:
        return Tracker()
    if cfg["mode"] == "storage":
        default_name = f"storage-{cfg['storage']['workload']['name']}-{cfg['storage']['name']}-c{cfg['storage']['clients']}"
    else:
        world = cfg["distributed"]["nproc_per_node"] * cfg["distributed"]["nnodes"]
        default_name = f"{cfg['model']['arch']}-{cfg['precision']['name']}-bs{cfg['data']['batch_size']}" + (
            f"-x{world}" if world > 1 else "")
    run_name = tracking["run_name"] or default_name
    tags = {f"env.{k}": v for k, v in flatten(environment).items()}
    tags["overrides"] = " ".join(overrides)
    parent = None
    if sweep_job:
        parent = sweep_job.get("parent_run_id")
        tags.update({"sweep.job": str(sweep_job["job"]), "sweep.dir": str(sweep_job["dir"])})
        run_name = f"{run_name}-job{sweep_job['job']}"
    tracker = Tracker.start(resolve_tracking_uri(tracking["uri"], launch_dir), tracking["experiment"],
                            run_name, tags, parent_run_id=parent)
    tracker.log_params(cfg)
    return tracker


def _log_results(tracker: Any, metrics: Mapping[str, Any], result: Any, files: List[Path], out_dir: Path,
                 log_steps: bool) -> None:
    if not tracker.active:
        return
    for epoch in result.epochs:
        tracker.log_metrics({"epoch_images_per_second": epoch.images_per_second,
                             "epoch_seconds": epoch.seconds, "epoch_loss": epoch.loss, "epoch_lr": epoch.lr},
                            step=epoch.epoch)
    if log_steps:
        tracker.log_series("step_time_ms", result.step_times_ms)
    tracker.log_metrics(metrics)
    tracker.set_tags({"model": metrics["model"], "precision": metrics["precision"],
                      "device_name": metrics["device_name"], "unstable": metrics["unstable"]})
    logs = sorted(out_dir.glob("*.log"))
    tracker.log_artifacts([*files, *logs, out_dir / ".hydra"])
