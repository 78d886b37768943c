"""bench.api (issue 30.11, seed 004's Python API): the docs' example runs as written, a real tiny
CPU run in this process on the command's own path, and gives back the typed records; each epoch
splits its seconds into data wait and compute (issue 30.12)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bench.api import RunResult, compose_config, default_config, run
from bench.errors import ConfigError

DOC = Path(__file__).resolve().parents[2] / "docs" / "training.md"


def docs_example() -> str:
    section = DOC.read_text().split("## From Python (`bench.api`)")[1]
    return re.search(r"```python\n(.+?)```", section, re.S).group(1)


def test_the_docs_example_runs_and_gives_the_typed_records_back(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(docs_example(), "docs/training.md", "exec"), scope)
    result = scope["result"]
    assert isinstance(result, RunResult) and result.ok and result.exit_code == 0 and result.error is None
    assert result.out_dir == Path("runs/api") and result.config.data.batch_size == 8
    metrics = result.metrics
    assert type(metrics).__name__ == "TrainMetrics" and metrics.batch_size == 8 and metrics.images_per_second > 0
    # the command's own outputs: the final line on stdout, the run's files
    line = [text for text in capsys.readouterr().out.splitlines() if text.startswith('{"radix_metrics"')]
    assert json.loads(line[0])["radix_metrics"]["images_per_second"] == pytest.approx(metrics.images_per_second)
    # issue 30.12: per epoch, data wait + compute = the epoch's seconds, in the file and the records
    lines = [json.loads(text) for text in (tmp_path / "runs/api/metrics_epoch.jsonl").read_text().splitlines()]
    assert [e.epoch for e in result.epochs] == [e["epoch"] for e in lines] == [1, 2]
    for epoch in lines:
        assert epoch["data_wait_seconds"] >= 0 and epoch["compute_seconds"] > 0
        assert epoch["data_wait_seconds"] + epoch["compute_seconds"] == pytest.approx(epoch["seconds"])


def test_a_config_that_cannot_work_raises_before_any_work(tmp_path):
    config = compose_config("+experiment=cpu_smoke")
    config.data.batch_size = 0  # edited after the checks: run() checks again
    with pytest.raises(ConfigError, match=r"data.batch_size=0 is not valid: accepted a positive integer"):
        run(config, out_dir=tmp_path / "never")
    assert not (tmp_path / "never").exists()
    assert default_config().model.arch == "resnet50"  # the schema's defaults, as `python -m bench`
