"""The measured window's progress bar on a terminal (benchmark.progress): the log lines print above
it and it stays whole; with train.target_accuracy it says the run may stop early."""

from __future__ import annotations

import contextlib
import sys
from typing import ContextManager, Optional

from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm


def progress_bar(planned: int, target: Optional[float], shown: bool) -> tqdm:
    """The window's bar on stderr, drawn on a terminal only. With a target the run may end at any
    evaluation: the bar says so, and its time left is an upper bound."""
    early = target is not None
    return tqdm(
        total=planned,
        unit="step",
        file=sys.stderr,
        mininterval=1.0,
        leave=False,
        disable=None if shown else True,
        desc=f"may stop at val top-1 {target:g}" if early else None,
        bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}, at most {remaining} left, {rate_fmt}]"
        if early
        else None,
    )


def logs_above(bar: tqdm) -> ContextManager[object]:
    """While the bar is drawn, the root logger's console handlers write through tqdm.write (the bar
    cleared, the line written, the bar redrawn below it), so a log line never lands on the bar's line."""
    return logging_redirect_tqdm() if not bar.disable else contextlib.nullcontext()
