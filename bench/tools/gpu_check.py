"""`python -m bench.tools.gpu_check`: the first command on a new GPU box. Runs every GPU path bench
has, a few steps each, and prints a pass/fail table with its figures; exit 1 when any check fails,
2 where there is no CUDA GPU (or an argument is wrong), 130/143 when interrupted.

    python -m bench.tools.gpu_check                       # every check, ResNet-18 at 224 px, batch 64
    python -m bench.tools.gpu_check --budget-s 120        # stop after 120 s with the checks done so far
    python -m bench.tools.gpu_check --only bf16,ddp_nccl  # some of them
    python -m bench.tools.gpu_check --keep ./gpu-check    # keep each check's run directory
    python -m bench.tools.gpu_check --rehearse            # every check's code path on the CPU, tiny sizes

The checks (bench.tools.gpu_checks.checks): fp32, TF32, AMP fp16 with the grad scaler, bf16,
channels_last, CUDA-event timing against the wall clock, NVML telemetry and energy, the profiler
with CUDA activity, inference latency, the fit-to-measure verdict, the pinned-memory loader on real
image files, benchmark.find_max_batch against a real out-of-memory (from a memory estimate, a
capped search), torch.compile, bench's trainer against a minimal loop (ResNet-50, 224 px, batch
256, bf16, channels_last: pass at >= 0.98) and DDP over NCCL (on one GPU: the backend initialises,
an all-reduce sums right, world_size 1; sync and scaling need 2+). All but DDP run in this one
process, each as the run `python -m bench` makes (bench.api.run); DDP's ranks are processes, under
a `python -m bench` child that ends with gpu_check (bench.api.run_child: SIGTERM, Ctrl-C or SIGKILL;
its run KILLED).
`--rehearse` runs the same code on a CPU and skips only the assertions a CPU cannot meet.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any, Callable, ContextManager, Dict, List, Optional, Sequence, Tuple
from unittest import mock

from bench import api
from bench.config import compose
from bench.errors import EXIT_SIGINT, BenchError, Interrupted, print_error
from bench.machine.children import exit_without_teardown
from bench.machine.writable import writable_dir_refusal
from bench.tools import ab
from bench.tools.gpu_checks.checks import CHILD, NAMES, OVERHEAD, Check, Metrics, checks

Outcome = Tuple[Optional[Metrics], str]  # a run's figures, or None and why
Runner = Callable[[Sequence[str], Path], Outcome]
Row = Tuple[Check, Optional[bool], str]  # passed (None: not run), figures


class Budget:
    """--budget-s: a deadline; past it the running check is stopped (SIGALRM) and no other starts."""

    def __init__(self, seconds: Optional[float]):
        self.seconds, self.start = seconds, time.monotonic()

    def left(self) -> float:
        return float("inf") if self.seconds is None else self.seconds - (time.monotonic() - self.start)

    def armed(self, stopped: str) -> ContextManager[List[bool]]:
        """The doctor's set-up stop at the deadline (bench.doctor.training.stopped_after): [True] once fired."""
        from bench.doctor.training import stopped_after

        return contextlib.nullcontext([]) if self.seconds is None else stopped_after(max(self.left(), 0.001), stopped)


def _run_one(check: Check, overrides: List[str], run_dir: Path, on_gpu: bool, runner: Optional[Runner]) -> Any:
    if runner is not None:  # one runner for every check (tests: recorded GPU results)
        return runner(overrides, run_dir)
    if check.where == CHILD:
        _release_gpu_memory(on_gpu)  # what earlier checks cached is the child's to use
        return run_ddp(overrides, run_dir, on_gpu)
    try:
        if check.where == OVERHEAD:
            return run_overhead(on_gpu, echo=lambda line: None)
        if check.name == "find_max_batch" and not on_gpu:
            return run_search_on_cpu(overrides, run_dir)
        return run_in_process(overrides, run_dir, rehearse=not on_gpu)
    finally:
        _release_gpu_memory(on_gpu)  # each check starts from an empty cache, as its own process would


def _release_gpu_memory(on_gpu: bool) -> None:
    if on_gpu:
        import gc

        import torch

        gc.collect()
        torch.cuda.empty_cache()


