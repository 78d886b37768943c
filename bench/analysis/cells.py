"""A sweep table's cell, read without pandas (a training run's report imports these; pandas costs
a run's start ~0.4 s of CPU): whether it holds a figure, and what a label shows for it."""

from __future__ import annotations

from typing import Any


def absent(value: Any) -> bool:
    """No figure behind this cell: None, pandas' NA (by its type's name; first, as NA compared is NA,
    which has no truth value), NaN (the one value unequal to itself) or an empty string."""
    return value is None or type(value).__name__ == "NAType" or value != value or value == ""


def shown(value: Any, default: Any = "") -> Any:
    """A cell's value for a label: `default` when the run has no figure there."""
    return default if absent(value) else value
