"""The doctor's verdict: which part limits the training run, in one sentence with its figures.

The ladder gives rates of parts alone: the compute ceiling C (the model on synthetic on-device
data), the loader L (no model), the storage S (the files read in the loader's order), and the full
run F. The slowest part that is clearly below C (by more than NOISE) limits the run: the loader
(input-bound) or the storage (storage-bound). When nothing is below C and the full run reaches C
within NOISE, the model limits it (compute-bound), or the all-reduce when it alone takes most of a
step (communication-bound). The full run's own data-wait share is the direct sign of an input
limit: a run that waits for data WAIT_SHARE of its window is input-bound even when the loader
alone is faster than the model (with data.num_workers=0 the loader runs between the steps, and
the two add up). When every part alone is faster than the full run, the parts compete
for something they share (the CPU cores, host memory bandwidth): contended.

Two cases call no bound: a training rung measured on a busy machine (its fit_to_measure false:
bench.machine.fitness) says so first ("unfit"), and a full run faster than the compute ceiling by
more than NOISE (it cannot be: the ceiling is the same model with no input) says its figures are
inconsistent ("inconsistent": windows too short or the machine noisy). A failed rung is named with
its error's last line (short_reason), never a traceback. The budget line says the wall time spent
and, when it went over, where the time went (budget_line).
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Tuple

from bench.doctor.figures import (
    ALLREDUCE,
    COMPUTE,
    FULL,
    LOADER,
    STORAGE,
    AllreduceFigures,
    Diagnosis,
    LoaderFigures,
    Rung,
    StorageFigures,
)

NOISE = 0.2  # a part below the compute ceiling by less than this is not called the limit
WAIT_SHARE = 0.25  # the full run waiting for data this share of its window is input-bound
COMM_SHARE = 0.5  # an all-reduce alone taking this share of a step limits a compute-bound run
REASON_CHARS = 200  # a failure's short reason: its last line, cut to this
OVER_SLACK = 1.05  # a wall time within this share of the budget is within it
SHORT = {COMPUTE: "compute ceiling", LOADER: "loader alone", STORAGE: "storage alone", FULL: "full run"}


def _rates(rungs: List[Rung]) -> Dict[str, float]:
    return {r.name: r.images_per_second for r in rungs if r.measured and r.images_per_second}


def top_stage(loader: Optional[Rung]) -> Optional[Tuple[str, float]]:
    """(stage, its share of the loader's CPU time per image), the largest, when the stages were split."""
    figures = loader.figures if loader else None
    stages = (figures.stage_cpu_ms if isinstance(figures, LoaderFigures) else None) or {}
    if not (total := sum(stages.values())):
        return None
    name = max(stages, key=stages.__getitem__)
    return name, stages[name] / total


def _stage(by_name: Dict[str, Rung]) -> str:
    stage = top_stage(by_name.get(LOADER))
    return f"; {stage[0]} is {stage[1]:.0%} of the loader's CPU time" if stage else ""


def short_reason(text: str) -> str:
    """A failure in one line: a traceback's exception line (the last unindented line after its
    frames), else the text's last non-empty line; at most REASON_CHARS characters."""
    if not (lines := [line.rstrip() for line in text.strip().splitlines() if line.strip()]):
        return ""
    if any(line.startswith("Traceback (most recent call last)") for line in lines):
        framed = max((i for i, line in enumerate(lines) if line[:1].isspace()), default=-1)
        said = [line for line in lines[framed + 1 :] if not line[:1].isspace()]
        reason = said[0] if said else lines[-1]
    else:
        reason = lines[-1]
    reason = reason.strip()
    return reason if len(reason) <= REASON_CHARS else reason[: REASON_CHARS - 3] + "..."


def diagnose(rungs: List[Rung], cores: float) -> Tuple[str, str]:
    """(verdict, sentence): a failed full run says which rung failed and why; a training rung not fit
    to measure says so first and calls no bound; otherwise the figures' verdict (figures_verdict)."""
    full = {r.name: r for r in rungs}.get(FULL)
    if full is None or FULL not in _rates(rungs):
        return "unknown", _no_figure(rungs, full)
    if unfit := [r for r in rungs if r.measured and r.fit is False]:
        figures = ", ".join(
            f"{SHORT.get(r.name, r.name)} {r.images_per_second:,.0f}" for r in rungs if r.images_per_second
        )
        return "unfit", (
            f"not fit to measure: the machine was busy during the {SHORT.get(unfit[0].name, unfit[0].name)} "
            f"({unfit[0].unfit_because or 'no reason recorded'}), so no bound is called from these figures "
            f"(img/s: {figures}); rerun when nothing else runs beside it"
        )
    return figures_verdict(rungs, cores)


def _no_figure(rungs: List[Rung], full: Optional[Rung]) -> str:
    if full is None:
        return "unknown: the full training run did not run"
    if full.skipped:
        return f"unknown: the full training run was skipped: {short_reason(full.skipped)}"
    why = short_reason(full.failed) or "no figure"
    alike = lambda reason: re.sub(r"\d+", "#", reason) == re.sub(r"\d+", "#", why)  # noqa: E731 - the numbers (a pid) aside
    same = [SHORT.get(r.name, r.name) for r in rungs if r is not full and r.failed and alike(short_reason(r.failed))]
    also = f" (as did the {' and the '.join(same)})" if same else ""
    return f"unknown: the full training run failed{also}: {why}"


def figures_verdict(rungs: List[Rung], cores: float) -> Tuple[str, str]:
    """(verdict, sentence) of the figures alone, the machine's fitness aside: kept in doctor.json
    beside an unfit verdict (what a quiet machine would likely be told); the verdict when fit."""
    by_name = {r.name: r for r in rungs}
    rates = _rates(rungs)
    if FULL not in rates:
        return "unknown", ""
    f = rates[FULL]
    if (c := rates.get(COMPUTE)) is None:
        return "unknown", f"unknown: the full run gives {f:,.0f} img/s but the compute ceiling was not measured"
    if f > (1 + NOISE) * c:
        return "inconsistent", (
            f"inconsistent: the full run gives {f:,.0f} img/s, {f / c - 1:.0%} above the compute ceiling "
            f"({c:,.0f} img/s) it cannot exceed: the figures are noise (windows too short or the machine busy); "
            "rerun with a larger doctor.budget_s on a quiet machine"
        )
    inputs = {name: rates[name] for name in (LOADER, STORAGE) if name in rates}
    slowest = min(inputs, key=inputs.__getitem__) if inputs else None
    if slowest and inputs[slowest] < (1 - NOISE) * c:
        if slowest == STORAGE:
            storage = by_name[STORAGE].figures
            read = storage if isinstance(storage, StorageFigures) else None
            rate = (read.megabytes_per_second if read else None) or 0
            return "storage-bound", (
                f"storage-bound: the files under data.root read at {rate:,.0f} MB/s "
                f"({read.cache if read else '?'} cache), enough for {inputs[STORAGE]:,.0f} img/s; "
                f"the model could take {c:,.0f}"
            )
        return (
            "input-bound",
            f"input-bound: the loader gives {inputs[LOADER]:,.0f} img/s, "
            f"the model could take {c:,.0f}{_stage(by_name)}",
        )
    wait = by_name[FULL].data_wait or 0.0
    if LOADER in inputs and wait >= WAIT_SHARE:
        loaded = by_name[LOADER].figures
        workers = loaded.workers if isinstance(loaded, LoaderFigures) else None
        how = (
            "with data.num_workers=0 the loader runs between the model's steps"
            if workers == 0
            else f"{workers} loader workers do not keep up"
        )
        return "input-bound", (
            f"input-bound: the training waits for data {wait:.0%} of its time: {how} "
            f"(the loader alone {inputs[LOADER]:,.0f} img/s, the model alone {c:,.0f}){_stage(by_name)}"
        )
    if f >= (1 - NOISE) * c or not inputs:
        comm = by_name.get(ALLREDUCE)
        said = comm.figures if comm and comm.measured else None
        share = said.share_of_step if isinstance(said, AllreduceFigures) else None
        if isinstance(said, AllreduceFigures) and share is not None and share >= COMM_SHARE:
            return "communication-bound", (
                f"communication-bound: an all-reduce of the gradients alone takes {said.milliseconds:,.1f} ms, "
                f"{share:.0%} of the {said.step_ms or 0:,.1f} ms step "
                f"({said.bus_gigabytes_per_second:,.2f} GB/s bus bandwidth)"
            )
        feeding = (
            f"; the input pipeline could give {min(inputs.values()):,.0f}"
            if inputs
            else "; the data is synthetic (no input pipeline)"
        )
        return "compute-bound", (
            f"compute-bound: the full run gives {f:,.0f} img/s, "
            f"{f / c:.0%} of the compute ceiling ({c:,.0f} img/s){feeding}"
        )
    parts = ", ".join(f"the {name} alone {rate:,.0f}" for name, rate in [(COMPUTE, c), *inputs.items()])
    return "contended", (
        f"contended: the full run gives {f:,.0f} img/s though {parts}: the parts compete for what they share "
        f"({cores:g} usable CPU cores, host memory)"
    )


def budget_line(diagnosis: Diagnosis) -> str:
    """The wall time spent against doctor.budget_s and, when it went over, where the time went: the
    budget sets each rung's measuring window; the set-up around a window is not bounded by it."""
    spent, budget = diagnosis.wall_s or diagnosis.elapsed_s, diagnosis.budget_s
    head = f"{spent:,.0f} s wall time of a {budget:,.0f} s budget"
    if spent <= OVER_SLACK * budget:
        return head
    rungs = sum(r.seconds for r in diagnosis.rungs)
    slowest = sorted((r for r in diagnosis.rungs if r.seconds >= 1), key=lambda r: -r.seconds)[:2]
    named = ", ".join(f"{SHORT.get(r.name, r.name)} {r.seconds:,.0f} s" for r in slowest)
    parts = [f"start-up before the first rung {diagnosis.setup_s:,.0f} s"] if diagnosis.setup_s >= 1 else []
    parts.append(f"the rungs {rungs:,.0f} s" + (f" ({named})" if named else ""))
    ran = [w for w in diagnosis.what_ifs if w.images_per_second or w.failed]
    rest = diagnosis.elapsed_s - diagnosis.setup_s - rungs
    if ran and rest >= 1:
        parts.append(
            f"{len(ran)} what-if run{'s' if len(ran) > 1 else ''} {rest:,.0f} s (the first runs whatever is left)"
        )
    if spent - diagnosis.elapsed_s >= 1:
        parts.append(f"the chart and page {spent - diagnosis.elapsed_s:,.0f} s")
    return (
        f"{head}: over by {spent - budget:,.0f} s, as the budget sets each rung's measuring window but not the "
        f"set-up around it (building the model, warm-up, its MLflow run), which is slow on a busy machine: "
        + "; ".join(parts)
    )
