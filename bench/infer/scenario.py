"""The inference scenario (mode=inference): the checks every run of a model has (dataset, device,
precision on that device, model, what fits: bench.runtime.scenario) and the out-of-memory
explanation, then forward passes in one process (bench.infer.loop); a sweep runs each job in a
process of its own, as training does."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from bench.config import BenchConfig
from bench.infer.report import InferReport
from bench.infer.result import InferResult
from bench.rank_context import RankContext
from bench.runtime.scenario import ModelScenario


class InferScenario(ModelScenario):
    loop_modules = ("bench.infer.scenario", "bench.infer.loop")
    report_class = InferReport  # one rank; a launcher gives every sweep job a fresh process

    def check(self, config: BenchConfig) -> None:
        """mode=inference's config rules (bench.infer.rules): training-only keys refused."""
        from bench.infer.rules import check_inference

        check_inference(config)

    def run_name(self, config: BenchConfig, batch_size: Optional[int] = None) -> str:
        return f"infer-{config.model.arch}-{config.precision.name}-bs{config.data.batch_size}"

    def measure(
        self, config: BenchConfig, device: Any, ctx: RankContext, monitor: Any, out_dir: Path, heartbeat: Any
    ) -> InferResult:
        from bench.infer.loop import infer

        return infer(config, device, monitor=monitor, ctx=ctx, on_step=heartbeat, out_dir=out_dir)
