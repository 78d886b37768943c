"""The scenarios a run can measure, by `mode`: the one place that maps a mode to its code.

A scenario is a class with:
    has_ranks: bool, or (config) -> bool   started by a launcher, one process per rank (bench.launch);
                                     a method when it depends on the config (the storage benchmark: ddp)
    preload: tuple                   modules a launcher's forkserver imports once
    report_class                     its report type (bench.results.Report): reads a run back too
    preflight(config)                what must hold before a run starts, beyond the schema
                                     (data on disk, the device); raises BenchError
    run_name(config) -> str          the MLflow run name when tracking.run_name is not set
    run_rank(config, ctx, out_dir, heartbeat=None) -> outcome   one rank's work (rank 0's outcome
                                     reaches the reporting process; None on the others)
    report(outcome, config) -> Report
    explain(exc, config) -> str|None a known failure in one line (e.g. out of memory)

Adding a scenario: a package with that class, one line here, a Mode member (bench.config.schema).
"""

from __future__ import annotations

import importlib
from typing import Any, Dict

from bench.config.schema import Mode

SCENARIOS: Dict[Mode, str] = {
    Mode.train: "bench.train.scenario:TrainScenario",
    Mode.storage: "bench.iobench.scenario:StorageScenario",
    Mode.inference: "bench.infer.scenario:InferScenario",
}


def scenario_class(mode: Mode) -> Any:
    module, _, name = SCENARIOS[mode].partition(":")
    return getattr(importlib.import_module(module), name)


def scenario_for(mode: Mode) -> Any:
    return scenario_class(mode)()


def has_ranks(scenario: Any, config: Any) -> bool:
    ranks = scenario.has_ranks
    return bool(ranks(config) if callable(ranks) else ranks)


def report_class(mode: Any) -> Any:
    """The report type of a run recorded with this mode (a name read back from a file or MLflow;
    runs recorded before `mode` existed are training runs)."""
    try:
        return scenario_class(Mode(str(mode))).report_class
    except ValueError:
        return scenario_class(Mode.train).report_class
