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
    try:
        validate(cfg)
    except ConfigError as exc:
        error(str(exc))
        return EXIT_CONFIG

    import torch  # heavy imports start here, after the cheap checks

    from bench.device import DeviceError, device_name, resolve_device
    from bench.precision import build_precision

    try:
        device = resolve_device(cfg["allow_cpu"])
        build_precision(cfg["precision"], device)  # checks the precision against the device
    except (DeviceError, ConfigError) as exc:
        error(str(exc))
        return EXIT_CONFIG

    from bench.environment import collect_environment
    from bench.gpu_monitor import GpuMonitor
    from bench.results import final_line, summarize, write_outputs
    from bench.storage import build_storage
    from bench.tracking import Tracker, resolve_tracking_uri
    from bench.trainer import train

    environment = collect_environment()
    tracker = _open_tracker(cfg, launch_dir, environment, overrides or [])
    previous_sigterm = signal.signal(signal.SIGTERM, _raise_terminated)
    storage = build_storage(cfg["storage"], out_dir)
    try:
        on_finish = None
        if cfg["storage"]["save_checkpoint"]:
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
        tracker.finish("FINISHED")
    except (KeyboardInterrupt, _Terminated) as exc:
        tracker.finish("KILLED", error=str(exc) or "interrupted (KeyboardInterrupt)")
        error(f"run interrupted: {str(exc) or 'KeyboardInterrupt'}")
        return 130 if isinstance(exc, KeyboardInterrupt) else 143
    except torch.cuda.OutOfMemoryError as exc:
        batch = cfg["data"]["batch_size"]
        message = (f"out of memory at data.batch_size={batch} on {device_name(device)}: "
                   f"try data.batch_size={max(1, batch // 2)}")
        tracker.finish("FAILED", error=f"OutOfMemoryError: {message}")
        error(message)
        log.debug("out of memory: %s", exc)
        return EXIT_FAILED
    except Exception as exc:  # noqa: BLE001 - any crash ends the MLflow run FAILED with its reason
        reason = f"{type(exc).__name__}: {exc}"
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "error.txt").write_text(traceback.format_exc())
        tracker.log_artifacts([out_dir / "error.txt"])
        tracker.finish("FAILED", error=reason)
        error(f"run failed: {reason} (traceback in {out_dir / 'error.txt'})")
        return EXIT_FAILED
    finally:
        signal.signal(signal.SIGTERM, previous_sigterm)

    log.info("%s %s bs=%d on %s: %.1f images/s, step p50 %.2f ms, p99 %.2f ms (%d steps, %.2f s)",
             metrics["model"], metrics["precision"], metrics["batch_size"], metrics["device_name"],
             metrics["images_per_second"], metrics["step_time_ms_p50"], metrics["step_time_ms_p99"],
             metrics["measured_steps"], metrics["elapsed_seconds"])
    log.info("results in %s", out_dir)
    print(final_line(metrics), flush=True)
    return 0


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
