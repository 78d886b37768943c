"""The ladder, in order and within the budget: compute ceiling, loader alone, storage alone, full
run, all-reduce; the verdict; then the what-ifs while the budget lasts. Every rung that fails says
why in its row and the ladder goes on: a diagnosis with a missing rung beats none."""

from __future__ import annotations

import logging
import time
from typing import Callable, List, Sequence

from bench.config import BenchConfig
from bench.doctor.figures import COMPUTE, FULL, LOADER, UNFIT, Diagnosis, LoaderFigures, Rung, TrainingFigures, WhatIf
from bench.doctor.training import TrainingRuns, synthetic_twin
from bench.doctor.verdict import diagnose, figures_verdict
from bench.errors import BenchError, interruption_in

log = logging.getLogger("bench.doctor")

# shares of the budget: each rung's measured window (set-up and warm-up come on top)
WINDOW_SHARE = {COMPUTE: 0.1, LOADER: 0.06, "storage": 0.04, FULL: 0.1, "what_if": 0.06}
MIN_WINDOW_S = 1.0


class Budget:
    """doctor.budget_s counted from the command's start (its process's creation: start-up and the
    config's checks are spent from it too), so what is left is what is really left."""

    def __init__(self, seconds: float):
        import psutil

        self.started_at = psutil.Process().create_time()  # epoch seconds
        since_start = max(0.0, time.time() - self.started_at)
        self.seconds, self.started = seconds, time.perf_counter() - since_start

    def window(self, part: str) -> float:
        return max(MIN_WINDOW_S, self.seconds * WINDOW_SHARE[part])

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def left(self) -> float:
        return self.seconds - self.elapsed()


def _guarded(name: str, measure: Callable[[], Rung]) -> Rung:
    """A rung's own failure (a loader that cannot read, a process group that cannot form) is its
    row's reason, not the doctor's end."""
    try:
        return measure()
    except (BenchError, OSError, RuntimeError) as exc:
        stopped = interruption_in(exc)  # a signal a library turned into its own error ends the ladder
        if stopped is not None:
            raise stopped from None
        return Rung(name=name, failed=str(exc) if isinstance(exc, BenchError) else f"{type(exc).__name__}: {exc}")


def climb(
    config: BenchConfig,
    overrides: Sequence[str],
    budget_s: float,
    runs: TrainingRuns,
    cores: float,
    with_what_ifs: bool,
    on_rung: Callable[[Rung], None],
) -> Diagnosis:
    from bench.doctor.allreduce import allreduce_rung
    from bench.doctor.loader import loader_rung
    from bench.doctor.storage_read import storage_rung
    from bench.doctor.what_ifs import candidates, make_shards

    budget = Budget(budget_s)
    setup_s = budget.elapsed()
    rungs: List[Rung] = []

    def add(rung: Rung) -> Rung:
        rungs.append(rung)
        on_rung(rung)
        return rung

    compute = add(runs.run("1-compute", COMPUTE, synthetic_twin(overrides, config), budget.window(COMPUTE)))
    loader = add(_guarded(LOADER, lambda: loader_rung(config, budget.window(LOADER))))
    dataset_size = (loader.figures.dataset_size if isinstance(loader.figures, LoaderFigures) else None) or 0
    add(_guarded("storage", lambda: storage_rung(config, budget.window("storage"), dataset_size)))
    full = add(runs.run("4-full", FULL, overrides, budget.window(FULL)))
    parameters = full.parameters or compute.parameters or 0
    add(_guarded("allreduce", lambda: allreduce_rung(config, parameters, full.step_ms)))
    verdict, sentence = diagnose(rungs, cores)
    leaning, leaning_sentence = figures_verdict(rungs, cores)  # the side the what-ifs start on, even when unfit
    log.info("%s", sentence)
    what_ifs: List[WhatIf] = []
    if with_what_ifs and full.measured:
        on_cpu = isinstance(full.figures, TrainingFigures) and full.figures.device == "cpu"
        what_ifs = candidates(config, overrides, cores, leaning in ("input-bound", "storage-bound"), on_cpu)
    # each measured as the full run: the first (the likeliest fix, on the side the verdict points at)
    # whatever the budget says, each other one while the budget left covers a run as long as the full rung took
    for number, what_if in enumerate(what_ifs):
        what_if.before, left = full.images_per_second, budget.left()
        if number and left < full.seconds:
            what_if.skipped = (
                f"not measured: {max(0.0, left):.0f} s of the budget left, a run takes ~{full.seconds:.0f} s"
            )
            continue
        if what_if.name == "data=shards":
            what_if.overrides, what_if.skipped = make_shards(config, overrides, runs.out_dir)
            if what_if.skipped:
                continue
        job = f"what-if-{len([w for w in what_ifs if w.images_per_second or w.failed]) + 1}"
        measured = runs.run(job, what_if.name, what_if.overrides, budget.window("what_if"))
        for shared in ("images_per_second", "failed", "run_id", "fit", "unfit_because"):  # the run's, as a rung's
            setattr(what_if, shared, getattr(measured, shared))
        said = f"{what_if.gain:.2f}x" if what_if.gain else what_if.failed
        unfit = f" ({UNFIT}: {what_if.unfit_because})" if what_if.fit is False else ""
        log.info("what if %s: %s%s", what_if.name, said, unfit)
    diagnosis = Diagnosis(verdict, sentence, rungs, what_ifs, budget_s, budget.elapsed(), list(overrides))
    diagnosis.setup_s, diagnosis.started_at = setup_s, budget.started_at
    diagnosis.figures_verdict, diagnosis.figures_sentence = leaning, leaning_sentence
    return diagnosis
