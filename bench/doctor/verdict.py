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
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from bench.doctor.figures import ALLREDUCE, COMPUTE, FULL, LOADER, STORAGE, Rung

NOISE = 0.2  # a part below the compute ceiling by less than this is not called the limit
WAIT_SHARE = 0.25  # the full run waiting for data this share of its window is input-bound
COMM_SHARE = 0.5  # an all-reduce alone taking this share of a step limits a compute-bound run


def _rates(rungs: List[Rung]) -> Dict[str, float]:
    return {r.name: r.images_per_second for r in rungs if r.measured and r.images_per_second}


def top_stage(loader: Optional[Rung]) -> Optional[Tuple[str, float]]:
    """(stage, its share of the loader's CPU time per image), the largest, when the stages were split."""
    stages = (loader.figures.get("stage_cpu_ms") if loader else None) or {}
    total = sum(stages.values())
    if not total:
        return None
    name = max(stages, key=stages.__getitem__)
    return name, stages[name] / total


def _stage(by_name: Dict[str, Rung]) -> str:
    stage = top_stage(by_name.get(LOADER))
    return f"; {stage[0]} is {stage[1]:.0%} of the loader's CPU time" if stage else ""


def diagnose(rungs: List[Rung], cores: float) -> Tuple[str, str]:
    """(verdict, sentence); the sentence says so when a training rung was not fit to measure."""
    verdict, sentence = _diagnose(rungs, cores)
    unfit = [r for r in rungs if r.measured and r.fit is False]
    if unfit:
        sentence += f" (measured on a busy machine: {unfit[0].title}: {unfit[0].unfit_because})"
    return verdict, sentence


def _diagnose(rungs: List[Rung], cores: float) -> Tuple[str, str]:
    by_name = {r.name: r for r in rungs}
    rates = _rates(rungs)
    full = by_name.get(FULL)
    if full is None or FULL not in rates:
        why = (full.failed or full.skipped) if full else "not run"
        return "unknown", f"unknown: the full training run gave no figure ({why})"
    f = rates[FULL]
    c = rates.get(COMPUTE)
    if c is None:
        return "unknown", f"unknown: the full run gives {f:,.0f} img/s but the compute ceiling was not measured"
    inputs = {name: rates[name] for name in (LOADER, STORAGE) if name in rates}
    slowest = min(inputs, key=inputs.__getitem__) if inputs else None
    if slowest and inputs[slowest] < (1 - NOISE) * c:
        if slowest == STORAGE:
            storage = by_name[STORAGE].figures
            return "storage-bound", (
                f"storage-bound: the files under data.root read at {storage.get('megabytes_per_second', 0):,.0f} MB/s "
                f"({storage.get('cache', '?')} cache), enough for {inputs[STORAGE]:,.0f} img/s; "
                f"the model could take {c:,.0f}"
            )
        return (
            "input-bound",
            f"input-bound: the loader gives {inputs[LOADER]:,.0f} img/s, "
            f"the model could take {c:,.0f}{_stage(by_name)}",
        )
    wait = by_name[FULL].data_wait or 0.0
    if LOADER in inputs and wait >= WAIT_SHARE:
        loader = by_name[LOADER]
        how = (
            "with data.num_workers=0 the loader runs between the model's steps"
            if loader.figures.get("workers") == 0
            else f"{loader.figures.get('workers')} loader workers do not keep up"
        )
        return "input-bound", (
            f"input-bound: the training waits for data {wait:.0%} of its time: {how} "
            f"(the loader alone {inputs[LOADER]:,.0f} img/s, the model alone {c:,.0f}){_stage(by_name)}"
        )
    if f >= (1 - NOISE) * c or not inputs:
        comm = by_name.get(ALLREDUCE)
        said = comm.figures if comm and comm.measured else {}
        share = said.get("share_of_step")
        if share is not None and share >= COMM_SHARE:
            return "communication-bound", (
                f"communication-bound: an all-reduce of the gradients alone takes {said['milliseconds']:,.1f} ms, "
                f"{share:.0%} of the {said['step_ms']:,.1f} ms step "
                f"({said['bus_gigabytes_per_second']:,.2f} GB/s bus bandwidth)"
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
