""".ci/coverage_lost.py: the lines a run before a change executed and no run after it did, a changed
file's lines followed through its diff (real files, real coverage.json shapes)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / ".ci" / "coverage_lost.py"


def coverage_lost():
    spec = importlib.util.spec_from_file_location("coverage_lost", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def checkout(root: Path, source: str, executed: list) -> list:
    (root / "bench").mkdir(parents=True)
    (root / "bench" / "m.py").write_text(source)
    data = root / "coverage.json"
    data.write_text(json.dumps({"files": {"bench/m.py": {"executed_lines": executed}}}))
    return [str(root), str(data)]


def test_a_line_no_run_after_executed_is_named_and_a_moved_line_is_not(tmp_path, capsys):
    main = coverage_lost().main
    before = checkout(tmp_path / "before", "a = 1\nb = 2\nc = 3\n", [1, 2, 3])
    # the change inserts a line first: b and c move down one; c is no longer executed
    after = checkout(tmp_path / "after", "new = 0\na = 1\nb = 2\nc = 3\n", [1, 2, 3])
    assert main([*before, "--after", *after]) == 1
    assert capsys.readouterr().out.splitlines() == ["bench/m.py:4: c = 3", "1 lines executed before and not after"]
    again = checkout(tmp_path / "again", "new = 0\na = 1\nb = 2\nc = 3\n", [4])  # another run after: c ran there
    assert main([*before, "--after", *after, *again]) == 0
    assert capsys.readouterr().out == "0 lines executed before and not after\n"
    assert main([*before, *after]) == 2  # no --after: the usage
