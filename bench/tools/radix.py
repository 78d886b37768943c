"""`python -m bench.radix` (its documented name; this module is its code): the original Radix benchmark CLI,
kept for its users and scripts.

    python -m bench.radix --lr 0.1 --batch-size 128 --epochs 1 --steps-per-epoch 200 --allow-cpu

It maps the flags onto the Hydra run of ResNet-50 on synthetic data (same files, MLflow run
and final `{"radix_metrics": ...}` stdout line as `python -m bench`). Anything after the
flags is passed through as Hydra overrides, e.g. `precision=bf16 benchmark.warmup_steps=5`.
"""

from __future__ import annotations

import argparse
import sys
from typing import List, NoReturn, Optional

from bench.__main__ import cli
from bench.errors import EXIT_CONFIG, print_error


def refuse(message: str) -> NoReturn:
    """argparse's refusal as every other command's: one [ERROR] line, exit 2 (not its usage paragraph)."""
    print_error(f"{message} (accepted: --lr --batch-size --epochs --steps-per-epoch --allow-cpu, then Hydra overrides)")
    sys.exit(EXIT_CONFIG)


def parse(argv: List[str]) -> tuple[argparse.Namespace, List[str]]:
    parser = argparse.ArgumentParser(
        prog="python -m bench.radix",
        description="ResNet-50 training throughput on synthetic data (the original Radix CLI). "
        "Extra arguments are Hydra overrides, e.g. precision=bf16.",
    )
    parser.add_argument("--lr", type=float, default=0.1, help="SGD learning rate (default 0.1)")
    parser.add_argument("--batch-size", type=int, default=128, help="images per step (default 128)")
    parser.add_argument("--epochs", type=int, default=1, help="measured epochs (default 1)")
    parser.add_argument("--steps-per-epoch", type=int, default=200, help="steps per epoch (default 200)")
    parser.add_argument("--allow-cpu", action="store_true", help="run on the CPU when no CUDA GPU is present")
    parser.error = refuse  # type: ignore[method-assign]
    args, overrides = parser.parse_known_args(argv)
    if unknown_flags := [o for o in overrides if o.startswith("-")]:
        refuse(f"unrecognized arguments: {' '.join(unknown_flags)}")
    return args, overrides


def hydra_overrides(args: argparse.Namespace, extra: List[str]) -> List[str]:
    flags = [f"optimizer.lr={args.lr}", f"data.batch_size={args.batch_size}", f"train.epochs={args.epochs}"]
    flags += [f"train.steps_per_epoch={args.steps_per_epoch}", f"allow_cpu={str(args.allow_cpu).lower()}"]
    return ["model=resnet50", "data=synthetic", "optimizer=sgd", *flags, *extra]  # the preset, the flags', the rest


def main(argv: Optional[List[str]] = None) -> None:
    args, extra = parse(sys.argv[1:] if argv is None else argv)
    sys.argv = [sys.argv[0], *hydra_overrides(args, extra)]
    cli()  # the same Hydra run as `python -m bench` with these overrides


if __name__ == "__main__":
    main()