def run_checks(
    chosen: Sequence[Check],
    base: Sequence[str],
    work: Path,
    runner: Optional[Runner] = None,
    echo: Callable[[str], None] = print,
    on_gpu: bool = True,
    budget: Optional[Budget] = None,
    rows: Optional[List[Row]] = None,
) -> List[Row]:
    """Every chosen check in turn, into `rows` (so an interrupted run still has the ones done)."""
    rows = [] if rows is None else rows
    budget = budget or Budget(None)
    done: Dict[str, Metrics] = {}
    for check in chosen:
        if budget.left() <= 0:
            rows.append((check, None, "not run: --budget-s spent"))
            echo(f"SKIP  {check.name:<15} not run: --budget-s spent")
            continue
        run_dir, started = work / check.name, time.monotonic()
        overrides = [*base, *check.overrides_for(on_gpu)]
        # known only at run time: find_max_batch's first batch, from the memory estimate (a given runner: no GPU to ask)
        if check.name == "find_max_batch" and on_gpu and runner is None:
            import torch

            free, _total = torch.cuda.mem_get_info()
            size = next((int(o.split("=", 1)[1]) for o in reversed(base) if o.startswith("data.image_size=")), 224)
            overrides.append(f"data.batch_size={max_batch_start(done, free / 2**20, size)}")
        stopped = f"stopped: --budget-s {budget.seconds or 0:g} spent while it ran"
        with budget.armed(stopped) as fired:  # it fires inside the run: `fired` holds True
            metrics, problem = _run_one(check, overrides, run_dir, on_gpu, runner)
        if fired:  # an in-process run marked KILLED by it returns its error: the row says the budget
            metrics, problem = None, stopped
        seconds = time.monotonic() - started
        passed, figures = check.judge(metrics, run_dir, on_gpu) if metrics is not None else (False, problem)
        done[check.name] = metrics or {}
        rows.append((check, passed, f"{figures} [{seconds:.1f} s]"))
        echo(f"{'PASS' if passed else 'FAIL'}  {check.name:<15} {figures} [{seconds:.1f} s]")
    return rows


def table(rows: Sequence[Row], seconds: Optional[float] = None, stopped: str = "", chosen: int = 0) -> str:
    """The rows and a summary line; `stopped` (the signal's words): of the `chosen` checks, how many ran."""
    lines = ["| check | what | result | figures |", "|---|---|---|---|"]
    word = {True: "pass", False: "FAIL", None: "not run"}
    lines += [f"| {c.name} | {c.what} | {word[ok]} | {figures} |" for c, ok, figures in rows]
    failed = [c.name for c, ok, _ in rows if ok is False]
    skipped = [c.name for c, ok, _ in rows if ok is None]
    passed = sum(ok is True for _, ok, _ in rows)
    said = f"{passed} of {len(rows)} checks passed"
    if stopped:  # a script reads this line: it must not pass for a complete run
        said = f"interrupted ({stopped}): {len(rows)} of {chosen} checks ran, {passed} passed"
    lines.append(
        f"\ngpu_check: {said}"
        + (f" in {seconds:.0f} s" if seconds is not None else "")
        + (f"; failed: {', '.join(failed)}" if failed else "")
        + (f"; not run (budget): {', '.join(skipped)}" if skipped else "")
    )
    return "\n".join(lines)


def _argument_problem(args: argparse.Namespace) -> Optional[str]:
    """Checked before anything else (before asking for a GPU): one line naming the argument."""
    if args.only:
        names = [n.strip() for n in args.only.split(",")]
        unknown = [n for n in names if n not in NAMES]
        if unknown or not any(names):
            return f"--only={args.only!r}: no check named {', '.join(unknown) or repr('')}; accepted " + ",".join(NAMES)
    for flag, value in (("--batch-size", args.batch_size), ("--steps", args.steps), ("--budget-s", args.budget_s)):
        if value is not None and value <= 0:
            return f"{flag}={value:g} is not valid: accepted a number above 0"
    if bad := [s for s in args.set if "=" not in s]:
        return f"--set={bad[0]!r} is not valid: accepted KEY=VALUE (a bench override)"
    # composed as every check composes it (torch-free, before any check): a --model or --set the config
    # refuses would fail every check, each in its row of the table
    overrides = base_overrides(args, on_gpu=not args.rehearse)
    tries = [(f"--model {args.model}", overrides[: len(overrides) - len(args.set)])]
    tries += [(f"--set {' --set '.join(args.set)}", overrides)] if args.set else []
    for flags, tried in tries:
        try:
            compose(*tried)
        except BenchError as exc:
            return f"{flags}: {exc}"
    return writable_dir_refusal("--keep", str(args.keep)) if args.keep is not None else None


