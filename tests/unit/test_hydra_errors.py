"""bench.config.hydra_errors reads Hydra's and OmegaConf's error texts with regexes: one test per
message it parses. Each message is real: a bad override composed through Hydra in this process
(the installed Hydra's words), so a Hydra release that rewords one fails here, not as a
multi-line report in front of a user."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path
from typing import List, Optional

import pytest
from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from bench import config_dir
from bench.config import compose, load
from bench.config import hydra_errors as he
from bench.config.schema import register_configs
from bench.errors import ConfigError, ConfigProblem
from bench.registries import DATA


def hydra_failure(overrides: List[str], conf: Optional[str] = None) -> BaseException:
    """The exception Hydra (or OmegaConf, loading the composed config) raises for these overrides."""
    register_configs()
    with initialize_config_dir(config_dir=conf or config_dir(), version_base="1.3"):
        try:
            load(hydra_compose(config_name="config", overrides=overrides))
        except (HydraException, OmegaConfBaseException) as exc:
            return exc
        except ConfigProblem as problem:  # load() rewords OmegaConf's resolution errors itself
            assert problem.__context__ is not None
            return problem.__context__
    raise AssertionError(f"{overrides} composed without an error")


def texts(exc: BaseException) -> str:
    """What one_line reads: the message and its cause's."""
    return str(exc) + "\n" + (str(exc.__cause__) if exc.__cause__ is not None else "")


# (overrides, the regexes that must match Hydra's text, the one line bench prints)
CASES = [
    pytest.param(
        ["data=nosuch"],
        [he._MISSING_OPTION, he._AVAILABLE],
        f"data='nosuch' is not valid: accepted one of {', '.join(sorted(DATA))}.",  # the group's options, sorted
        id="unknown-option",
    ),
    pytest.param(
        ["data.batch_size=abc"],
        [he._FULL_KEY, he._CONVERT],
        "data.batch_size='abc' is not valid: accepted an integer.",
        id="not-an-integer",
    ),
    pytest.param(
        ["optimizer.lr=fast"],
        [he._FULL_KEY, he._CONVERT],
        "optimizer.lr='fast' is not valid: accepted a number.",
        id="not-a-number",
    ),
    pytest.param(
        ["data.split=foo"],
        [he._FULL_KEY, he._ENUM],
        "data.split='foo' is not valid: accepted one of train, val.",
        id="not-a-choice",
    ),
    pytest.param(
        ["data.augment=maybe"],
        [he._FULL_KEY, he._BOOL],
        "data.augment='maybe' is not valid: accepted true or false.",
        id="not-a-bool",
    ),
    pytest.param(
        ["data.batch_sise=8"],
        [he._FULL_KEY, he._NOT_A_KEY, he._APPEND_HINT],
        "data.batch_sise='8' is not valid: accepted a key of data (did you mean data.batch_size?).",
        id="unknown-key",
    ),
    pytest.param(
        ["data.batch_size=${nosuch}"],
        [he._FULL_KEY],
        "the config could not be resolved: Interpolation key 'nosuch' not found (at data.batch_size)",
        id="interpolation",
    ),
    pytest.param(
        ["data.batch_size=1,2"],
        [],
        "Ambiguous value for argument 'data.batch_size=1,2': to sweep over it add -m (--multirun); "
        "for a list write key=[a,b]",
        id="ambiguous",
    ),
    pytest.param(
        ["tracking.run_name=a!b"],
        [],
        "a command-line override could not be parsed (LexerNoViableAltException: tracking.run_name=a!b): "
        "quote a value that holds spaces or special characters, e.g. 'tracking.run_name=\"my run!\"'",
        id="lexer",
    ),
    pytest.param(
        ["data.batch_size=[1"],
        [],
        "a command-line override could not be parsed (no viable alternative at input '[1'): see "
        "https://hydra.cc/docs/advanced/override_grammar/basic",
        id="grammar",
    ),
]


@pytest.mark.slow  # in-process, but composes each case twice, through Hydra and through bench: ~3 CPU-s
@pytest.mark.parametrize("overrides, patterns, expected", CASES)
def test_each_hydra_message_is_parsed_into_its_one_line(overrides, patterns, expected):
    exc = hydra_failure(overrides)
    for pattern in patterns:
        assert pattern.search(texts(exc)), f"{pattern.pattern!r} no longer matches Hydra's text:\n{texts(exc)}"
    assert he.one_line(exc) == expected
    with pytest.raises((ConfigError, ConfigProblem)) as raised:  # the path `python -m bench` and the tools take
        compose(*overrides)
    assert str(raised.value) == expected and raised.value.exit_code == 2
    if isinstance(raised.value, ConfigError):  # what bench.api's caller reads: the key, the value, what is accepted
        key, value = raised.value.key, raised.value.value
        assert expected == f"{key}={value!r} is not valid: accepted {raised.value.accepted}."


