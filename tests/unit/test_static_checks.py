"""The linter, the formatter and the type checker pyproject.toml configures, with 0 findings on bench/
(and the linter and formatter on tests/ too: one habit for the whole repository; .pre-commit-config.yaml
runs the same three before a commit).

The type checker matters more here than usual: the CUDA, NCCL and NVML paths never run on a
machine without a GPU, so mypy is the one check they get in CI. Both tools come with the `test`
extra; where one is not installed its test is skipped, saying so."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_tool(module: str, args: List[str]) -> subprocess.CompletedProcess:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (pip install -e '.[test]' brings it)")
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing_in_bench_and_tests():
    done = run_tool("ruff", ["check", "bench", "tests", "--output-format", "concise", "--no-cache"])
    assert done.returncode == 0, f"ruff check bench tests:\n{done.stdout}{done.stderr}"


def test_bench_and_tests_are_as_ruff_format_writes_them():
    done = run_tool("ruff", ["format", "--check", "bench", "tests", "--no-cache"])
    assert done.returncode == 0, (
        f"ruff format --check bench tests (run `ruff format bench tests`):\n{done.stdout}{done.stderr}"
    )


def test_the_pre_commit_config_runs_the_same_checks():
    """.pre-commit-config.yaml runs what this file runs, on the same paths, with the tools installed here."""
    text = (ROOT / ".pre-commit-config.yaml").read_text()
    for entry in (
        "entry: ruff check bench tests",
        "entry: ruff format --check bench tests",
        "entry: mypy",
        "entry: python tests/conflict_markers.py",
    ):
        assert entry in text, entry


def test_mypy_finds_nothing_in_bench():
    # files, strictness and ignores: [tool.mypy] in pyproject.toml. The cache outside the checkout: a
    # fresh clone (CI's) would otherwise pay ~30 s of a cold start each time; mypy checks each
    # module's hash against it, so a cached answer is never a stale one
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "bench-mypy"
    done = run_tool("mypy", ["--cache-dir", str(cache)])
    assert done.returncode == 0, f"mypy:\n{done.stdout}{done.stderr}"
    assert "Success: no issues found" in done.stdout


def test_no_merge_conflict_marker_anywhere_in_the_tree(tmp_path):
    """No file git would commit holds `<<<<<<<`, `=======` or `>>>>>>>` lines (docs/configuration.md once
    did); the same script runs in pre-commit. Proven to find one first, in a scratch repository."""
    import tests.conflict_markers as conflict_markers

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "doc.md").write_text("a\n<<<<<<< HEAD\nb\n=======\nc\n>>>>>>> branch\n")
    # a seven-"=" setext underline is refused too: rare in prose, and a half-resolved conflict looks the same
    (tmp_path / "setext.md").write_text("a heading\n=======\n")
    found = sorted((str(path), line) for path, line, _ in conflict_markers.markers(tmp_path))
    assert found == [("doc.md", 2), ("doc.md", 4), ("doc.md", 6), ("setext.md", 2)]
    hits = [f"{path}:{line}" for path, line, _ in conflict_markers.markers(ROOT)]
    assert hits == [], f"unresolved merge-conflict markers: {hits}"


@pytest.mark.slow  # starts git (tests/conflict_markers.py's `git ls-files`)
def test_what_git_would_commit_at_the_top_level_is_the_fixed_layout():
    """The top level is fixed (pyproject.toml, README.md, conf/, bench/, tests/, launchers/, docker/,
    docs/, .ci/ and git's and pre-commit's files): a 2.9 MB py-spy wheel committed there by mistake
    (e4747ed, 2026-12-01) stayed a day. The files git would commit: tracked, and untracked unignored."""
    import tests.conflict_markers as conflict_markers

    fixed = {"pyproject.toml", "README.md", "conf", "bench", "tests", "launchers", "docker", "docs", ".ci"}
    fixed |= {".gitignore", ".pre-commit-config.yaml"}
    top = {path.relative_to(ROOT).parts[0] for path in conflict_markers.checked_files(ROOT)}
    assert top <= fixed, f"not in the layout: {sorted(top - fixed)}"
