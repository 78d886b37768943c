"""The open sets (bench.registries, issue 35.4): a storage format, a storage backend, an S3 client
and a data option are one line each in a table that the config reads (its refusal names the
table's names, as an Enum's did), and a user's own class or function is named as module:attr
without editing bench: looked for when the config is composed, imported at preflight."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest
import torch
from hydra.core.config_store import ConfigStore

from bench.config import compose, sweep_problem
from bench.data.registry import build_batches
from bench.errors import ConfigError
from bench.iobench.formats.base import format_for
from bench.registries import BACKENDS, DATA, FORMATS, KEYS, DataOption


@pytest.fixture
def mylab(tmp_path, monkeypatch):
    """tests/own_code.py as a user's package `mylab.own`, on Python's path."""
    (tmp_path / "mylab").mkdir()
    (tmp_path / "mylab" / "__init__.py").write_text("")
    shutil.copyfile(Path(__file__).parents[1] / "own_code.py", tmp_path / "mylab" / "own.py")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "mylab.own"
    for name in [m for m in sys.modules if m == "mylab" or m.startswith("mylab.")]:
        del sys.modules[name]
    format_for.cache_clear()


def test_an_unknown_name_is_refused_in_one_line_naming_the_registered_ones():
    for key, table in KEYS.items():
        with pytest.raises(ConfigError) as refused:
            compose(f"{key}=nope")
        assert str(refused.value) == f"{key}='nope' is not valid: accepted one of {', '.join(table)}."
    assert str(refused.value).endswith(f"accepted one of {', '.join(DATA)}.")  # data.name's, in the table's order


def test_a_format_and_a_data_option_are_added_by_registration_alone(mylab, monkeypatch):
    registered = list(FORMATS)
    monkeypatch.setitem(FORMATS, "framed", f"{mylab}:Framed")
    monkeypatch.setitem(DATA, "zeros", DataOption(f"{mylab}:zero_batches"))
    try:  # every compose stores the registered options as group options: `zeros` must not outlive the test
        config = compose("mode=storage", "storage.workload.format=framed", "data=zeros")  # data=: a group option too
        assert (config.storage.workload.format, config.data.name) == ("framed", "zeros")
        assert type(format_for("framed")).__name__ == "Framed"
        images, _labels = next(build_batches(config.data, torch.device("cpu"), torch.contiguous_format, seed=0))
        assert images.shape == (config.data.batch_size, 3, config.data.image_size, config.data.image_size)
        accepted = re.escape(f"accepted one of {', '.join([*registered, 'framed'])}.") + "$"
        with pytest.raises(ConfigError, match=accepted):
            compose("storage.workload.format=parquet")
    finally:
        ConfigStore.instance().repo["data"].pop("zeros.yaml", None)


@pytest.mark.slow  # in-process, but composes twice and builds batches with a user's own code: ~1.6 CPU-s
def test_own_code_is_looked_for_when_composed_and_imported_at_preflight(mylab):
    config = compose("mode=storage", f"storage.workload.format={mylab}:Framed", f"data.name={mylab}:zero_batches")
    assert mylab not in sys.modules  # composing ran none of the user's code
    assert config.data.root is None  # a builder of one's own reads what it reads: no data.root asked for
    assert format_for(f"{mylab}:Framed").extension == "own"
    assert next(build_batches(config.data, torch.device("cpu"), torch.contiguous_format, seed=0))[1].sum() == 0

    # issue 39 §16: a data option is a DataOption or a builder taking build_batches' arguments by name
    from bench.data.registry import check_location

    option = compose(f"data.name={mylab}:ZEROS").data
    check_location(option)
    assert next(build_batches(option, torch.device("cpu"), torch.contiguous_format, seed=0))[1].sum() == 0
    for wrong in ("builtins:print", f"{mylab}:Framed", f"{mylab}:MAGIC"):  # print takes *args; a class; bytes
        with pytest.raises(ConfigError) as refused:
            check_location(compose(f"data.name={wrong}").data)
        assert str(refused.value) == (
            f"data.name='{wrong}' is not valid: accepted a bench.registries.DataOption or a batches builder taking "
            "(data, device, memory_format, seed, rank, world_size, storage)."
        )

    # its package is there: what it holds is preflight's to say
    compose("mode=storage", f"storage.workload.format={mylab}:Nope")
    with pytest.raises(ConfigError) as refused:
        format_for(f"{mylab}:Nope")
    assert str(refused.value) == (
        f"storage.workload.format='{mylab}:Nope' is not valid: accepted a module:attr Python can import "
        f"(AttributeError: module '{mylab}' has no attribute 'Nope')."
    )
    with pytest.raises(ConfigError, match=re.escape("accepted a subclass of bench.iobench.formats.base.Format")):
        format_for(f"{mylab}:zero_batches")


@pytest.mark.parametrize(
    "override, accepted",
    [
        ("storage.workload.format=nolab.own:Framed", "a module:attr Python can import (no package 'nolab' on Python's"),
        ("data.name=my-lab:batches", f"one of {', '.join(DATA)}, or a module:attr of your own"),
        ("storage.name=mylab.own", f"one of {', '.join(BACKENDS)}."),
    ],
    ids=["package-not-on-the-path", "not-a-module-name", "no-attr"],
)
def test_own_code_of_the_wrong_shape_or_not_on_the_path_is_refused_when_composed(mylab, override, accepted):
    with pytest.raises(ConfigError, match=re.escape("is not valid: accepted " + accepted)):
        compose(override)


def test_a_sweep_is_refused_before_any_job_for_a_name_no_job_can_take(mylab):
    assert sweep_problem([f"storage.workload.format=raw,{mylab}:Framed", "data.name=choice(synthetic,shards)"]) is None
    assert sweep_problem(["data.batch_size=8", "storage.workload.format=raw,parquet"]) == (
        f"storage.workload.format='parquet' is not valid: accepted one of {', '.join(FORMATS)}."
    )


def test_bench_s_own_models_are_one_list_each_with_its_yaml():
    """Issue 41 §4: the names the config accepts torch-free are the @own builders of
    bench.runtime.models, read from its source; each is a group option (conf/model/<name>.yaml)."""
    from bench import config_dir
    from bench.runtime.model_names import OWN_MODELS
    from bench.runtime.models import OWN

    assert tuple(OWN) == OWN_MODELS and {"cifar_resnet18", "small_cnn"} <= set(OWN)
    for name in OWN:
        assert f"arch: {name}" in (Path(config_dir()) / "model" / f"{name}.yaml").read_text()
        assert compose(f"model={name}").model.arch == name
