"""bench.machine.children.exit_without_teardown, the end of every `python -m bench...` command: the
interpreter's exit up to its teardown of the modules (threads joined, exit handlers, stdout and stderr
flushed, the exit code), then no teardown. Real interpreters, each run as `python -m probe` beside a
plain-Python twin of the same module where the outcome must be the interpreter's own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import atexit, os, sys, threading, time
from bench.machine.children import exit_without_teardown

class Noisy:
    def __del__(self):
        if os.environ["PROBE"] != "pipe":
            print("torn down", flush=True)

KEPT = Noisy()  # a module global: only the interpreter's teardown frees it

def main():
    what = os.environ["PROBE"]
    if what == "pipe":  # the reader is gone: the last flush fails
        sys.stdout.write("in the buffer")
        return None
    atexit.register(lambda: print("exit handler ran", flush=True))
    sys.stdout.write("buffered, not flushed\\n")
    if what == "thread":  # a non-daemon thread still working when main returns: joined first
        threading.Thread(target=lambda: (time.sleep(0.2), print("thread finished", flush=True))).start()
    if what == "string":
        sys.exit("a reason")
    if what == "raise":
        raise ValueError("boom")
    return int(what) if what.isdigit() else None

if __name__ == "__main__":
    if os.environ.get("PROBE_PLAIN"):
        sys.exit(main())
    exit_without_teardown(main)
"""


def probe(tmp_path: Path, what: str, plain: bool = False, stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
    (tmp_path / "probe.py").write_text(PROBE)
    env = dict(os.environ, PROBE=what, PYTHONPATH=f"{tmp_path}{os.pathsep}{ROOT}")
    env.pop("PROBE_PLAIN", None)
    env.pop("PYTHONUNBUFFERED", None)  # stdout block-buffered, as a pipe's is
    if plain:
        env["PROBE_PLAIN"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "probe"], cwd=tmp_path, env=env, stdout=stdout, stderr=subprocess.PIPE, text=True
    )


@pytest.mark.parametrize("what, code", [("0", 0), ("3", 3), ("none", 0), ("thread", 0)])
def test_an_exit_code_handlers_threads_and_buffered_output_as_python_ends_without_the_teardown(tmp_path, what, code):
    fast, plain = probe(tmp_path, what), probe(tmp_path, what, plain=True)
    assert fast.returncode == plain.returncode == code
    assert fast.stderr == plain.stderr == ""
    expected = ["buffered, not flushed", "exit handler ran"]
    if what == "thread":
        expected.insert(1, "thread finished")
    assert fast.stdout.splitlines() == expected  # nothing of the teardown ...
    assert plain.stdout.splitlines() == [*expected, "torn down"]  # ... which the interpreter's own exit runs


@pytest.mark.parametrize("what", ["string", "raise"])
def test_a_message_or_an_uncaught_exception_takes_the_interpreters_own_way_out(tmp_path, what):
    fast, plain = probe(tmp_path, what), probe(tmp_path, what, plain=True)
    assert fast.returncode == plain.returncode == 1
    assert fast.stdout == plain.stdout and fast.stdout.endswith("torn down\n")
    assert fast.stderr.splitlines()[-1] == plain.stderr.splitlines()[-1]
    assert fast.stderr.splitlines()[-1] == ("a reason" if what == "string" else "ValueError: boom")


def test_a_reader_gone_at_the_last_flush_is_the_interpreters_line_and_exit_120(tmp_path):
    """stdout a pipe whose reader closed it before the command ended (`| head -c0`)."""
    outcomes = []
    for plain in (False, True):
        read, write = os.pipe()
        os.close(read)
        try:
            outcomes.append(probe(tmp_path, "pipe", plain=plain, stdout=write))
        finally:
            os.close(write)
    fast, plain = outcomes
    assert fast.returncode == plain.returncode == 120
    assert (
        fast.stderr.splitlines()
        == plain.stderr.splitlines()
        == [
            "Exception ignored in: <_io.TextIOWrapper name='<stdout>' mode='w' encoding='utf-8'>",
            "BrokenPipeError: [Errno 32] Broken pipe",
        ]
    )


def test_a_module_run_inside_another_programs_process_raises_systemexit_and_that_process_goes_on(tmp_path):
    """As the bad-input table runs `python -m bench` in a pytest worker (runpy): SystemExit, no exit."""
    (tmp_path / "probe.py").write_text(PROBE)
    code = (
        "import runpy, sys\n"
        "try:\n"
        "    runpy.run_module('probe', run_name='__main__', alter_sys=True)\n"
        "except SystemExit as exc:\n"
        "    print('caught', exc.code)\n"
        "print('went on')\n"
    )
    env = dict(os.environ, PROBE="5", PYTHONPATH=f"{tmp_path}{os.pathsep}{ROOT}")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    # the handlers and the teardown at that process's own end
    assert done.stdout.splitlines() == ["buffered, not flushed", "caught 5", "went on", "exit handler ran", "torn down"]
