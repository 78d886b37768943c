"""Adding a scenario is what docs/architecture.md says, and nothing more: the echo scenario (bench/echo.py,
conf/scenario/echo.yaml), the documented example, is exactly those two files, under the documented size,
named nowhere else (no list of scenarios or packages in bench/, conf/ or the tests to edit), and it runs
through every path a scenario has: its own keys typed and refused in one line, a 2-process DDP run (its
config pickled to the elastic launcher's workers), a 2-job sweep whose jobs are processes of their own
(submitit's local executor: each job composes its config afresh and starts its rank through the elastic
launcher), its row in the sweep table and in MLflow, and `bench.compare` of two of its runs."""

from __future__ import annotations

import ast
import io
import json
import re
import shutil
import tokenize
from pathlib import Path

import pytest

from bench.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
ECHO = ["scenario.steps=5", "scenario.step_s=0.001"]


def code_lines(path: Path) -> int:
    """Lines holding code: no blank line, comment or docstring (issue 35's count)."""
    source = path.read_text()
    docstrings = set()
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
            docstrings.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    skipped = (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER)
    return len(
        {
            line
            for token in tokenize.generate_tokens(io.StringIO(source).readline)
            if token.type not in skipped
            for line in range(token.start[0], token.end[0] + 1)
            if line not in docstrings
        }
    )


def test_a_scenario_is_the_two_documented_files_and_nothing_else_names_it():
    """docs/architecture.md's row for a scenario names its files; echo is those files, under the size the
    docs give, and no other file of bench/, conf/ or the tests' layer and compare checks names it."""
    docs = (ROOT / "docs" / "architecture.md").read_text()
    scenario_row = r"^\| a scenario \| (\d+)(?: \+ lists)? \| `(bench/<name>\.py)`.*?`(conf/scenario/<name>\.yaml)`"
    row = re.search(scenario_row, docs, re.M)
    assert row and int(row.group(1)) == 2, "docs/architecture.md: | a scenario | 2 (+ lists) | `bench/<name>.py` ... |"
    files = [ROOT / row.group(n).replace("<name>", "echo") for n in (2, 3)]
    assert all(f.is_file() for f in files)
    lines = code_lines(files[0])
    limit = re.search(r"`bench/echo\.py`[^|]*?(\d+) code lines", docs)
    assert limit and lines == int(limit.group(1)) <= 80, f"bench/echo.py: {lines} code lines, the docs say otherwise"
    naming = sorted(
        str(path.relative_to(ROOT))
        for folder in ("bench", "conf")
        for path in (ROOT / folder).rglob("*.*")
        if path.suffix in (".py", ".yaml") and re.search(r"bench\.echo\b|\bEcho\b", path.read_text())
    )
    assert naming == ["bench/echo.py", "conf/scenario/echo.yaml"]
    for check in ("tests/unit/test_layout.py", "tests/unit/test_compare.py", "pyproject.toml"):
        assert "echo" not in (ROOT / check).read_text().lower(), f"{check} names a scenario: derive it instead"


def test_its_keys_are_typed_defaulted_and_refused_in_one_line(compose):
    from bench.config import as_plain
    from bench.launch.preview import job_config

    config = compose("scenario=echo", "scenario.steps=7")
    assert (config.mode, config.scenario.steps, config.scenario.step_s) == ("echo", 7, 0.01)
    assert as_plain(config)["scenario"] == {"steps": 7, "step_s": 0.01}  # files and MLflow params: no _target_
    assert compose("mode=echo", "scenario.steps=7") == config  # mode=echo chooses it too
    shown = io.StringIO()
    assert job_config(["mode=echo", "scenario.steps=7", "--cfg", "job"], shown) is None
    assert "\nmode: echo\nscenario:\n  steps: 7\n  step_s: 0.01\n" in shown.getvalue()  # `--cfg job`: no _target_
    refusals = {
        ("scenario.steps=0",): "scenario.steps=0 is not valid: accepted a positive count.",
        ("scenario.steps=abc",): "scenario.steps='abc' is not valid: accepted an integer.",
        ("scenario.stepz=1",): "scenario.stepz=1 is not valid: accepted a key of scenario=echo: steps, step_s.",
    }
    for overrides, sentence in refusals.items():
        with pytest.raises(ConfigError) as refused:
            compose("scenario=echo", *overrides)
        assert str(refused.value) == sentence
    with pytest.raises(ConfigError, match=r"scenario.steps=5 is not valid: accepted a key of scenario=train: it has"):
        compose("scenario.steps=5")  # its keys exist only when it is chosen


def test_a_ddp_run_pickles_its_config_to_each_rank_and_reports_rank_0(bench, tmp_path):
    """mode=echo, as a user with the old spelling runs it: two ranks started by the elastic launcher
    (the config, echo's instance in it, pickled to each), rank 0's steps/s reported."""
    bench.with_store()
    ddp = ["distributed=ddp", "distributed.nproc_per_node=2"]
    proc = bench.run("mode=echo", *ECHO, *ddp, f"hydra.run.dir={tmp_path}/run")
    final = bench.metrics(proc)
    assert list(final) == ["mode", "steps", "step_s", "world_size", "seconds", "steps_per_second"]
    assert final["world_size"] == 2 and final["steps"] == 5 and final["steps_per_second"] > 0
    assert "worker for rank 1/2 started" in (tmp_path / "run" / "rank1.log").read_text()  # a process of its own
    summary = json.loads((tmp_path / "run" / "run_summary.json").read_text())
    assert summary["results"] == final and summary["config"]["scenario"] == {"steps": 5, "step_s": 0.001}
    (run,) = bench.runs()
    assert run.info.status == "FINISHED" and run.info.run_name.startswith("echo")
    assert run.data.params["scenario.steps"] == "5" and run.data.params["mode"] == "echo"
    assert not [name for name in run.data.params if "_target_" in name]
    assert run.data.tags["mode"] == "echo" and run.data.metrics["steps_per_second"] == final["steps_per_second"]


