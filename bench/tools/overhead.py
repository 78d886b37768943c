"""`python -m bench.overhead`: what does the framework cost compared with a hand-written loop?

Runs the same model, batch, precision and thread count through bench's trainer (the code
`python -m bench` runs) and through a minimal training loop, in one process, alternating
(A B B A, bench.analysis.rounds) so machine noise hits both alike. Prints images/s of each and
their ratio (median of per-round ratios) with its 95% interval and verdict. Goal: framework >=
0.98x the minimal loop. Each side warms up inside its own run (--warmup steps).
On a CPU, bench keeps freed memory for reuse (`cpu_malloc_reuse`, bench.runtime.malloc): a setting
of the process, so the minimal loop, in the same process, runs with it too (the header says so).

    python -m bench.overhead --model resnet18 --image-size 64 --batch-size 32 --precisions fp32,bf16

Its flags that size the workload are spellings of config keys (--batch-size is data.batch_size,
bench.tools.ab); any other key may be given as `python -m bench` takes it (data.num_classes=10).
"""

from __future__ import annotations

import argparse
import contextlib
import time
from typing import Callable, List, Sequence

import torch
import torch.nn as nn
import torchvision

from bench.analysis.rounds import Rounds, alternate
from bench.config import BenchConfig, compose
from bench.errors import BenchError, print_error
from bench.machine.children import exit_without_teardown
from bench.runtime.malloc import in_effect
from bench.tools import ab


def framework_config(overrides: Sequence[str], precision: str) -> BenchConfig:
    """bench's run of the workload the overrides (the flags' config keys) size: one epoch, no progress bar.
    Both callers give every size: the command its flags' keys (each has a default), gpu_check its own."""
    own = ["train.epochs=1", "benchmark.progress=false", "allow_cpu=true", f"precision={precision}"]
    return compose(*overrides, *own)


def run_minimal(config: BenchConfig, device: torch.device) -> float:
    """The loop a careful engineer writes by hand: nothing but forward, backward, step."""
    torch.manual_seed(0)
    data, steps, warmup = config.data, config.train.steps_per_epoch or 1, config.benchmark.warmup_steps
    memory_format = torch.channels_last if config.precision.channels_last else torch.contiguous_format
    model = torchvision.models.get_model(config.model.arch, weights=None, num_classes=data.num_classes)
    model = model.to(device=device, memory_format=memory_format).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    criterion = nn.CrossEntropyLoss()
    images = torch.randn(data.batch_size, 3, data.image_size, data.image_size, device=device)
    images = images.contiguous(memory_format=memory_format)
    labels = torch.randint(0, data.num_classes, (data.batch_size,), device=device)
    bf16 = config.precision.name == "bf16"

    def one_step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext():
            loss = criterion(model(images), labels)
        loss.backward()
        optimizer.step()

    sync = torch.cuda.synchronize if device.type == "cuda" else lambda: None  # the GPU's queue drained
    for _ in range(warmup):
        one_step()
    sync()
    start = time.perf_counter()
    for _ in range(steps):
        one_step()
    sync()
    return steps * data.batch_size / (time.perf_counter() - start)


def alternate_sides(
    overrides: Sequence[str], precision: str, device: torch.device, rounds: int, label: str, echo: Callable = print
) -> Rounds:
    """bench's trainer and the minimal loop on one workload, alternating A-B-B-A (bench.analysis.rounds)."""
    from bench.train.loop import train

    config = framework_config(overrides, precision)
    sides = {"bench": lambda: train(config, device).images_per_second, "minimal": lambda: run_minimal(config, device)}
    return alternate(sides, rounds, warmup=0, label=label, unit="img/s", echo=echo)


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.overhead", description=__doc__.split("\n\n")[0])
    ab.spell(parser, "--model", "resnet18", "a torchvision classification model")
    for flag, default in (("--image-size", 64), ("--batch-size", 32), ("--num-classes", 1000)):
        ab.spell(parser, flag, default)
    ab.spell(parser, "--steps", 30, "measured steps per round")
    ab.spell(parser, "--warmup", 5)
    ab.spell(parser, "--threads", torch.get_num_threads())
    parser.add_argument("--precisions", default="fp32,bf16", help="comma-separated: fp32, bf16")
    parser.add_argument("--rounds", type=int, default=4, help="A-B-B-A rounds")
    parser.add_argument("--channels-last", action="store_true", help="both sides in channels_last memory format")
    args, overrides = ab.parse(parser, argv)
    if problem := ab.below_one(args, "rounds"):
        return print_error(problem)
    overrides += ["precision.channels_last=true"] if args.channels_last else []
    try:
        config = framework_config(overrides, "fp32")
    except BenchError as exc:  # a key's value the config refuses: its one line, before any work
        return print_error(str(exc), exc.exit_code)
    torch.set_num_threads(config.cpu_threads or args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    reuse = in_effect(config.cpu_malloc_reuse, device.type)
    data = config.data
    print(
        f"device={device.type} threads={config.cpu_threads} model={config.model.arch} image={data.image_size} "
        f"batch={data.batch_size} steps={config.train.steps_per_epoch} rounds={args.rounds}"
        + (" channels_last" if config.precision.channels_last else "")
        + ("" if reuse is None else f" cpu_malloc_reuse={str(reuse).lower()} (both sides: one process)")
    )
    columns = f"{'precision':<10}{'bench img/s':>14}{'minimal img/s':>16}{'ratio':>8}"
    print(columns + "   95% interval, verdict, per-round ratios")
    for precision in args.precisions.split(","):
        found = alternate_sides(overrides, precision, device, args.rounds, label=precision)
        ratio = found.ratio("minimal")
        medians = f"{found.median('bench'):>14.1f}{found.median('minimal'):>16.1f}{ratio.ratio:>8.3f}"
        rounds = " ".join(f"{r:.3f}" for r in ratio.per_round)
        print(f"{precision:<10}{medians}   [{ratio.low:.3f}-{ratio.high:.3f}] {ratio.verdict}   {rounds}", flush=True)
    return 0


if __name__ == "__main__":
    exit_without_teardown(main)
