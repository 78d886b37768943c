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


def run_from_hydra(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    hydra_cfg = HydraConfig.get()
    try:
        plain = OmegaConf.to_container(cfg, resolve=True)
    except Exception as exc:  # noqa: BLE001 - a broken ${...} interpolation in user overrides
        error(f"the config could not be resolved: {exc}")
        sys.exit(EXIT_CONFIG)
    plain.pop("defaults", None)
    code = run(plain, Path(hydra_cfg.runtime.output_dir), Path(hydra_cfg.runtime.cwd),
               overrides=list(hydra_cfg.overrides.task))
    if code:
        sys.exit(code)


class _Terminated(BaseException):
    """Raised in the main thread on SIGTERM so the run can end KILLED instead of RUNNING."""


def _raise_terminated(signum: int, _frame: Any) -> None:
    raise _Terminated(f"terminated by signal {signal.Signals(signum).name}")


def run(cfg: Dict[str, Any], out_dir: Path, launch_dir: Path, overrides: Optional[List[str]] = None) -> int:
    """Run one benchmark; returns the process exit code."""
    device = _checked_device(cfg)
    if device is None:
        return EXIT_CONFIG

    from bench.environment import collect_environment
    from bench.results import final_line, headline

    environment = collect_environment()
    tracker = _open_tracker(cfg, launch_dir, environment, overrides or [])
    previous_sigterm = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        metrics = _benchmark(cfg, device, out_dir, environment, tracker)
        tracker.finish("FINISHED")
    except BaseException as exc:  # noqa: BLE001 - every way out ends the MLflow run with a status
        return _fail(exc, cfg, device, out_dir, tracker)
    finally:
        signal.signal(signal.SIGTERM, previous_sigterm)

    log.info(headline(metrics))
    log.info("results in %s", out_dir)
    print(final_line(metrics), flush=True)
    return 0


def _checked_device(cfg: Dict[str, Any]) -> Any:
    """Validate the config, pick the device, check the precision against it: None (and a
    printed [ERROR]) when the run cannot start. No MLflow run exists yet."""
    try:
        validate(cfg)
    except ConfigError as exc:
        error(str(exc))
        return None

    if cfg["mode"] == "storage":  # the storage benchmark emulates the accelerators: no device needed
        import torch

        return torch.device("cpu")
    from bench.device import DeviceError, resolve_device  # torch is imported from here on
    from bench.precision import build_precision

    try:
        device = resolve_device(cfg["allow_cpu"])
        build_precision(cfg["precision"], device)
    except (DeviceError, ConfigError) as exc:
        error(str(exc))
        return None
    return device


def _benchmark(cfg: Dict[str, Any], device: Any, out_dir: Path, environment: Mapping[str, Any],
               tracker: Any) -> Dict[str, Any]:
    if cfg["mode"] == "storage":
        from bench.iobench import run_storage_benchmark

        return run_storage_benchmark(cfg, out_dir, environment, tracker)
    from bench.device import device_name
    from bench.gpu_monitor import GpuMonitor
    from bench.results import summarize, write_outputs
    from bench.storage import build_storage
    from bench.trainer import train

    on_finish = None
    if cfg["storage"]["save_checkpoint"]:
        storage = build_storage(cfg["storage"], out_dir)

        def on_finish(model: Any, optimizer: Any) -> Dict[str, Any]:
            state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
            return storage.save_checkpoint(state, cfg["storage"]["checkpoint_name"])

    monitor = GpuMonitor(device.index or 0) if device.type == "cuda" else None
    result = train(cfg, device, monitor=monitor, on_finish=on_finish)
    metrics = summarize(result, cfg, device.type, device_name(device), world_size=1)
    metrics.update(result.gpu)
    metrics.update({k: v for k, v in result.extra.items() if k != "checkpoint_path"})
    files = write_outputs(out_dir, cfg, environment, metrics, result)
    _log_results(tracker, metrics, result, files, out_dir, cfg["tracking"]["log_step_metrics"])
    return metrics


def _fail(exc: BaseException, cfg: Mapping[str, Any], device: Any, out_dir: Path, tracker: Any) -> int:
    """End the MLflow run with the right status, say what happened in one line, pick the exit code."""
    import torch

    from bench.device import device_name

    if isinstance(exc, (KeyboardInterrupt, _Terminated)):
        reason = str(exc) or "KeyboardInterrupt"
        tracker.finish("KILLED", error=reason)
        error(f"run interrupted: {reason}")
        return 130 if isinstance(exc, KeyboardInterrupt) else 143
    if isinstance(exc, torch.cuda.OutOfMemoryError):
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
                  overrides: List[str]) -> Any:
    from bench.tracking import Tracker, flatten, resolve_tracking_uri

    tracking = cfg["tracking"]
    if not tracking["enabled"]:
        return Tracker()
    run_name = tracking["run_name"] or (
        f"{cfg['model']['arch']}-{cfg['precision']['name']}-bs{cfg['data']['batch_size']}"
    )
    tags = {f"env.{k}": v for k, v in flatten(environment).items()}
    tags["overrides"] = " ".join(overrides)
    tracker = Tracker.start(resolve_tracking_uri(tracking["uri"], launch_dir), tracking["experiment"],
                            run_name, tags, parent_run_id=tracking.get("parent_run_id"))
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
