"""`python -m bench.tools.train_costs`: what training for accuracy costs the measurement.

Two comparisons, each in one process, alternating (A B B A ...) so machine noise hits both
alike (bench.analysis.rounds), reported as the median of per-round ratios with its 95% interval:

- eval: images/s of the training window with validation every epoch vs the same run (same
  steps) without it, on the digits image folder. Goal >= 0.98: evaluation is left out of the
  window, so it must not slow the steps around it.
- checkpoint: GB/s of bench's checkpoint write (torch.save to memory, then an atomic, fsync'd
  put through the storage backend) vs a plain torch.save to a file + fsync of the same state
  (model + optimizer). Goal >= 0.9.

    python -m bench.tools.train_costs --rounds 4
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import List, Optional

import torch
import torchvision

from bench.analysis.rounds import Rounds, alternate
from bench.config import compose
from bench.data.digits import write_digits
from bench.errors import BenchError, print_error
from bench.machine.children import exit_without_teardown
from bench.machine.writable import writable_dir_refusal
from bench.tools import ab
from bench.train.resume import Position, TrainingCheckpoints


def _said(head: str, found: Rounds) -> None:
    """A comparison's line: its medians (`head`), then ours/base with its interval and each round's ratio."""
    ratio = found.ratio("base")
    print(f"{head}   ratio {ab.said(ratio, 3)}   rounds " + " ".join(f"{r:.3f}" for r in ratio.per_round), flush=True)


def eval_cost(args: argparse.Namespace, root: str) -> None:
    from bench.train.loop import train

    def images_per_second(eval_every: int) -> float:
        result = train(compose(*eval_run(args, root), f"train.eval_every={eval_every}"), torch.device("cpu"))
        return result.images_per_second

    sides = {"ours": lambda: images_per_second(1), "base": lambda: images_per_second(0)}  # eval_every=1, 0
    found = alternate(sides, args.rounds, warmup=0, label="eval", unit="img/s")
    ours, base = found.median("ours"), found.median("base")
    _said(f"eval        with eval_every=1 {ours:9.1f} img/s   without {base:9.1f} img/s", found)


def checkpoint_cost(args: argparse.Namespace, where: Path) -> None:
    model = torchvision.models.get_model(args.model, weights=None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(2, 3, 64, 64)).sum().backward()
    optimizer.step()  # momentum buffers: the optimizer state a real checkpoint carries
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
    os.chdir(where)
    config = compose("checkpoint.every_epochs=1", "checkpoint.keep_last=1", "storage.fsync=true")
    checkpoints = TrainingCheckpoints(config)
    plain = where / "plain.pt"

    def ours() -> float:
        checkpoints.save(state, Position(len(checkpoints.saved) + 1))
        figure = checkpoints.saved[-1]
        return figure["bytes"] / figure["seconds"] / 1e9

    def baseline() -> float:
        start = time.perf_counter()
        with open(plain, "wb") as fh:
            torch.save(state, fh)
            fh.flush()
            os.fsync(fh.fileno())
        return plain.stat().st_size / (time.perf_counter() - start) / 1e9

    found = alternate({"ours": ours, "base": baseline}, args.rounds, warmup=0, label="checkpoint", unit="GB/s")
    size = checkpoints.saved[-1]["bytes"] / 1e6
    head = f"checkpoint  bench {found.median('ours'):6.3f} GB/s   torch.save+fsync {found.median('base'):6.3f} GB/s"
    _said(f"{head}   ({args.model}, {size:.0f} MB)", found)


def eval_run(args: argparse.Namespace, root: str) -> List[str]:
    """The eval comparison's run: the digits preset, its flags' config keys (--epochs, --threads, --workers)."""
    quiet = ["train.target_accuracy=null", "benchmark.progress=false"]
    return ["+experiment=digits_tta", f"data.root={root}", *ab.spelled(args), *quiet]


def argument_problem(args: argparse.Namespace) -> Optional[str]:
    """The first argument that cannot work, in one sentence, before any work (each one cost a
    traceback after the digits were written); None when all can."""
    if problem := ab.below_one(args, "rounds"):
        return problem
    try:
        compose(*eval_run(args, "."))  # the flags' keys, as the config checks them
    except BenchError as exc:
        return str(exc)
    if args.only != "eval" and args.model not in torchvision.models.list_models(module=torchvision.models):
        return f"--model={args.model!r} is not valid: accepted a torchvision classification model, e.g. resnet50."
    return writable_dir_refusal("--dir", args.dir) if args.dir is not None else None


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tools.train_costs", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4, help="A-B-B-A rounds")
    ab.spell(parser, "--epochs", 3, "digits epochs per eval run")
    ab.spell(parser, "--threads", torch.get_num_threads())
    ab.spell(parser, "--workers", 1, "of the eval runs")
    parser.add_argument("--model", default="resnet50", help="the model whose state is checkpointed")
    parser.add_argument("--only", choices=["eval", "checkpoint"], help="one comparison only")
    parser.add_argument("--dir", default=None, help="where the digits and checkpoints go (default: a temp dir)")
    args = parser.parse_args(argv)
    if problem := argument_problem(args):
        return print_error(problem)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        print(f"threads={args.threads} rounds={args.rounds} in {tmp}", flush=True)
        if args.only != "checkpoint":
            root = os.path.join(tmp, "digits")
            write_digits(root)
            eval_cost(args, root)
        if args.only != "eval":
            checkpoint_cost(args, Path(tmp))
    return 0


if __name__ == "__main__":
    exit_without_teardown(main)
