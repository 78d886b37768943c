"""On a terminal (issue 34.5): a real run with its stderr on a pseudo-terminal, as a user's shell
gives it. The log lines print above the progress bar, never glued onto it; with a target the bar
says the run may stop early; and the GPU-benchmark seed's flags are read as bench's keys, in one
[INFO] line. One process serves all three (a fresh exec: the fork server hands its children pipes)."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time

HANG_GUARD_S = 900  # a run of 16 tiny steps that takes longer is stuck
LOG_LINE = re.compile(r"\[\d{4}-\d\d-\d\d [^\]]*\]\[[\w.]+\]\[(?:INFO|WARNING)\] ")


def run_on_a_terminal(args, cwd, env) -> tuple:
    """`python -m bench args` with stderr on a 24x120 pseudo-terminal: (exit code, stdout, what the
    terminal received)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench", *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=slave,
    )
    os.close(slave)
    screen, deadline = b"", time.monotonic() + HANG_GUARD_S
    try:
        while time.monotonic() < deadline:
            if select.select([master], [], [], 1.0)[0]:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the process closed the terminal (it ended)
                    break
                if not chunk:
                    break
                screen += chunk
    finally:
        os.close(master)
        if proc.poll() is None and time.monotonic() >= deadline:
            proc.kill()  # stuck: the assertion below says so
        out, _ = proc.communicate(timeout=60)
    return proc.returncode, out.decode(), screen.decode(errors="replace")


def test_on_a_terminal_logs_print_above_a_whole_bar_that_names_the_target(bench, datasets, tmp_path):
    root = tmp_path / "data"
    datasets.imagenet_layout(root, train=16, val=4)
    code, out, screen = run_on_a_terminal(
        [
            "--training.epochs=2",  # the seed's spelling of train.epochs
            "allow_cpu=true",
            "model=small_cnn",
            "data=imagefolder",
            f"data.root={root}",
            "data.num_classes=4",
            "data.image_size=16",
            "data.batch_size=2",
            "data.num_workers=0",
            "train.steps_per_epoch=null",
            "train.target_accuracy=1.0",
            "benchmark.warmup_steps=1",
            "benchmark.log_every=1",  # a log line at every step: each one meets the bar
            "tracking.enabled=false",
            f"hydra.run.dir={tmp_path}/run",
        ],
        bench.cwd,
        bench.env(),
    )
    assert code == 0, screen
    assert "[INFO] the seed's keys read as bench's: training.epochs -> train.epochs" in screen
    assert [e["epoch"] for e in bench.epochs(tmp_path / "run")] == [1, 2]  # train.epochs=2 it was
    assert '"radix_metrics"' in out.splitlines()[-1]

    bars = re.findall(r"may stop at val top-1 1: +\d+%\|[^|]*\| \d+/16 \[[\d:]+, at most [\d:?]+ left, ", screen)
    assert len(bars) >= 8, screen  # drawn again below each of the steps' log lines
    logs = list(LOG_LINE.finditer(screen))
    steps = [m for m in logs if screen.startswith("step ", m.end())]
    assert len(steps) >= 8, screen
    for match in logs:  # each log line starts a line of its own: the bar was cleared first
        assert match.start() == 0 or screen[match.start() - 1] in "\r\n", repr(screen[match.start() - 80 : match.end()])
    for line in screen.split("\n"):  # what stays on a line once the terminal has drawn it
        shown = line.rstrip("\r").rsplit("\r", 1)[-1]
        if LOG_LINE.search(shown):
            assert "step/s" not in shown and "%|" not in shown, repr(line)  # no stale bar copy on a log's line
