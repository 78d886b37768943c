"""Validation: top-1 and top-5 on the val split, with the val transform, under inference mode
and the run's precision. Every rank reads its own share (each sample once, bench.data.loader's
eval_batch_sampler) and the counts are all-reduced, so the accuracy is over the whole split."""

from __future__ import annotations

import time
from typing import Any, Dict, List, Optional

import torch
import torch.nn as nn

from bench.config import BenchConfig
from bench.rank_context import RankContext
from bench.runtime.precision import PrecisionPolicy
from bench.train.result import Accuracy, EpochRecord


def evaluate(model: nn.Module, val: Any, policy: PrecisionPolicy, ctx: RankContext) -> Dict[str, float]:
    """`model` is the plain module (not the DDP wrapper: evaluation needs no gradient sync);
    `val.one_pass()` yields this rank's device batches."""
    start = time.perf_counter()
    was_training = model.training
    model.eval()
    # hits at 1, hits at 5, images: a tensor made outside inference mode, so it can be all-reduced in place
    counts = torch.zeros(3, dtype=torch.float64, device=next(model.parameters()).device)
    with torch.inference_mode(), policy.autocast():
        for images, labels in val.one_pass():
            logits = model(images)
            top = logits.topk(min(5, logits.shape[1]), dim=1).indices
            hits = top.eq(labels[:, None])
            counts += torch.stack([hits[:, 0].sum(), hits.any(dim=1).sum(), labels.new_tensor(labels.numel())]).to(
                counts
            )
    model.train(was_training)
    if ctx.distributed:
        import torch.distributed as dist

        dist.all_reduce(counts)
    top1, top5, images = (float(v) for v in counts.tolist())
    seconds = time.perf_counter() - start
    return {
        "val_top1": top1 / images if images else 0.0,
        "val_top5": top5 / images if images else 0.0,
        "val_images": int(images),
        "eval_seconds": seconds,
        "eval_images_per_second": images / seconds if seconds > 0 else 0.0,
    }


def accuracy_figures(
    cfg: BenchConfig,
    epochs: List[EpochRecord],
    reached: Optional[EpochRecord],
    wall_seconds: float,
    val_images: Optional[int],
) -> Optional[Accuracy]:
    """A run's accuracy figures from its evaluated epochs; time to target where one is set (None without evaluation)."""
    evaluated = [e for e in epochs if e.val_top1 is not None]
    if not evaluated:
        return None
    target = cfg.train.target_accuracy
    return Accuracy(
        val_top1=evaluated[-1].val_top1,
        val_top5=evaluated[-1].val_top5,
        val_top1_best=max(e.val_top1 for e in evaluated if e.val_top1 is not None),
        eval_seconds=sum(e.eval_seconds or 0.0 for e in evaluated),
        evaluations=len(evaluated),
        train_wall_seconds=wall_seconds,
        val_images=val_images,
        target_accuracy=target,
        reached_target=(reached is not None) if target is not None else None,
        time_to_target_seconds=reached.wall_seconds if reached and target is not None else None,
        epochs_to_target=reached.epoch if reached and target is not None else None,
    )
