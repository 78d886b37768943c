"""How gpu_check runs a check: in its own process (bench.api.run, the code `python -m bench` runs,
on a config composed as the command line would compose it: no new interpreter, CUDA context or
cuDNN autotuning per check), in a `python -m bench` child (DDP, whose ranks are processes of their
own; bench.api.run_child, so the child ends with gpu_check however gpu_check ends),
or the trainer-vs-minimal-loop comparison (bench.tools.overhead). Each returns (metrics, problem).

A signal during an in-process check ends its run the way it ends `python -m bench` (the run
KILLED, exit 130/143): bench.api.run raises it again, so gpu_check stops with it."""

from __future__ import annotations

import contextlib
import io
import math
from functools import partial
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from bench import api
from bench.errors import BenchError

Metrics = Dict[str, Any]
Outcome = Tuple[Optional[Metrics], str]


def _outcome(run: Callable[[], Any]) -> Outcome:
    """A run of bench.api (run, run_child) as (its record's radix_metrics, "") or (None, its [ERROR] line)."""
    from bench.results import strict

    try:
        done = run()
    except BenchError as exc:
        return None, f"[ERROR] {exc}"
    if done.error or done.metrics is None:
        return None, done.error or f"exit {done.exit_code}: the run wrote no record"
    return strict(done.metrics.to_metrics()), ""


def run_in_process(overrides: Sequence[str], run_dir: Path, rehearse: bool = False) -> Outcome:
    """The run `python -m bench <overrides> hydra.run.dir=<run_dir>` makes, in this process (bench.api.run),
    its output kept from gpu_check's table; in the rehearsal torch.compile on the eager backend."""
    quiet = contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO())
    with quiet[0], quiet[1], _cheap_compile() if rehearse else contextlib.nullcontext():
        return _outcome(lambda: api.run(list(overrides), run_dir, Path.cwd()))


def run_search_on_cpu(overrides: Sequence[str], _run_dir: Path) -> Outcome:
    """The rehearsal's find_max_batch: bench refuses the search on a CPU (it would grow the batch
    until the machine swaps), so the training run is started as the GPU test starts it
    (bench.train.loop.train): the search's trials, the weights put back, the run at the batch
    found. Nothing runs out of memory on a CPU: the search stops at its cap."""
    import torch

    from bench.config import compose
    from bench.train.loop import train

    with contextlib.redirect_stderr(io.StringIO()):
        try:
            result = train(compose(*overrides), torch.device("cpu"))
        except BenchError as exc:
            return None, f"[ERROR] {exc}"
    return {
        **result.extra.figures(),
        "batch_size": result.batch_size,
        "images_per_second": result.images_per_second,
    }, ""


@contextlib.contextmanager
def _cheap_compile() -> Any:
    """The rehearsal's torch.compile: dynamo captures the model as on a GPU, but the graph runs on
    the eager backend (inductor's C++ code generation takes most of a minute on a small CPU)."""
    import torch

    original = torch.compile
    torch.compile = partial(original, backend="eager")
    try:
        yield
    finally:
        torch.compile = original


def all_reduce_probe(on_gpu: bool) -> Tuple[str, str]:
    """(\"ok\" or what failed, the backend): a process group of one (NCCL on a GPU, gloo on a CPU)
    and one all-reduce whose sum is checked; the group is destroyed afterwards."""
    import torch
    import torch.distributed as dist

    backend = "nccl" if on_gpu else "gloo"
    device = torch.device("cuda", 0) if on_gpu else torch.device("cpu")
    try:
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
        try:
            tensor = torch.arange(4, dtype=torch.float32, device=device)
            dist.all_reduce(tensor)
            total = float(tensor.sum().item())
        finally:
            dist.destroy_process_group()
    except Exception as exc:  # what fails is the verdict
        return f"failed: {type(exc).__name__}: {str(exc)[:200]}", backend
    return ("ok" if total == 6.0 else f"wrong sum {total} (want 6.0)"), backend


def run_ddp(overrides: Sequence[str], run_dir: Path, on_gpu: bool) -> Outcome:
    """The DDP run as a `python -m bench` child that does not outlive gpu_check (its ranks are processes:
    bench.api.run_child), then gpu_check's own all-reduce probe."""
    metrics, problem = _outcome(lambda: api.run_child(overrides, run_dir))
    if metrics is None:
        return None, problem
    probe, backend = all_reduce_probe(on_gpu)
    return {**metrics, "all_reduce": probe, "backend": backend}, ""


def overhead_overrides(on_gpu: bool, threads: int) -> Tuple[List[str], str]:
    """bench.overhead's workload, as config keys and in words: on a GPU the card's own (ResNet-50,
    224 px, batch 256, bf16, channels_last); in the rehearsal the same path at a tiny size."""
    arch, size, batch, classes, steps, warmup = (
        ("resnet50", 224, 256, 1000, 20, 5) if on_gpu else ("resnet18", 32, 4, 10, 3, 1)
    )
    keys = [f"model.arch={arch}", f"data.image_size={size}", f"data.batch_size={batch}", f"data.num_classes={classes}"]
    keys += [f"train.steps_per_epoch={steps}", f"benchmark.warmup_steps={warmup}", f"cpu_threads={threads}"]
    return [*keys, "precision.channels_last=true"], f"{arch} {size}px batch {batch} bf16 channels_last"


def run_overhead(on_gpu: bool, echo: Callable[[str], None] = print) -> Outcome:
    """bench's trainer vs a minimal loop, one process, alternating (A B B A), bf16 + channels_last."""
    import torch

    from bench.tools.overhead import alternate_sides

    overrides, workload = overhead_overrides(on_gpu, torch.get_num_threads() if on_gpu else 1)
    device = torch.device("cuda", 0) if on_gpu else torch.device("cpu")
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # the trainer's warnings (a CPU run's TF32 note...)
            found = alternate_sides(overrides, "bf16", device, 2 if on_gpu else 1, "overhead", echo)
    except BenchError as exc:
        return None, f"[ERROR] {exc}"
    ratio = found.ratio("minimal")
    return {
        "overhead_ratio": ratio.ratio if math.isfinite(ratio.ratio) else math.nan,
        "bench_images_per_second": found.median("bench"),
        "minimal_images_per_second": found.median("minimal"),
        "per_round": [round(r, 3) for r in ratio.per_round],
        "overhead_workload": workload,
    }, ""


def max_batch_start(done: Dict[str, Metrics], free_mb: float, image_size: int) -> int:
    """find_max_batch's first batch: twice what the free memory holds at the memory per image an
    earlier check of this run measured (fp32 first; weights included, so an over-estimate per
    image), or 40 MB per 224 px image without one; a multiple of 8. The first trial runs out of
    memory, and the capped search (bench.train.build.MAX_PROBES) ends within a few trials."""
    per_image = 40.0 * (image_size / 224) ** 2
    for name in ("fp32", "tf32", "bf16", "channels_last", "amp_fp16"):
        m = done.get(name) or {}
        if m.get("peak_memory_mb") and m.get("batch_size"):
            per_image = float(m["peak_memory_mb"]) / float(m["batch_size"])
            break
    return max(8, math.ceil(2 * (free_mb / max(per_image, 1e-3)) / 8) * 8)
