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
