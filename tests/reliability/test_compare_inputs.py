"""Issue 33 §5: `python -m bench.compare nope1 nope2` in an empty directory took 9 s, printed
MLflow's table-creation logs, then [ERROR], and left a 954 KB mlflow.db. A path that does not exist
(and is no run id) is refused in one line before any store is opened, and a run id is never looked
up in a store that does not exist (reading one would create it). Run in-process through the
command's `__main__` code, as the bad-input table (bad_inputs.py) runs its rows."""

from __future__ import annotations

import json

from bad_inputs import run_in_process

RUN_ID, OTHER_ID = "0123456789abcdef0123456789abcdef", "0123456789abcdef0123456789abcdee"


def test_a_missing_path_or_store_is_one_line_and_no_store_is_made(tmp_path, capfd, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    (tmp_path / "run").mkdir()
    refused = {
        ("nope1", "nope2"): "[ERROR] baseline nope1 is not a directory nor an MLflow run id (32 hex digits): pass "
        "a run's directory, a sweep's directory or a run id",
        ("run", "nope2"): "[ERROR] candidate nope2 is not a directory nor an MLflow run id",
        (RUN_ID, OTHER_ID): f"[ERROR] there is no MLflow store at sqlite:///{tmp_path}/mlflow.db to read a run id "
        "from: name the store that holds it with --tracking-uri or MLFLOW_TRACKING_URI",
        ("run", RUN_ID, "--tracking-uri", "./mlruns"): "[ERROR] there is no MLflow store at ./mlruns to read",
    }
    for args, line in refused.items():
        outcome = run_in_process("bench.compare", list(args), capfd)
        assert outcome.returncode == 2 and outcome.stdout == "", outcome
        (said,) = outcome.stderr.splitlines()
        assert said.startswith(line), said
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no mlflow.db, no mlruns/, no compare/


def test_a_cut_run_summary_is_one_line_naming_the_file(tmp_path, capfd, monkeypatch):
    """Issue 39 item 14: a run_summary.json cut short (a copy, a full disk) gave `bench.compare` and
    `bench.report --sweep` 24-30 lines of JSONDecodeError, the file unnamed; now one line, exit 2."""
    monkeypatch.chdir(tmp_path)
    whole = json.dumps({"results": {"images_per_second": 99.5}, "config": {"data": {"batch_size": 4}}})
    for name, text in (("cut", whole[:40]), ("list", "[1, 2]"), ("bare", '{"results": {}}'), ("good", whole)):
        (tmp_path / "sweep" / name / ".hydra").mkdir(parents=True)
        (tmp_path / "sweep" / name / "run_summary.json").write_text(text)
    cut = tmp_path / "sweep" / "cut" / "run_summary.json"
    said = f"[ERROR] {cut} cannot be read: it is not valid JSON (Expecting property name enclosed in double quotes"
    for module, args in (
        ("bench.compare", [str(cut.parent), str(tmp_path / "sweep" / "good")]),
        ("bench.compare", [str(tmp_path / "sweep" / "good"), str(tmp_path / "sweep")]),  # a sweep holding it
        ("bench.report", ["--sweep", str(tmp_path / "sweep"), "--out", str(tmp_path / "report")]),
    ):
        outcome = run_in_process(module, args, capfd)
        assert outcome.returncode == 2 and outcome.stdout == "", outcome
        (line,) = outcome.stderr.splitlines()
        assert line.startswith(said) and line.endswith(
            "line 1 column 41: cut short?); accepted a run_summary.json as bench writes it (run it again)"
        )
    for name in ("list", "bare"):  # JSON, but not a summary
        why = "it is not a JSON object holding config and results"
        outcome = run_in_process(
            "bench.compare", [str(tmp_path / "sweep" / name), str(cut.parent.parent / "good")], capfd
        )
        assert outcome.returncode == 2 and f"run_summary.json cannot be read: {why}; " in outcome.stderr, outcome