def test_the_plus_prefixed_group_keeps_its_plus():
    exc = hydra_failure(["+experiment=nosuch"])
    assert he._MISSING_OPTION.search(str(exc)).groups() == ("experiment", "nosuch")
    line = he.one_line(exc)
    assert line.startswith("+experiment='nosuch' is not valid: accepted one of ") and "cpu_smoke" in line


def test_a_group_not_in_the_defaults_list_is_told_to_use_plus(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["bench", "experiment=cpu_smoke"])  # _given reads the command line
    exc = hydra_failure(["experiment=cpu_smoke"])
    assert he._NOT_IN_DEFAULTS.search(str(exc)).group(1) == "experiment"
    assert he.one_line(exc) == (
        "experiment='cpu_smoke' is not valid: accepted +experiment=cpu_smoke: experiment "
        "is not in the defaults list, so it is added with a leading +."
    )


def test_a_launcher_that_needs_the_submitit_plugin(tmp_path):
    """conf/hydra/launcher/slurm*.yaml build on hydra-submitit-launcher's configs; without the
    plugin Hydra cannot load them. The plugin is installed here, so a launcher config building
    on a submitit_* config that does not exist gives Hydra's same message."""
    conf = Path(shutil.copytree(config_dir(), tmp_path / "conf"))
    (conf / "hydra" / "launcher" / "needs_plugin.yaml").write_text(
        "defaults:\n  - submitit_not_installed\n  - _self_\n"
    )
    exc = hydra_failure(["hydra/launcher=needs_plugin"], conf=str(conf))
    assert he._NEEDS_SUBMITIT.search(str(exc)).group(1) == "needs_plugin"
    assert he.one_line(exc) == (
        "hydra/launcher='needs_plugin' is not valid: accepted where hydra-submitit-launcher "
        "is installed (pip install 'bench[slurm]'), and it is not."
    )


def test_a_misspelt_key_in_a_config_file_names_the_file_and_its_value(tmp_path, monkeypatch):
    """Issue 39 §12: it said `data.batch_sise=None` without naming the file (which says 8)."""
    conf = Path(shutil.copytree(config_dir(), tmp_path / "conf"))
    (conf / "experiment" / "typo.yaml").write_text("# @package _global_\ndata:\n  batch_sise: 8\n")
    monkeypatch.setattr(sys, "argv", ["bench", "--config-dir", str(conf), "+experiment=typo"])
    exc = hydra_failure(["+experiment=typo"], conf=str(conf))
    assert he._IN_CONFIG.search(str(exc)).group(1) == "experiment/typo"
    assert he.one_line(exc) == (
        "data.batch_sise=8 is not valid: accepted a key of data (did you mean data.batch_size?); "
        f"{conf / 'experiment' / 'typo.yaml'} sets it."
    )


def test_every_regex_of_the_module_has_a_message_here():
    """A regex added to hydra_errors gets its real message in this file too."""
    covered = {p.pattern for case in CASES for p in case.values[1]}
    covered |= {
        he._MISSING_OPTION.pattern,
        he._NOT_IN_DEFAULTS.pattern,
        he._NEEDS_SUBMITIT.pattern,
        he._IN_CONFIG.pattern,
    }
    module = {value.pattern for name, value in vars(he).items() if isinstance(value, re.Pattern)}
    assert module - covered == set()


def test_an_os_error_blames_the_run_directory_only_when_it_is_on_its_path(tmp_path, monkeypatch, capsys):
    """Issue 33 probe: a PermissionError from bench's own check of data.root reached this fallback,
    which said `cannot write the run directory: <data.root>`."""

    def raising(filename):
        def hydra_main():
            raise PermissionError(13, "Permission denied", filename)

        return hydra_main

    run_dir = tmp_path / "outputs" / "2026-11-27" / "10-00-00"
    monkeypatch.setattr(sys, "argv", ["bench", f"hydra.run.dir={run_dir}"])
    for filename, words in (
        (str(tmp_path / "data"), f"[ERROR] cannot use {tmp_path / 'data'}: Permission denied"),
        (str(run_dir / ".hydra"), f"[ERROR] cannot write the run directory: {run_dir / '.hydra'}: Permission"),
        (str(tmp_path / "outputs"), f"[ERROR] cannot write the run directory: {tmp_path / 'outputs'}: Permission"),
    ):
        with pytest.raises(SystemExit) as ended:
            he.reporting_one_line(raising(filename))
        assert ended.value.code == 2
        assert capsys.readouterr().err.startswith(words)
