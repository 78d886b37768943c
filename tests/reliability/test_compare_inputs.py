"""Issue 33 §5: `python -m bench.compare nope1 nope2` in an empty directory took 9 s, printed
MLflow's table-creation logs, then [ERROR], and left a 954 KB mlflow.db. A path that does not exist
(and is no run id) is refused in one line before any store is opened, and a run id is never looked
up in a store that does not exist (reading one would create it). Run in-process through the
command's `__main__` code, as the bad-input table (bad_inputs.py) runs its rows."""

from __future__ import annotations

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
