"""Which scenario's report shows a recorded run: by the mode it was recorded with (what a scenario
is: bench.scenario_base)."""

from __future__ import annotations

from typing import Any, Sequence, Type

from bench.config.scenario import names, scenario_class
from bench.errors import ConfigError, ReportError
from bench.report_view import Sample as Sample  # re-exported: compare's
from bench.scenario_base import BaseReport

DEFAULT_MODE = "train"  # runs recorded before `mode` existed are training runs


def mode_name(mode: Any) -> str:
    """A recorded mode as a name: none recorded (None, NaN, pandas' NA, "": a run from before modes) is training."""
    return DEFAULT_MODE if str(mode) in ("", "None", "nan", "<NA>") else str(mode)


def report_class(mode: Any) -> Type[BaseReport]:
    """The report type of a run recorded with this mode (a name read back from a file or MLflow;
    runs recorded before `mode` existed, None here, are training runs). A mode no scenario has is
    refused in one line (ReportError, exit 2): its figures cannot be read as another scenario's."""
    mode = mode_name(mode)
    try:
        return scenario_class(mode).report_class
    except ConfigError:
        raise ReportError(
            f"a run recorded with mode={mode} has no scenario here (conf/scenario/: {', '.join(names())}): "
            "its figures cannot be read as another scenario's"
        ) from None


def report_class_of_modes(modes: Sequence[Any]) -> Type[BaseReport]:
    """The report type that shows a sweep: its jobs' one mode (a sweep of mixed modes, or with
    none recorded, is shown as training runs are)."""
    found = {mode_name(m) for m in modes}
    return report_class(found.pop() if len(found) == 1 else DEFAULT_MODE)
