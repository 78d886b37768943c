"""`python -m bench.tools.gpu_check`: the first command on a new GPU box. Runs every GPU path bench
has, a few steps each, each as the `python -m bench` command a user would type, and prints a
pass/fail table with its figures; exit 1 when any check fails, 2 where there is no CUDA GPU.

    python -m bench.tools.gpu_check                       # every check, ResNet-18 at 224 px, batch 64
    python -m bench.tools.gpu_check --only bf16,ddp_nccl  # some of them
    python -m bench.tools.gpu_check --keep ./gpu-check    # keep each check's run directory

The checks: fp32, TF32, AMP fp16 with the grad scaler, bf16, channels_last, torch.compile, CUDA
event timing against the wall clock, DDP over NCCL on every local GPU, NVML telemetry and energy,
benchmark.find_max_batch against a real out-of-memory, the profiler with CUDA activity, inference
latency, the pinned-memory loader on real JPEGs, and the fit-to-measure verdict of a GPU run.
Each check reads the run's final `radix_metrics` line (and, for the profiler, its trace file).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

Metrics = Dict[str, Any]
Verdict = Tuple[bool, str]  # passed, the figures that say so (or why not)


@dataclass(frozen=True)
class Check:
    name: str
    what: str
    overrides: Tuple[str, ...]
    judge: Callable[[Metrics, Path], Verdict]


def _rate(m: Metrics) -> str:
    return f"{m.get('images_per_second', 0):.0f} img/s"


def _flag(key: str, want: Any) -> Callable[[Metrics, Path], Verdict]:
    def judge(m: Metrics, _run: Path) -> Verdict:
        ok = m.get(key) == want and m.get("images_per_second", 0) > 0 and math.isfinite(m.get("final_loss", math.nan))
        return ok, f"{_rate(m)}, {key}={m.get(key)!r}, final loss {m.get('final_loss')}"

    return judge


def _compiled(m: Metrics, _run: Path) -> Verdict:
    ok = m.get("compile") is True and "compile_fallback" not in m and m.get("images_per_second", 0) > 0
    return ok, f"{_rate(m)}, compiled={m.get('compile')}" + (
        f", fell back: {m['compile_fallback']}" if "compile_fallback" in m else ""
    )


def _events_agree(m: Metrics, _run: Path) -> Verdict:
    """benchmark.sync=true: every step synchronises, so the steps' CUDA-event times add up to the window."""
    steps, mean, elapsed = m.get("measured_steps", 0), m.get("step_time_ms_mean"), m.get("elapsed_seconds")
    if not (steps and mean and elapsed):
        return False, "no step times or window in the result"
    ratio = steps * mean / 1000.0 / elapsed
    return 0.9 <= ratio <= 1.1, f"sum of CUDA-event step times / window wall time = {ratio:.3f} (0.9-1.1)"


def _ddp(gpus: int) -> Callable[[Metrics, Path], Verdict]:
    def judge(m: Metrics, _run: Path) -> Verdict:
        ok = m.get("world_size") == gpus and m.get("params_in_sync") is True
        return ok, (
            f"{_rate(m)} on {m.get('world_size')} GPUs, weights in sync: {m.get('params_in_sync')}, "
            f"scaling efficiency {m.get('scaling_efficiency', 'n/a')}"
        )

    return judge


def _nvml(m: Metrics, _run: Path) -> Verdict:
    wanted = ("gpu_util_mean_pct", "gpu_power_mean_w", "energy_joules", "images_per_joule")
    missing = [k for k in wanted if k not in m]
    figures = ", ".join(f"{k}={m[k]:.1f}" for k in wanted if isinstance(m.get(k), (int, float)))
    return not missing, figures + (f"; missing: {', '.join(missing)}" if missing else "")


def _max_batch(m: Metrics, _run: Path) -> Verdict:
    asked, found = m.get("batch_size_requested"), m.get("batch_size_found")
    ok = isinstance(found, int) and isinstance(asked, int) and 0 < found < asked and m.get("images_per_second", 0) > 0
    return ok, f"asked {asked}, out of memory above {found}: trained at {m.get('batch_size')} ({_rate(m)})"


def _profiled(m: Metrics, run: Path) -> Verdict:
    trace = run / "trace_rank0.json"
    if not trace.is_file():
        return False, "no trace_rank0.json"
    events = json.loads(trace.read_text()).get("traceEvents", [])
    kernels = sum(1 for e in events if str(e.get("cat", "")).lower() in ("kernel", "gpu_memcpy", "gpu_memset"))
    return kernels > 0, f"{len(events)} trace events, {kernels} on the GPU (kernels, copies)"


def _latency(m: Metrics, _run: Path) -> Verdict:
    p50, p99 = m.get("latency_ms_p50"), m.get("latency_ms_p99")
    ok = m.get("mode") == "inference" and p50 is not None and p99 is not None and 0 < p50 <= p99
    return ok, f"{_rate(m)}, latency p50 {p50} ms, p99 {p99} ms"


def _loader(m: Metrics, _run: Path) -> Verdict:
    ok = m.get("images_per_second", 0) > 0 and m.get("data") == "imagefolder"
    return ok, f"{_rate(m)} from JPEGs, data wait {100 * m.get('data_wait_fraction', 0):.1f}%"


def _fit(m: Metrics, _run: Path) -> Verdict:
    if "fit_to_measure" not in m:
        return False, "the result has no fit_to_measure verdict"
    return True, f"fit_to_measure={m['fit_to_measure']}" + (f" ({m['fit_reasons']})" if m.get("fit_reasons") else "")


