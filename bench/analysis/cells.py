"""A sweep table's cell, read without pandas (a training run's report imports these; pandas costs
a run's start ~0.4 s of CPU): whether it holds a figure, and what a label shows for it."""

from __future__ import annotations

import math
from typing import Any


def absent(value: Any) -> bool:
    """No figure behind this cell: None, NaN, pandas' NA (by its type's name) or an empty string."""
    return (
        value is None
        or type(value).__name__ == "NAType"
        or (isinstance(value, float) and math.isnan(value))
        or (isinstance(value, str) and value == "")
    )


def shown(value: Any, default: Any = "") -> Any:
    """A cell's value for a label: `default` when the run has no figure there."""
    return default if absent(value) else value
