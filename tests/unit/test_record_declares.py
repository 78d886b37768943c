"""A scenario's record declares its own presentation (issue 41 §1; bench.results.shown): its fields say
their sweep-table column, MLflow tag and the sample compare judges, and the one generic View and report
are built from that (the generic columns, job/status/overrides/error, declared once in
bench.report_view). Replaces the mypy Protocol checks (bench/scenario_checks.py, gone with the
Protocols): every built-in scenario's report class is checked here against its record, and the check
can fail: a record that declares no sample, or two, is refused when its scenario is defined. mypy on
all of bench/ stays in tests/unit/test_static_checks.py.
docs/architecture.md's "a metric" row (one field, plus the line measuring it, reaches the sweep table and
MLflow) is held as real processes in a copy of the repo by tests/e2e/test_toy_scenario.py."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from bench.config.scenario import names, scenario_class
from bench.report_view import ERROR, HEAD
from bench.results import Record, shown
from bench.scenario_base import BaseReport, BaseScenario


def test_every_scenarios_report_shows_what_its_record_declares():
    """Each built-in scenario (conf/scenario/) has a BaseReport whose view's columns are the generic
    ones around its record's own, and whose sample is a key its record declares (compare judges it)."""
    assert {"train", "inference", "storage", "echo"} <= set(names())
    for name in names():
        reports = scenario_class(name).report_class
        assert issubclass(reports, BaseReport), name
        view, record = reports.view, reports.__annotations__.get("record")
        columns = view.columns
        assert columns[: len(HEAD)] == HEAD and columns[-1] == ERROR, name
        keys = {key for key, _ in (record.declared() if isinstance(record, type) else [])}
        if keys:  # the report names its record type (the model reports build it from their outcome)
            assert view.sample.figure in keys and view.sample == record.sample(), name


def test_a_record_without_one_sample_is_refused_when_its_scenario_is_defined():
    """The check can fail (what mypy on the Protocols did): compare must know the one figure it judges."""

    @dataclass(kw_only=True)
    class NoSample(Record):
        mode: str = "nosample"
        rate: float = shown("rate/s")

    @dataclass(kw_only=True)
    class TwoSamples(NoSample):
        other: float = shown("other/s", sample={"unit": "x"})
        more: float = shown("more/s", sample={"unit": "y"})

    for record in (NoSample, TwoSamples):
        with pytest.raises(TypeError, match=rf"{record.__name__} declares .* sample"):

            @dataclass
            class Broken(BaseScenario):
                record_class = record


def test_a_record_field_declares_its_column_tag_and_sample():
    """In-process: a subclass of echo's record with one more field shows it in the generic view (its
    header, format and place), tags it, and keeps the generic columns around it."""
    from bench.echo import EchoMetrics

    @dataclass(kw_only=True)
    class Timed(EchoMetrics):
        sleep_seconds: float = shown("sleep s", "{:.3f}", tag=True)

    reports = BaseReport.of(Timed)
    assert [c[0] for c in reports.view.columns] == [
        "job",
        "status",
        "overrides",
        "processes",
        "steps/s",
        "sleep s",
        "error",
    ]
    record = Timed(steps=2, step_s=0.5, world_size=1, seconds=1.2, steps_per_second=1.6, sleep_seconds=1.0)
    assert reports(record).metrics["sleep_seconds"] == 1.0
    assert record.tags() == {"mode": "echo", "sleep_seconds": 1.0}
    assert reports.view.sample.figure == "steps_per_second"