def base_overrides(args: argparse.Namespace, on_gpu: bool) -> List[str]:
    if on_gpu:
        sizes = [f"model.arch={args.model}", f"data.batch_size={args.batch_size}", "data.image_size=224"]
        steps, warmup = args.steps, 3
    else:  # the rehearsal: the same paths, tiny, one thread
        sizes = ["allow_cpu=true", "model.arch=small_cnn", "data.batch_size=4", "data.image_size=32", "cpu_threads=1"]
        steps, warmup = min(args.steps, 3), 1
        sizes.append("data.num_classes=10")
    return [*sizes, "data=synthetic", *ab.one_epoch(steps, warmup), *args.set]


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tools.gpu_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet18", help="a torchvision classification model (default resnet18)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=10, help="measured steps per check (default 10)")
    parser.add_argument("--only", help="comma-separated check names (default: all): " + ",".join(NAMES))
    parser.add_argument("--keep", type=Path, help="keep every check's run directory here")
    parser.add_argument("--budget-s", type=float, help="stop after this many seconds, with the checks done so far")
    parser.add_argument("--rehearse", action="store_true", help="run every check's code on the CPU at tiny sizes")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a bench override for all")
    args = parser.parse_args(argv)
    if problem := _argument_problem(args):
        return print_error(problem)
    import torch

    on_gpu = not args.rehearse
    if on_gpu and not torch.cuda.is_available():
        build = f"built for CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        return print_error(
            f"gpu_check needs a CUDA GPU: torch.cuda.is_available() is False here "
            f"(torch {torch.__version__}, {build}); run it on the GPU machine, or --rehearse on a CPU"
        )
    from bench.machine.children import sigterm_raises

    budget = Budget(args.budget_s)
    rows: List[Row] = []
    chosen: List[Check] = []
    with tempfile.TemporaryDirectory(prefix="bench-gpu-check-") as tmp, sigterm_raises():
        work = (args.keep or Path(tmp)).resolve()
        try:
            gpus = torch.cuda.device_count() if on_gpu else 1
            chosen = checks(gpus, str(work / "images"))
            if args.only:
                wanted = {n.strip() for n in args.only.split(",")}
                chosen = [c for c in chosen if c.name in wanted]
            if any(c.name == "pinned_loader" for c in chosen):  # enough for its steps at the batch asked
                batch = args.batch_size if on_gpu else 4
                from bench.data.sample_images import write_image_folder

                per_class = max(16, -(-batch * 16 // 10))  # small JPEGs: written in a second
                write_image_folder(str(work / "images"), 10 * per_class, 10, width=48, height=48)
            where = f"{gpus} GPU(s): {torch.cuda.get_device_name(0)}" if on_gpu else "rehearsal on the CPU"
            print(f"{where}; {len(chosen)} checks, {args.model if on_gpu else 'tiny sizes'}", flush=True)
            run_checks(chosen, base_overrides(args, on_gpu), work, on_gpu=on_gpu, budget=budget, rows=rows)
        except (KeyboardInterrupt, Interrupted) as exc:
            # bench.api.run's Interrupted names its run
            code, reason = (EXIT_SIGINT, "Ctrl-C") if isinstance(exc, KeyboardInterrupt) else (exc.exit_code, str(exc))
            print(table(rows, time.monotonic() - budget.start, reason, len(chosen)), flush=True)
            return print_error(f"gpu_check interrupted ({reason}) after {len(rows)} checks", code)
    print(table(rows, time.monotonic() - budget.start), flush=True)
    return 0 if all(ok is not False for _, ok, _ in rows) else 1


# ---- how a check runs ----
# How gpu_check runs a check: in its own process (bench.api.run, the code `python -m bench` runs,
# on a config composed as the command line would compose it: no new interpreter, CUDA context or
# cuDNN autotuning per check), in a `python -m bench` child (DDP, whose ranks are processes of their
# own; bench.api.run_child, so the child ends with gpu_check however gpu_check ends),
# or the trainer-vs-minimal-loop comparison (bench.tools.overhead). Each returns (metrics, problem).
#
# A signal during an in-process check ends its run the way it ends `python -m bench` (the run
# KILLED, exit 130/143): bench.api.run raises it again, so gpu_check stops with it.
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
    import torch

    quiet = contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO())
    # the rehearsal's torch.compile: dynamo captures the model as on a GPU, but the graph runs on the
    # eager backend (inductor's C++ code generation takes most of a minute on a small CPU)
    eager = mock.patch.object(torch, "compile", partial(torch.compile, backend="eager"))
    with quiet[0], quiet[1], eager if rehearse else contextlib.nullcontext():
        return _outcome(lambda: api.run(list(overrides), run_dir, Path.cwd()))


def run_search_on_cpu(overrides: Sequence[str], _run_dir: Path) -> Outcome:
    """The rehearsal's find_max_batch: bench refuses the search on a CPU (it would grow the batch
    until the machine swaps), so the training run is started as the GPU test starts it
    (bench.train.loop.train): the search's trials, the weights put back, the run at the batch
    found. Nothing runs out of memory on a CPU: the search stops at its cap."""
    import torch

    from bench.train.loop import train

    with contextlib.redirect_stderr(io.StringIO()):
        try:
            result = train(compose(*overrides), torch.device("cpu"))
        except BenchError as exc:
            return None, f"[ERROR] {exc}"
    figures = {"batch_size": result.batch_size, "images_per_second": result.images_per_second}
    return {**result.extra.figures(), **figures}, ""


def all_reduce_probe(on_gpu: bool) -> Tuple[str, str]:
    """(\"ok\" or what failed, the backend): a process group of one (NCCL on a GPU, gloo on a CPU)
    and one all-reduce whose sum is checked; the group is destroyed afterwards."""
    import torch
    import torch.distributed as dist

    backend, device = ("nccl", torch.device("cuda", 0)) if on_gpu else ("gloo", torch.device("cpu"))
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


def run_overhead(on_gpu: bool, echo: Callable[[str], None] = print) -> Outcome:
    """bench's trainer vs a minimal loop, one process, alternating (A B B A), bf16 + channels_last: on a
    GPU the card's own workload (ResNet-50, 224 px, batch 256); in the rehearsal the same path at a tiny size."""
    import torch

    from bench.tools.overhead import alternate_sides

    arch, size, batch, classes, steps, warmup, threads = (
        ("resnet50", 224, 256, 1000, 20, 5, torch.get_num_threads()) if on_gpu else ("resnet18", 32, 4, 10, 3, 1, 1)
    )
    keys = [f"model.arch={arch}", f"data.image_size={size}", f"data.batch_size={batch}", f"data.num_classes={classes}"]
    keys += [f"train.steps_per_epoch={steps}", f"benchmark.warmup_steps={warmup}", f"cpu_threads={threads}"]
    keys.append("precision.channels_last=true")
    device = torch.device("cuda", 0) if on_gpu else torch.device("cpu")
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # the trainer's warnings (a CPU run's TF32 note...)
            found = alternate_sides(keys, "bf16", device, 2 if on_gpu else 1, "overhead", echo)
    except BenchError as exc:
        return None, f"[ERROR] {exc}"
    ratio = found.ratio("minimal")
    return {
        "overhead_ratio": ratio.ratio if math.isfinite(ratio.ratio) else math.nan,
        "bench_images_per_second": found.median("bench"),
        "minimal_images_per_second": found.median("minimal"),
        "per_round": [round(r, 3) for r in ratio.per_round],
        "overhead_workload": f"{arch} {size}px batch {batch} bf16 channels_last",
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


if __name__ == "__main__":
    exit_without_teardown(main)
