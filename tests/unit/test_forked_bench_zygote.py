"""A bench command forked from the tests' fork server starts its multiprocessing forkserver (DDP, sweeps,
the doctor) from a spare child forked before bench ran, not by an exec (tests/forked_bench.py: ~2
CPU-s of imports saved per DDP command). What a process shows of that forkserver, and of the ranks it
forks, is what an exec'd one shows: its parent and process group, the kinds of its open fds, its
working directory, its ignored, caught and blocked signals."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil
import pytest

HANG_GUARD_S = 900
FORKSERVER_LINE = "multiprocessing.forkserver"


def _fd_kinds(process: psutil.Process) -> list:
    kinds = []
    for fd in os.listdir(f"/proc/{process.pid}/fd"):
        try:
            target = os.readlink(f"/proc/{process.pid}/fd/{fd}")
        except OSError:
            continue
        kinds.append(target.split(":")[0] if ":" in target else Path(target).name)
    return sorted(kinds)


# glibc's own two (SIGCANCEL, SIGSETXID): it catches them once a process has made a thread, as the
# fork server's imports have (pyarrow's jemalloc) and a fresh forkserver may not have yet
GLIBC_SIGNALS = (1 << 31) | (1 << 32)


def _signals(process: psutil.Process) -> dict:
    """The ignored, caught (glibc's own left out) and blocked signals, as bit masks."""
    with open(f"/proc/{process.pid}/status") as status:
        fields = dict(line.split(":", 1) for line in status if ":" in line)
    masks = {name: int(fields[name], 16) for name in ("SigIgn", "SigCgt", "SigBlk")}
    return {name: mask & ~GLIBC_SIGNALS for name, mask in masks.items()}


def _seen(command: psutil.Process, server: psutil.Process) -> dict:
    ranks = sorted(server.children(), key=lambda rank: rank.pid)
    return {
        "its parent": server.ppid() == command.pid,
        "in its group": os.getpgid(server.pid) == os.getpgid(command.pid),
        "in its cwd": server.cwd() == command.cwd(),
        "fds": _fd_kinds(server),
        "signals": _signals(server),
        "ranks": [(rank.cwd() == command.cwd(), _signals(rank)) for rank in ranks],
    }


def _a_ddp_forkserver(bench, tiny, run_dir: Path, fresh: bool):
    """(what its forkserver shows, its command line) of a two-rank run, once rank 1 has trained."""
    proc = bench.start(
        *tiny,
        "distributed=ddp",
        "distributed.nproc_per_node=2",
        "train.steps_per_epoch=100000",
        "benchmark.log_every=1",
        f"hydra.run.dir={run_dir}",
        fresh=fresh,
    )
    try:
        bench.wait_for_line(proc, run_dir / "rank1.log", "step 2/")  # both ranks train
        command = psutil.Process(proc.pid)
        (server,) = [child for child in command.children() if child.children()]
        return _seen(command, server), " ".join(server.cmdline())
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=HANG_GUARD_S)


@pytest.mark.slow
def test_a_forked_ddp_commands_forkserver_shows_what_an_execd_one_shows(bench, tiny, tmp_path):
    forked, forked_line = _a_ddp_forkserver(bench, tiny, tmp_path / "forked", fresh=False)
    execd, execd_line = _a_ddp_forkserver(bench, tiny, tmp_path / "execd", fresh=True)
    assert FORKSERVER_LINE in execd_line and FORKSERVER_LINE not in forked_line  # the zygote was used
    assert forked == execd
    assert forked["its parent"] and forked["in its group"] and forked["in its cwd"] and len(forked["ranks"]) == 2