def test_a_sweep_of_process_jobs_shows_its_rows_and_two_of_its_runs_compare(bench, tmp_path):
    """-m on submitit's local executor (what a Slurm job does, without Slurm: every job a fresh process
    that composes its config from the overrides alone, then runs its one rank in that process),
    the sweep's table and MLflow children, then `bench.compare` of its two jobs: echo's figure, its unit."""
    bench.with_store()
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="needs hydra-submitit-launcher (bench[slurm])")
    sweep = tmp_path / "sweep"
    proc = bench.run(
        "-m", "scenario=echo", "hydra/launcher=slurm_local", "scenario.steps=5", "scenario.step_s=0.001,0.002",
        f"hydra.sweep.dir={sweep}",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = [json.loads((sweep / str(n) / "run_summary.json").read_text()) for n in (0, 1)]
    assert [job["results"]["step_s"] for job in jobs] == [0.001, 0.002]
    header = next(line for line in proc.stdout.splitlines() if line.startswith("job "))
    assert "scenario.step_s" in header and "steps/s" in header  # the swept key, echo's own column
    runs = bench.runs()
    (parent,) = [r for r in runs if r.data.tags.get("sweep") == "parent"]
    children = sorted((r for r in runs if "sweep.job" in r.data.tags), key=lambda r: r.data.tags["sweep.job"])
    assert [c.data.params["scenario.step_s"] for c in children] == ["0.001", "0.002"]
    assert all(c.data.tags["bench.pid"] != parent.data.tags["bench.pid"] for c in children)  # jobs apart
    assert not [name for run in runs for name in run.data.params if "_target_" in name]

    compared = bench.run(str(sweep / "0"), str(sweep / "1"), "--out", str(tmp_path / "compare"), module="bench.compare")
    assert compared.returncode in (0, 1), compared.stderr
    head, row = compared.stdout.splitlines()[:2]
    assert "baseline steps/s" in head and "candidate steps/s" in head
    shown = [float(value) for value in re.findall(r"\d+\.\d+", row)[:2]]
    assert shown == [pytest.approx(job["results"]["steps_per_second"], abs=0.051) for job in jobs]


NEW_FIELD = '    sleep_seconds: float = shown("sleep s", "{:.3f}")  # the steps\' sleep, asked for\n'


def test_a_new_metric_is_one_field_and_the_line_measuring_it(tmp_path, bench):
    """docs/architecture.md's row: in a copy of bench/ and conf/, bench/echo.py gets one field and the
    line that measures it, nothing else; an echo sweep there (one job) shows it as a column of the
    printed table and report.md, in the job's results, and as an MLflow metric of the job's run."""
    docs = (ROOT / "docs" / "architecture.md").read_text()
    row = re.search(r"^\| a metric \| (\d+) \| `bench/<scenario>\.py`", docs, re.M)
    assert row and row.group(1) == "1", "docs/architecture.md: | a metric | 1 | `bench/<scenario>.py` ... |"
    copy = tmp_path / "copy"
    for folder in ("bench", "conf"):
        shutil.copytree(ROOT / folder, copy / folder, ignore=shutil.ignore_patterns("__pycache__"))
    echo = copy / "bench" / "echo.py"
    source = echo.read_text()
    anchor = next(line for line in source.splitlines(keepends=True) if line.lstrip().startswith("steps_per_second:"))
    measured = "steps_per_second=rate"
    assert source.count(anchor) == 1 and source.count(measured) == 1
    echo.write_text(
        source.replace(anchor, anchor + NEW_FIELD).replace(
            measured, f"{measured}, sleep_seconds=self.steps * self.step_s"
        )
    )
    changed = [
        str(path.relative_to(copy))
        for path in copy.rglob("*.*")
        if path.suffix in (".py", ".yaml") and path.read_bytes() != (ROOT / path.relative_to(copy)).read_bytes()
    ]
    assert changed == ["bench/echo.py"]

    # `python -m bench` started in the copy, so its bench/ is the one imported (`-m` puts the working
    # directory first on sys.path, ahead of the installed bench): what PYTHONPATH=<copy> did, in a
    # fork (a different PYTHONPATH is a fresh interpreter's, ~4 CPU-s more); the store is the copy's
    bench = type(bench)(copy).with_store()
    sweep = tmp_path / "sweep"
    proc = bench.run("-m", "scenario=echo", "scenario.steps=2", "scenario.step_s=0.002", f"hydra.sweep.dir={sweep}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    header = next(line for line in proc.stdout.splitlines() if line.startswith("job "))
    assert re.search(r"steps/s +sleep s +error", header), header
    assert "| sleep s |" in (sweep / "report" / "report.md").read_text()
    jobs = sorted((r for r in bench.runs() if "sweep.job" in r.data.tags), key=lambda r: r.data.tags["sweep.job"])
    assert [run.data.metrics["sleep_seconds"] for run in jobs] == [pytest.approx(0.004)]
    final = json.loads((sweep / "0" / "run_summary.json").read_text())["results"]
    assert list(final)[-2:] == ["steps_per_second", "sleep_seconds"] and final["sleep_seconds"] == pytest.approx(0.004)
