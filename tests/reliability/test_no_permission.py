"""A folder this user may not enter (issue 33 probe): `storage.root`, `bench.data digits --dst` under
one, and `data.root` one, are refused naming the key. Before, `os.stat` raised PermissionError
inside the check itself: a traceback (`digits failed: PermissionError`, exit 1), or Hydra's fallback
blaming the run directory (`cannot write the run directory: <data.root>`).

root is not refused by permission bits: as root, the checks run in a process without the
capabilities that override them (setpriv), which is what a user's account sees."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

CHECKS = """
import sys
from bench.config.data import DataConfig
from bench.data.registry import check_location
from bench.errors import DataError
from bench.machine.writable import writable_dir_refusal

closed = sys.argv[1]
print(writable_dir_refusal("storage.root", closed + "/st"))
print(writable_dir_refusal("--dst", closed))
try:
    check_location(DataConfig(name="imagefolder", root=closed))
except DataError as exc:
    print(exc)
"""


def test_a_folder_this_user_may_not_enter_is_one_line_naming_the_key(tmp_path):
    closed = tmp_path / "closed"
    closed.mkdir()
    closed.chmod(0)
    prefix = []
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            pytest.skip("root needs setpriv to see permission bits")
        drop = "-dac_override,-dac_read_search"
        prefix = ["setpriv", f"--bounding-set={drop}", f"--inh-caps={drop}"]
    proc = subprocess.run([*prefix, sys.executable, "-c", CHECKS, str(closed)], capture_output=True, text=True)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    root, dst, data = proc.stdout.splitlines()
    assert root == (
        f"storage.root='{closed}/st' is not valid: accepted a directory this user can write (made if missing); "
        f"{closed} is not writable (Permission denied)."
    )
    assert dst.startswith(f"--dst='{closed}' is not valid: accepted a directory this user can write") and (
        "Permission denied" in dst
    )
    assert data == f"data.root='{closed}' cannot be read: {closed}: Permission denied"


def test_a_run_dir_this_user_cannot_write_is_one_line_naming_hydra_run_dir(bench, tiny, tmp_path):
    """Issue 39.13: an existing `hydra.run.dir` that cannot be written was 58 lines of Hydra's log
    set-up ending `Unable to configure handler 'file'`, exit 1 (a new folder under it: one line,
    exit 2). Both are one [ERROR] line naming the key, exit 2, and nothing is made. As root the run
    goes without the capabilities that override permission bits (setpriv), as for a user."""
    if os.geteuid() == 0 and not shutil.which("setpriv"):
        pytest.skip("root needs setpriv to see permission bits")
    closed = tmp_path / "closed"
    closed.mkdir()
    closed.chmod(0o555)
    drop = "-dac_override,-dac_read_search"
    prefix = ["setpriv", f"--bounding-set={drop}", f"--inh-caps={drop}"] if os.geteuid() == 0 else []
    for run_dir in (closed, closed / "new"):
        proc = subprocess.run(
            [*prefix, sys.executable, "-m", "bench", *tiny, f"hydra.run.dir={run_dir}"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=bench.env(),
        )
        assert proc.returncode == 2 and bench.single_error(proc) == (
            f"[ERROR] hydra.run.dir='{run_dir}' is not valid: accepted a directory this user can write "
            f"(made if missing); {closed} is not writable (Permission denied)."
        ), proc.stderr
    assert not any(closed.iterdir())