def checks(gpus: int, digits_root: str) -> List[Check]:
    return [
        Check("fp32", "fp32 training", ("precision=fp32",), _flag("tf32", False)),
        Check("tf32", "TF32 matmuls and convolutions", ("precision=tf32",), _flag("tf32", True)),
        Check("amp_fp16", "AMP fp16 with the grad scaler", ("precision=amp_fp16",), _flag("grad_scaler", True)),
        Check("bf16", "bf16 autocast", ("precision=bf16",), _flag("autocast_dtype", "bfloat16")),
        Check(
            "channels_last",
            "bf16 + channels_last",
            ("precision=bf16", "precision.channels_last=true"),
            _flag("channels_last", True),
        ),
        Check("compile", "torch.compile", ("precision=bf16", "compile=true"), _compiled),
        Check("cuda_events", "CUDA-event timing vs the wall clock", ("benchmark.sync=true",), _events_agree),
        Check(
            "ddp_nccl",
            f"DDP over NCCL on {gpus} GPU(s)",
            ("distributed=ddp", f"distributed.nproc_per_node={gpus}", "distributed.backend=nccl"),
            _ddp(gpus),
        ),
        Check("nvml", "NVML telemetry and energy", ("precision=bf16",), _nvml),
        Check(
            "find_max_batch",
            "largest batch against a real out-of-memory",
            ("benchmark.find_max_batch=true", "data.batch_size=65536", "train.steps_per_epoch=5"),
            _max_batch,
        ),
        Check("profiler", "profiler with CUDA activity", ("profile.enabled=true", "profile.steps=3"), _profiled),
        Check("inference", "inference latency", ("mode=inference", "precision=bf16"), _latency),
        Check(
            "pinned_loader",
            "pinned-memory loader on real JPEGs",
            (
                "data=imagefolder",
                f"data.root={digits_root}",
                "data.num_classes=10",
                "data.num_workers=2",
                "data.pin_memory=true",
                "train.steps_per_epoch=10",
            ),
            _loader,
        ),
        Check("fit_to_measure", "fit-to-measure verdict of a GPU run", ("precision=bf16",), _fit),
    ]


Runner = Callable[[Sequence[str], Path], Tuple[Optional[Metrics], str]]


def run_bench(overrides: Sequence[str], run_dir: Path) -> Tuple[Optional[Metrics], str]:
    """`python -m bench <overrides>` in its own process; its final line, or why there is none."""
    proc = subprocess.run(
        [sys.executable, "-m", "bench", *overrides, f"hydra.run.dir={run_dir}"], capture_output=True, text=True
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith('{"radix_metrics"')]
    if proc.returncode != 0 or not lines:
        errors = [line for line in proc.stderr.splitlines() if line.startswith("[ERROR]")]
        return None, errors[-1] if errors else f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}"
    return json.loads(lines[-1])["radix_metrics"], ""


def run_checks(
    chosen: Sequence[Check],
    base: Sequence[str],
    work: Path,
    runner: Runner = run_bench,
    echo: Callable[[str], None] = print,
) -> List[Tuple[Check, bool, str]]:
    rows = []
    for check in chosen:
        run_dir = work / check.name
        metrics, problem = runner([*base, *check.overrides], run_dir)
        passed, figures = check.judge(metrics, run_dir) if metrics is not None else (False, problem)
        rows.append((check, passed, figures))
        echo(f"{'PASS' if passed else 'FAIL'}  {check.name:<15} {figures}")
    return rows


def table(rows: Sequence[Tuple[Check, bool, str]]) -> str:
    lines = ["| check | what | result | figures |", "|---|---|---|---|"]
    lines += [f"| {c.name} | {c.what} | {'pass' if ok else 'FAIL'} | {figures} |" for c, ok, figures in rows]
    failed = sum(not ok for _, ok, _ in rows)
    lines.append(
        f"\ngpu_check: {len(rows) - failed} of {len(rows)} checks passed"
        + (f"; failed: {', '.join(c.name for c, ok, _ in rows if not ok)}" if failed else "")
    )
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tools.gpu_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet18", help="a torchvision classification model (default resnet18)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=20, help="measured steps per check")
    parser.add_argument("--only", help="comma-separated check names (default: all)")
    parser.add_argument("--keep", type=Path, help="keep every check's run directory here")
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        build = f"built for CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        print(
            f"[ERROR] gpu_check needs a CUDA GPU: torch.cuda.is_available() is False here "
            f"(torch {torch.__version__}, {build}); run it on the GPU machine",
            file=sys.stderr,
        )
        return 2
    gpus = torch.cuda.device_count()
    base = [
        f"model.arch={args.model}",
        "data=synthetic",
        f"data.batch_size={args.batch_size}",
        "data.image_size=224",
        "train.epochs=1",
        f"train.steps_per_epoch={args.steps}",
        "benchmark.warmup_steps=5",
        "benchmark.progress=false",
        "tracking.enabled=false",
    ]
    with tempfile.TemporaryDirectory(prefix="bench-gpu-check-") as tmp:
        work = args.keep or Path(tmp)
        from bench.data.digits import write_digits

        write_digits(str(work / "digits"))
        chosen = checks(gpus, str(work / "digits"))
        if args.only:
            names = {n.strip() for n in args.only.split(",")}
            unknown = names - {c.name for c in chosen}
            if unknown:
                print(
                    f"[ERROR] --only={args.only!r}: no check named {', '.join(sorted(unknown))}; accepted "
                    + ", ".join(c.name for c in chosen),
                    file=sys.stderr,
                )
                return 2
            chosen = [c for c in chosen if c.name in names]
        print(
            f"{gpus} GPU(s): {torch.cuda.get_device_name(0)}; {len(chosen)} checks, {args.model}, "
            f"batch {args.batch_size}, {args.steps} steps each",
            flush=True,
        )
        rows = run_checks(chosen, base, work)
    print(table(rows), flush=True)
    return 0 if all(ok for _, ok, _ in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
