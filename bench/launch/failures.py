"""One line from the elastic launcher's ChildFailedError: the rank that failed first, its exit
code or signal, its error."""

from __future__ import annotations

import signal
from typing import Any, Optional, Sequence, Tuple

from bench.launch.watchdog import EXIT_HUNG, EXIT_ORPHANED


def describe_failure(
    exc: Any,
    first: Optional[Tuple[int, int]] = None,
    killed: Sequence[int] = (),
    stopped: Optional[Tuple[int, int]] = None,
) -> str:
    """`first` is (rank, pid) of the worker seen to end first, if the launcher blamed another;
    `killed` are the pids the reaper killed after that: survivors, never the cause;
    `stopped` is (rank, pid) of a worker seen stopped (SIGSTOP, a debugger): its peers then wait
    for it in a collective until the timeout, so it, not the rank that timed out, is the cause."""
    failures = {r: f for r, f in exc.failures.items() if f.pid not in killed} or exc.failures
    rank, failure = min(failures.items(), key=lambda item: (item[1].exitcode >= 0, item[1].timestamp, item[0]))
    if stopped is not None and stopped[0] != rank:
        return (
            f"worker rank {stopped[0]} (pid {stopped[1]}) was stopped (SIGSTOP or a debugger) and stopped "
            f"stepping; rank {rank} then gave up waiting for it after distributed.timeout_s: {_detail(failure)}"
        )
    if first is not None and first[0] != rank and failure.exitcode >= 0 and failure.exitcode != EXIT_HUNG:
        return (
            f"worker rank {first[0]} (pid {first[1]}) died first, without an error of its own (killed by a "
            f"signal such as SIGKILL, or by the OOM killer); rank {rank} then failed: {_detail(failure)}"
        )
    if failure.exitcode == EXIT_ORPHANED:
        return f"worker rank {rank} (pid {failure.pid}) ended because its launcher was gone"
    if failure.exitcode == EXIT_HUNG:
        return (
            f"worker rank {rank} (pid {failure.pid}) saw no training step finish for distributed.timeout_s: "
            "a rank died or hung"
        )
    if failure.exitcode < 0:
        try:
            name = signal.Signals(-failure.exitcode).name
        except ValueError:
            name = f"signal {-failure.exitcode}"
        return f"worker rank {rank} (pid {failure.pid}) was killed by {name}"
    return f"worker rank {rank} (pid {failure.pid}) exited with code {failure.exitcode}: {_detail(failure)}"


def _detail(failure: Any) -> str:
    message = failure.message
    if isinstance(message, dict):
        message = message.get("message", "")
    lines = str(message or "").strip().splitlines()
    detail = lines[0] if lines else "no error message"
    return "see its log in the job dir" if detail.startswith("Process failed with exitcode") else detail
