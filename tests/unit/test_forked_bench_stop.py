"""The tests' fork server (tests/forked_bench.py) when the suite is stopped: Ctrl-C at a terminal (or a
SIGTERM to the suite's process group) reaches the whole group, the server too, and a pytest worker may
end without its session's end (a second Ctrl-C, or killed). The server outlives the stop, ends with its
worker, and leaves nothing in TMPDIR (it used to die in its loop and leave its folder, its log holding
the KeyboardInterrupt)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import forked_bench
import psutil

HANG_GUARD_S = 900
TESTS = Path(forked_bench.__file__).parent

# a pytest worker's part: the server started (its imports done, serving), then waiting; a Ctrl-C
# ends it by KeyboardInterrupt without stopping the server, as a worker cut short does
WORKER = f"""
import os, signal, sys
sys.path.insert(0, {str(TESTS)!r})
import forked_bench
server = forked_bench.ForkServer(lambda: dict(os.environ))
assert server._claim("bench", os.getcwd(), dict(os.environ)), server.why
print(server._workdir, server._proc.pid, flush=True)
signal.pause()
"""


def _ignored(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        fields = dict(line.split(":", 1) for line in status if ":" in line)
    return int(fields["SigIgn"], 16)


def test_a_ctrl_c_to_the_process_group_leaves_the_server_alive_until_its_worker_ends_then_no_folder(tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a process group of its own, as a terminal's job is
    )
    try:
        workdir, server_pid = worker.stdout.readline().split()
        server = psutil.Process(int(server_pid))
        assert Path(workdir).is_dir() and Path(workdir).name.startswith(forked_bench.WORKDIR_PREFIX)
        for stop in (signal.SIGINT, signal.SIGTERM):  # a SIGTERM to the group takes the same way out
            assert _ignored(server.pid) & (1 << (stop - 1)), f"the serving server does not ignore {stop.name}"
        os.killpg(worker.pid, signal.SIGINT)  # Ctrl-C at the terminal
        assert worker.wait(timeout=HANG_GUARD_S) == -signal.SIGINT
        assert forked_bench.left_alive([server], wait_s=HANG_GUARD_S) == []
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(worker.pid, signal.SIGKILL)  # whatever a failure left of the group
        worker.wait()
    log = Path(workdir) / "server.log"
    assert not Path(workdir).exists(), log.read_text()[-3000:] if log.exists() else "its folder is left"
    assert [p.name for p in tmp_path.iterdir()] == [], "something else is left in TMPDIR"
