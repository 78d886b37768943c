"""The tests' fork server (tests/forked_bench.py) forks a command whose XDG_CACHE_HOME differs from its
own: what its imports kept from that variable (torchvision's `_HOME`) is derived again in the child,
so the child holds what a fresh interpreter started with that environment holds. A read of it from
anywhere else keeps the exec; every other XDG_* variable stays guarded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import forked_bench
import pytest

TESTS = Path(forked_bench.__file__).resolve().parent

# Run as `python -m xdg_cache_probe <tests dir>` (in the test's directory): imports what the fork server
# preloads, then prints every module attribute (a str or path, or one inside a container or a class one
# level down) that holds the XDG_CACHE_HOME of its environment - what its imports kept from it.
PROBE = """
import json, os, sys

sys.path.insert(0, sys.argv[1])
import forked_bench

for name in forked_bench.PRELOAD:
    __import__(name)
mark = os.environ["XDG_CACHE_HOME"]
found = {}


def look(where, value):
    try:
        text = os.fspath(value) if isinstance(value, (str, os.PathLike)) else None
    except Exception:
        return
    if isinstance(text, str) and mark in text:
        found[where] = text


for module_name, module in sorted(sys.modules.items()):
    if module is sys.modules["__main__"]:  # this probe (also __mp_main__ in a fresh process)
        continue
    try:
        names = sorted(vars(module).items(), key=lambda item: str(item[0]))
    except TypeError:
        continue
    for attribute, value in names:
        where = f"{module_name}.{attribute}"
        look(where, value)
        inside = []
        if isinstance(value, dict):
            inside = list(value.items())
        elif isinstance(value, (list, tuple, set, frozenset)):
            inside = list(enumerate(value))
        elif isinstance(value, type) and value.__module__ == module_name:
            inside = list(vars(value).items())
        for key, item in inside:
            look(f"{where}[{key!r}]", item)
print(json.dumps(found, sort_keys=True))
"""


@pytest.mark.slow
def test_a_forked_command_with_another_xdg_cache_home_holds_what_a_fresh_interpreter_holds(bench, tmp_path):
    """The same probe, forked from the server (whose XDG_CACHE_HOME is the suite's) and exec'd
    afresh, both with XDG_CACHE_HOME in this test's directory, finds the same attributes holding it
    (torchvision's `_HOME` among them: without the re-derivation the forked one holds the server's).
    The server lists XDG_CACHE_HOME as derived again; a difference in it forks, one in XDG_CONFIG_HOME
    (read by MLflow's import) still execs."""
    (tmp_path / "xdg_cache_probe.py").write_text(PROBE)
    env = bench.env(XDG_CACHE_HOME=str(tmp_path / "elsewhere" / "cache"))
    server = forked_bench.server(bench.env)
    assert server._claim("bench", str(tmp_path), env), server.why  # starts the server if it is not up
    assert server._rederived == {"XDG_CACHE_HOME"}
    assert env["XDG_CACHE_HOME"] != server._start_env.get("XDG_CACHE_HOME")
    command = [sys.executable, "-m", "xdg_cache_probe", str(TESTS)]
    forked, _cpu_s = server._run(command, "xdg_cache_probe", str(tmp_path), env, 900)
    fresh = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert forked.returncode == 0 and fresh.returncode == 0, forked.stderr + fresh.stderr
    held = json.loads(fresh.stdout)
    assert held["torchvision._internally_replaced_utils._HOME"] == str(
        tmp_path / "elsewhere" / "cache" / "torch" / "datasets" / "vision"
    )
    assert json.loads(forked.stdout) == held

    other = bench.env(XDG_CONFIG_HOME=str(tmp_path / "config"))
    assert server.why_exec("bench", str(tmp_path), other) == "XDG_CONFIG_HOME differs from the server's environment"


def test_a_read_of_xdg_cache_home_from_elsewhere_is_recorded_as_foreign():
    """The server's record of its imports' reads: XDG_CACHE_HOME read by torch.hub's
    `_get_torch_home` called at the top of torchvision._internally_replaced_utils is the allowed
    place; the same function called from anywhere else, or os.environ read (or asked) directly, is
    not (the server then leaves it out of `rederived` and a difference execs); an iteration over the
    environment is not a read of it."""
    from torch.hub import _get_torch_home

    value_keys, _presence, _iterations, _changes, undo, foreign = forked_bench._record_env_reads()
    try:
        _get_torch_home()  # from this function, not from torchvision's module
    finally:
        undo()
    assert "XDG_CACHE_HOME" in foreign and "XDG_CACHE_HOME" in value_keys

    for read in (lambda: os.environ.get("XDG_CACHE_HOME"), lambda: "XDG_CACHE_HOME" in os.environ):
        value_keys, _presence, _iterations, _changes, undo, foreign = forked_bench._record_env_reads()
        try:
            read()
        finally:
            undo()
        assert "XDG_CACHE_HOME" in foreign

    # an iteration over the environment (tqdm's import picks its TQDM_* settings so) is no read of it,
    # as the server counts reads: with XDG_CACHE_HOME set, it is not made foreign by one
    saved = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = "/nowhere/cache"
    value_keys, _presence, _iterations, _changes, undo, foreign = forked_bench._record_env_reads()
    try:
        {key: value for key, value in os.environ.items() if key.startswith("TQDM_")}
    finally:
        undo()
        if saved is None:
            del os.environ["XDG_CACHE_HOME"]
        else:
            os.environ["XDG_CACHE_HOME"] = saved
    assert "XDG_CACHE_HOME" not in foreign

    frame = sys._getframe()
    assert forked_bench._read_where_allowed(frame, forked_bench.REDERIVED["XDG_CACHE_HOME"]) is False
    here = (("tests/unit/test_forked_bench_rederived.py", frame.f_code.co_name),)
    assert forked_bench._read_where_allowed(frame, here) is True

    server_env = {"XDG_CACHE_HOME": "/a", "XDG_CONFIG_HOME": "/c"}
    child_env = {"XDG_CACHE_HOME": "/b", "XDG_CONFIG_HOME": "/c"}
    keys = frozenset({"XDG_CACHE_HOME"})
    assert forked_bench._unsafe_difference(server_env, child_env, keys, frozenset(), keys) is None
    assert forked_bench._unsafe_difference(server_env, child_env, keys, frozenset()) == "XDG_CACHE_HOME"
