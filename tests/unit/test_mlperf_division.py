"""train.mlperf_log: the division is a key, open unless asked (issue 30.9), and a run that writes
no MLPerf Training log refuses the key instead of ignoring it (issue 28.6). The real checker on a
real digits run's log: tests/e2e/test_accuracy.py; the refusals as one [ERROR] line and exit 2:
tests/reliability/bad_inputs.py."""

from __future__ import annotations

import pytest

from bench.errors import BenchError, ConfigError
from bench.train.mlperf_log import hyper_parameters


def division(config) -> str:
    return hyper_parameters(config, 64, 0.1, 100, 1437, "cpu")["submission_division"]


def test_the_division_is_open_unless_closed_is_asked(compose):
    assert division(compose("+experiment=cpu_smoke")) == "open"
    assert division(compose("+experiment=cpu_smoke", "train.mlperf_division=closed")) == "closed"
    with pytest.raises(BenchError, match=r"train.mlperf_division='semi' is not valid: accepted one of open, closed"):
        compose("train.mlperf_division=semi")


@pytest.mark.parametrize(
    "overrides, mode",
    [(["+experiment=cpu_smoke", "mode=inference"], "inference"), (["+experiment=storage_resnet50_h100"], "storage")],
    ids=["inference", "storage-preset"],
)
def test_mlperf_log_is_refused_where_no_training_log_is_written(compose, overrides, mode):
    with pytest.raises(ConfigError) as refused:
        compose(*overrides, "train.mlperf_log=true")
    assert str(refused.value).startswith(f"train.mlperf_log=True is not valid: accepted false with mode={mode} ")
