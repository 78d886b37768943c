"""gpu_check's checks: what each runs (bench overrides, on a GPU and in the CPU rehearsal), where
(in gpu_check's own process, in a `python -m bench` child, or the overhead comparison) and how its
figures are judged. A judge gets `on_gpu`: the rehearsal on a CPU skips exactly the assertions
that only a CUDA GPU can meet (TF32 on, a grad scaler, NVML figures, CUDA kernels in the trace, a
real out-of-memory, the 0.98 overhead floor) and keeps every other one."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from bench.maths.stats import on_its_side

Metrics = Dict[str, Any]
Verdict = Tuple[bool, str]  # passed, the figures that say so (or why not)
Judge = Callable[[Metrics, Path, bool], Verdict]

IN_PROCESS, CHILD, OVERHEAD = "in-process", "child", "overhead"
OVERHEAD_FLOOR = 0.98  # bench's trainer / the minimal loop, on a GPU


@dataclass(frozen=True)
class Check:
    name: str
    what: str
    overrides: Tuple[str, ...]  # on a GPU
    judge: Judge
    where: str = IN_PROCESS
    rehearse: Optional[Tuple[str, ...]] = None  # on a CPU (the rehearsal), when not `overrides`

    def overrides_for(self, on_gpu: bool) -> Tuple[str, ...]:
        return self.overrides if on_gpu or self.rehearse is None else self.rehearse


def _rate(m: Metrics) -> str:
    return f"{m.get('images_per_second', 0):.0f} img/s"


def _trained(m: Metrics) -> bool:
    return m.get("images_per_second", 0) > 0 and math.isfinite(m.get("final_loss", math.nan))


def _flag(key: str, want: Any, cuda_only: bool = False) -> Judge:
    def judge(m: Metrics, _run: Path, on_gpu: bool) -> Verdict:
        ok = _trained(m) and (m.get(key) == want or (cuda_only and not on_gpu))
        return ok, f"{_rate(m)}, {key}={m.get(key)!r}, final loss {m.get('final_loss')}"

    return judge


def _compiled(m: Metrics, _run: Path, _on_gpu: bool) -> Verdict:
    ok = m.get("compile") is True and "compile_fallback" not in m and m.get("images_per_second", 0) > 0
    fell_back = f", fell back: {m['compile_fallback']}" if "compile_fallback" in m else ""
    return ok, f"{_rate(m)}, compiled={m.get('compile')}{fell_back}"


def _events_agree(m: Metrics, _run: Path, _on_gpu: bool) -> Verdict:
    """benchmark.sync=true: every step synchronises, so the steps' CUDA-event times add up to the window."""
    steps, mean, elapsed = m.get("measured_steps", 0), m.get("step_time_ms_mean"), m.get("elapsed_seconds")
    if not (steps and mean and elapsed):
        return False, "no step times or window in the result"
    ratio = steps * mean / 1000.0 / elapsed
    shown = on_its_side(ratio, 0.9 if ratio < 1 else 1.1, 3)  # a ratio of 1.1004 is not "1.100"
    return 0.9 <= ratio <= 1.1, f"sum of CUDA-event step times / window wall time = {shown} (0.9-1.1)"


def _ddp(gpus: int) -> Judge:
    """On 2+ GPUs: every GPU a rank, weights in sync, scaling. On one GPU there is nothing to keep in
    sync or to scale to: what it can prove is that the backend initialises, an all-reduce returns the
    right sum (gpu_check's own probe, `all_reduce`) and a DDP run of world_size 1 trains."""

    def judge(m: Metrics, _run: Path, _on_gpu: bool) -> Verdict:
        probe = m.get("all_reduce", "not run")
        if gpus >= 2:
            ok = m.get("world_size") == gpus and m.get("params_in_sync") is True
            return ok, (
                f"{_rate(m)} on {m.get('world_size')} GPUs, weights in sync: {m.get('params_in_sync')}, "
                f"scaling efficiency {m.get('scaling_efficiency', 'n/a')}; all_reduce {probe}"
            )
        ok = m.get("world_size") == 1 and m.get("images_per_second", 0) > 0 and probe == "ok"
        return ok, (
            f"{_rate(m)}, world_size {m.get('world_size')}, {m.get('backend', 'nccl')} initialised, "
            f"all_reduce {probe}; weight sync and scaling: n/a on 1 GPU"
        )

    return judge


def _nvml(m: Metrics, _run: Path, on_gpu: bool) -> Verdict:
    wanted = ("gpu_util_mean_pct", "gpu_power_mean_w", "energy_joules", "images_per_joule")
    missing = [k for k in wanted if k not in m]
    figures = ", ".join(f"{k}={m[k]:.1f}" for k in wanted if isinstance(m.get(k), (int, float)))
    if not on_gpu:  # no NVML on a CPU: the run itself is what the rehearsal checks
        return _trained(m), f"{_rate(m)}; NVML figures need a GPU" + (f" ({figures})" if figures else "")
    return not missing, figures + (f"; missing: {', '.join(missing)}" if missing else "")


def _max_batch(m: Metrics, _run: Path, on_gpu: bool) -> Verdict:
    asked, found = m.get("batch_size_requested"), m.get("batch_size_found")
    ok = False
    if isinstance(found, int) and isinstance(asked, int) and found > 0 and m.get("batch_size") == found:
        ok = m.get("images_per_second", 0) > 0 and (found < asked or not on_gpu)
    limit = "out of memory above" if on_gpu else "no out-of-memory on a CPU: the search stopped at"
    return ok, f"asked {asked}, {limit} {found}: trained at {m.get('batch_size')} ({_rate(m)})"


