"""`python -m bench.overhead`: what does the framework cost compared with a hand-written loop?

Runs the same model, batch, precision and thread count through bench's trainer (the code
`python -m bench` runs) and through a minimal training loop, in one process, alternating
(A B B A, bench.analysis.rounds) so machine noise hits both alike. Prints images/s of each and
their ratio (median of per-round ratios) with its 95% interval and verdict. Goal: framework >=
0.98x the minimal loop. Each side warms up inside its own run (--warmup steps).
On a CPU, bench keeps freed memory for reuse (`cpu_malloc_reuse`, bench.runtime.malloc): a setting
of the process, so the minimal loop, in the same process, runs with it too (the header says so).

    python -m bench.overhead --model resnet18 --image-size 64 --batch-size 32 --precisions fp32,bf16
"""

from __future__ import annotations

import argparse
import contextlib
import time
from functools import partial
from typing import Any, Callable, List

import torch
import torch.nn as nn
import torchvision

from bench.analysis.rounds import Rounds, alternate
from bench.config import BenchConfig, compose
from bench.runtime.malloc import in_effect


def framework_config(args: argparse.Namespace, precision: str) -> BenchConfig:
    return compose(
        f"model.arch={args.model}",
        f"precision={precision}",
        f"precision.channels_last={str(getattr(args, 'channels_last', False)).lower()}",
        f"data.batch_size={args.batch_size}",
        f"data.image_size={args.image_size}",
        f"data.num_classes={args.num_classes}",
        f"train.steps_per_epoch={args.steps}",
        "train.epochs=1",
        f"benchmark.warmup_steps={args.warmup}",
        "benchmark.progress=false",
        f"cpu_threads={args.threads}",
        "allow_cpu=true",
    )


def run_framework(config: BenchConfig, device: torch.device) -> float:
    from bench.train.loop import train

    result = train(config, device)
    return result.images / result.window_seconds


def run_minimal(args: argparse.Namespace, precision: str, device: torch.device) -> float:
    """The loop a careful engineer writes by hand: nothing but forward, backward, step."""
    torch.manual_seed(0)
    memory_format = torch.channels_last if getattr(args, "channels_last", False) else torch.contiguous_format
    model = torchvision.models.get_model(args.model, weights=None, num_classes=args.num_classes)
    model = model.to(device=device, memory_format=memory_format)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    criterion = nn.CrossEntropyLoss()
    images = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=device)
    images = images.contiguous(memory_format=memory_format)
    labels = torch.randint(0, args.num_classes, (args.batch_size,), device=device)

    def autocast() -> Any:
        if precision == "bf16":
            return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def one_step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with autocast():
            loss = criterion(model(images), labels)
        loss.backward()
        optimizer.step()

    sync = torch.cuda.synchronize if device.type == "cuda" else lambda: None  # the GPU's queue drained
    for _ in range(args.warmup):
        one_step()
    sync()
    start = time.perf_counter()
    for _ in range(args.steps):
        one_step()
    sync()
    return args.steps * args.batch_size / (time.perf_counter() - start)


def alternate_sides(
    args: argparse.Namespace, precision: str, device: torch.device, rounds: int, label: str, echo: Callable = print
) -> Rounds:
    """bench's trainer and the minimal loop on one workload, alternating A-B-B-A (bench.analysis.rounds)."""
    config = framework_config(args, precision)
    sides = {"bench": partial(run_framework, config, device), "minimal": partial(run_minimal, args, precision, device)}
    return alternate(sides, rounds, warmup=0, label=label, unit="img/s", echo=echo)


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.overhead", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet18", help="a torchvision classification model (default resnet18)")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--num-classes", type=int, default=1000)
    parser.add_argument("--precisions", default="fp32,bf16", help="comma-separated: fp32, bf16")
    parser.add_argument("--steps", type=int, default=30, help="measured steps per round")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=4, help="A-B-B-A rounds")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--channels-last", action="store_true", help="both sides in channels_last memory format")
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    reuse = in_effect(framework_config(args, "fp32").cpu_malloc_reuse, device.type)
    print(
        f"device={device.type} threads={args.threads} model={args.model} image={args.image_size} "
        f"batch={args.batch_size} steps={args.steps} rounds={args.rounds}"
        + (" channels_last" if args.channels_last else "")
        + ("" if reuse is None else f" cpu_malloc_reuse={str(reuse).lower()} (both sides: one process)")
    )
    print(
        f"{'precision':<10}{'bench img/s':>14}{'minimal img/s':>16}{'ratio':>8}"
        "   95% interval, verdict, per-round ratios"
    )
    for precision in args.precisions.split(","):
        found = alternate_sides(args, precision, device, args.rounds, label=precision)
        ratio = found.ratio("minimal")
        print(
            f"{precision:<10}{found.median('bench'):>14.1f}{found.median('minimal'):>16.1f}{ratio.ratio:>8.3f}   "
            f"[{ratio.low:.3f}-{ratio.high:.3f}] {ratio.verdict}   " + " ".join(f"{r:.3f}" for r in ratio.per_round),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