def _profiled(m: Metrics, run: Path, on_gpu: bool) -> Verdict:
    trace = run / "trace_rank0.json"
    if not trace.is_file():
        return False, "no trace_rank0.json"
    events = json.loads(trace.read_text()).get("traceEvents", [])
    kernels = sum(1 for e in events if str(e.get("cat", "")).lower() in ("kernel", "gpu_memcpy", "gpu_memset"))
    return (kernels > 0 if on_gpu else bool(events)), f"{len(events)} trace events, {kernels} on the GPU"


def _latency(m: Metrics, _run: Path, _on_gpu: bool) -> Verdict:
    p50, p99 = m.get("latency_ms_p50"), m.get("latency_ms_p99")
    ok = m.get("mode") == "inference" and p50 is not None and p99 is not None and 0 < p50 <= p99
    return ok, f"{_rate(m)}, latency p50 {p50} ms, p99 {p99} ms"


def _loader(m: Metrics, _run: Path, _on_gpu: bool) -> Verdict:
    ok = m.get("images_per_second", 0) > 0 and m.get("data") == "imagefolder"
    return ok, f"{_rate(m)} from image files, data wait {100 * m.get('data_wait_fraction', 0):.1f}%"


def _fit(m: Metrics, _run: Path, _on_gpu: bool) -> Verdict:
    if "fit_to_measure" not in m:
        return False, "the result has no fit_to_measure verdict"
    return True, f"fit_to_measure={m['fit_to_measure']}" + (f" ({m['fit_reasons']})" if m.get("fit_reasons") else "")


def _overhead(m: Metrics, _run: Path, on_gpu: bool) -> Verdict:
    ratio = m.get("overhead_ratio", math.nan)
    ok = math.isfinite(ratio) and (ratio >= OVERHEAD_FLOOR if on_gpu else ratio > 0)
    return ok, (
        f"bench {m.get('bench_images_per_second', 0):.0f} / minimal loop "
        f"{m.get('minimal_images_per_second', 0):.0f} img/s = {on_its_side(ratio, OVERHEAD_FLOOR, 3)} "
        f"(pass >= {OVERHEAD_FLOOR} on a GPU; rounds {m.get('per_round', [])})"
    )


def checks(gpus: int, images_root: str) -> List[Check]:
    """Every check, in the order gpu_check runs them."""
    bf16, bf16_last = ("precision=bf16",), ("precision=bf16", "precision.channels_last=true")
    scaler = _flag("grad_scaler", True, cuda_only=True)  # AMP fp16's; fp16 autocast needs CUDA: rehearsed in bf16
    ddp = ("distributed=ddp", f"distributed.nproc_per_node={max(gpus, 1)}")
    nccl, gloo = (*ddp, "distributed.backend=nccl"), (*ddp, "distributed.backend=gloo")  # on a GPU, in the rehearsal
    # NVML samples at the window's start and end and every 0.5 s: a window of 1.5 s has 5 samples
    nvml = ("precision=bf16", "train.steps_per_epoch=100000", "benchmark.measure_seconds=1.5")
    images = ("data=imagefolder", f"data.root={images_root}", "data.num_classes=10")
    loader = (*images, "data.num_workers=2", "data.pin_memory=true", "train.steps_per_epoch=10")
    # find_max_batch: + the first batch, estimated; no cuDNN autotuning of every batch size the search tries
    search = ("benchmark.find_max_batch=true", "train.steps_per_epoch=3", "cudnn_benchmark=false")
    tiny_search = ("benchmark.find_max_batch=true", "train.steps_per_epoch=2", "data.image_size=8", "data.batch_size=2")
    return [
        Check("fp32", "fp32 training", ("precision=fp32",), _flag("tf32", False)),
        Check("tf32", "TF32 matmuls and convolutions", ("precision=tf32",), _flag("tf32", True, cuda_only=True)),
        Check("amp_fp16", "AMP fp16 with the grad scaler", ("precision=amp_fp16",), scaler, rehearse=bf16),
        Check("bf16", "bf16 autocast", bf16, _flag("autocast_dtype", "bfloat16")),
        Check("channels_last", "bf16 + channels_last", bf16_last, _flag("channels_last", True)),
        Check("cuda_events", "CUDA-event timing vs the wall clock", ("benchmark.sync=true",), _events_agree),
        Check("nvml", "NVML telemetry and energy", nvml, _nvml, rehearse=bf16),
        Check("profiler", "profiler with CUDA activity", ("profile.enabled=true", "profile.steps=3"), _profiled),
        Check("inference", "inference latency", ("mode=inference", "precision=bf16"), _latency),
        Check("fit_to_measure", "fit-to-measure verdict of a GPU run", ("precision=bf16",), _fit),
        Check("pinned_loader", "pinned-memory loader on real image files", loader, _loader),
        Check("find_max_batch", "largest batch against a real out-of-memory", search, _max_batch, rehearse=tiny_search),
        Check("compile", "torch.compile", ("precision=bf16", "compile=true"), _compiled),
        Check("overhead", "bench's trainer vs a minimal loop (bench.overhead)", (), _overhead, where=OVERHEAD),
        Check("ddp_nccl", f"DDP over NCCL on {gpus} GPU(s)", nccl, _ddp(gpus), where=CHILD, rehearse=gloo),
    ]


NAMES = tuple(check.name for check in checks(1, ""))  # the checks' names, in their order
