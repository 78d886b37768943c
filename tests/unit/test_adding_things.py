"""docs/architecture.md's "Adding things" table, held row by row (issue 41 §4): each test adds the
thing to a copy of the repository exactly as its row says (no other file), runs
`python tests/unit/test_doc_lists.py` there when the row says so, and then the tests that list
registered names (the registry tests, the bad-input rows, the docs' lists), unedited, in a
process importing the copy: they pass. A row whose true cost grows fails here."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
COPIED = ("bench", "conf", "tests", "docs", "launchers", "README.md", "pyproject.toml")
REGISTRY = "tests/unit/test_registries.py::"
ROW = "tests/reliability/test_bad_inputs_config.py::test_bad_input_is_one_line_and_no_run"
DOC_LISTS = "tests/unit/test_doc_lists.py"


@pytest.fixture
def repo(tmp_path):
    for name in COPIED:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(ROOT / name, tmp_path / name)
    return tmp_path


def add_to_table(path: Path, table: str, line: str) -> None:
    """`line` as the last entry of the dict `table` ({ ... } closed by a `}` line) in `path`."""
    text = path.read_text()
    end = text.index("\n}\n", text.index(f"\n{table}: "))
    path.write_text(text[:end] + f"\n    {line}" + text[end:])


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} in {path}: the row's place moved; say where in the table and here"
    path.write_text(text.replace(old, new))


def passes(repo: Path, *tests: str, check: str = "", regenerate: bool = True) -> None:
    """In `repo` (on PYTHONPATH, alone): the docs' lists regenerated (the documented command), then
    `tests` and the lines of `check` (a test of the added thing, in the same pytest process) pass."""
    env = {**os.environ, "PYTHONPATH": str(repo)}
    if check:
        body = "".join(f"    {line}\n" for line in check.splitlines())
        (repo / "tests/unit/test_the_added_thing.py").write_text(
            f"def test_the_added_thing(tmp_path, monkeypatch):\n{body}"
        )
        tests += ("tests/unit/test_the_added_thing.py",)
    commands = [[sys.executable, DOC_LISTS]] if regenerate else []
    commands += [[sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "-W", "ignore", *tests]]
    for command in commands:
        done = subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{command[1:3]}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"


def test_a_storage_format_is_a_module_and_a_registry_line(repo):
    (repo / "bench/iobench/formats/plain.py").write_text(
        "from bench.iobench.formats.raw import RawFormat\n\n\n"
        "class PlainFormat(RawFormat):\n"
        '    name, extension = "plain", "plain"\n'
    )
    add_to_table(repo / "bench/registries.py", "FORMATS", '"plain": "bench.iobench.formats.plain:PlainFormat",')
    passes(
        repo,
        REGISTRY + "test_an_unknown_name_is_refused_in_one_line_naming_the_registered_ones",
        REGISTRY + "test_a_sweep_is_refused_before_any_job_for_a_name_no_job_can_take",
        f"{ROW}[unknown record format in a sweep]",
        DOC_LISTS,
        "tests/unit/test_storage_formats.py::test_a_damaged_file_is_an_error_not_a_fast_read[plain]",
    )
    assert "`plain`" in (repo / "docs/storage.md").read_text() and "`plain`" in (repo / "README.md").read_text()


def test_a_model_of_bench_s_own_is_a_builder_and_its_yaml(repo):
    with (repo / "bench/runtime/models.py").open("a") as models:
        models.write(
            "\n\n@own\ndef tiny_mlp(cfg: ModelConfig) -> nn.Module:\n"
            "    return nn.Sequential(nn.Flatten(), nn.LazyLinear(cfg.num_classes))\n"
        )
    (repo / "conf/model/tiny_mlp.yaml").write_text("arch: tiny_mlp\n")
    build = (
        "import torch\nfrom bench.config import compose\nfrom bench.runtime.models import build_model, check_model\n"
        "model = compose('model=tiny_mlp', 'data.image_size=8', 'data.num_classes=3').model\n"
        "check_model(model)\nassert build_model(model)(torch.zeros(2, 3, 8, 8)).shape == (2, 3)\n"
    )
    passes(
        repo,
        REGISTRY + "test_bench_s_own_models_are_one_list_each_with_its_yaml",
        f"{ROW}[unknown model option]",
        f"{ROW}[misspelt model option]",
        f"{ROW}[an unknown option in a sweep]",
        DOC_LISTS,
        check=build,
    )
    assert "`tiny_mlp`" in (repo / "README.md").read_text()


def test_a_storage_backend_is_a_module_and_a_registry_line(repo):
    (repo / "bench/storage/scratch.py").write_text(
        "from bench.storage.local import LocalBackend\n\n\nclass ScratchBackend(LocalBackend):\n    pass\n"
    )
    add_to_table(repo / "bench/registries.py", "BACKENDS", '"scratch": "bench.storage.scratch:ScratchBackend",')
    passes(
        repo,
        REGISTRY + "test_an_unknown_name_is_refused_in_one_line_naming_the_registered_ones",
        REGISTRY + "test_own_code_of_the_wrong_shape_or_not_on_the_path_is_refused_when_composed",
        DOC_LISTS,
        check="from bench.config import compose\nassert compose('storage=scratch').storage.name == 'scratch'\n",
    )
    assert "`scratch`" in (repo / "docs/configuration.md").read_text()


def test_a_top_level_key_is_a_field_of_its_group(repo):
    edit(
        repo / "bench/config/run.py",
        "    epochs: int = positive(1)\n",
        "    epochs: int = positive(1)\n    probe: int = positive(3)\n",
    )
    check = (
        "import pytest\nfrom bench.config import compose\nfrom bench.errors import ConfigError\n"
        "assert compose().train.probe == 3 and compose('train.probe=4').train.probe == 4\n"
        "with pytest.raises(ConfigError, match='train.probe=0 is not valid'):\n    compose('train.probe=0')\n"
    )
    passes(
        repo,
        f"{ROW}[misspelt key]",
        f"{ROW}[unknown top-level key]",
        f"{ROW}[a bad value in a sweep]",
        DOC_LISTS,
        check=check,
        regenerate=False,
    )


def test_a_scenario_is_a_module_and_its_yaml(repo):
    """bench/echo.py and its YAML copied under another name: a scenario of its own."""
    echo = (repo / "bench/echo.py").read_text()
    (repo / "bench/ping.py").write_text(echo.replace("Echo", "Ping").replace("echo", "ping"))
    echo_yaml = (repo / "conf/scenario/echo.yaml").read_text()
    (repo / "conf/scenario/ping.yaml").write_text(echo_yaml.replace("Echo", "Ping").replace("echo", "ping"))
    run = (
        "from bench.config import compose\n"
        "from bench.rank_context import RankContext\n"
        "config = compose('scenario=ping', 'scenario.steps=2', 'scenario.step_s=0')\n"
        "record = config.scenario.run_rank(config, RankContext(), tmp_path)\n"
        "assert type(record).__name__ == 'PingMetrics' and record.mode == 'ping' and record.steps == 2\n"
    )
    passes(
        repo,
        "tests/unit/test_layout.py::test_the_scenarios_are_found_from_their_config_group",
        "tests/unit/test_layout.py::test_no_scenario_imports_another",
        f"{ROW}[unknown mode]",
        DOC_LISTS,
        check=run,
    )
    assert "`ping`" in (repo / "README.md").read_text()


def test_a_launcher_is_a_class_and_its_condition(repo):
    edit(
        repo / "bench/launch/launchers.py",
        "def select_launcher(config: BenchConfig, has_ranks: bool, in_sweep: bool) -> Launcher:\n",
        "class Serial(Launcher):\n"
        "    def run(self, scenario: Any, config: BenchConfig, out_dir: Path) -> Optional[Any]:\n"
        "        return scenario.run_rank(config, RankContext(), out_dir)\n\n\n"
        "def select_launcher(config: BenchConfig, has_ranks: bool, in_sweep: bool) -> Launcher:\n"
        "    if os.environ.get('BENCH_SERIAL'):\n        return Serial()\n",
    )
    run = (
        "from bench.config import compose\n"
        "from bench.launch.launchers import select_launcher\nmonkeypatch.setenv('BENCH_SERIAL', '1')\n"
        "config = compose('scenario=echo', 'scenario.steps=2', 'scenario.step_s=0')\n"
        "launcher = select_launcher(config, has_ranks=True, in_sweep=False)\n"
        "assert type(launcher).__name__ == 'Serial'\n"
        "assert launcher.run(config.scenario, config, tmp_path).steps == 2\n"
    )
    passes(
        repo,
        "tests/unit/test_tracking.py::test_select_launcher_is_the_one_place_that_decides",
        "tests/unit/test_tracking.py::test_a_scenario_without_ranks_runs_in_process",
        DOC_LISTS,
        check=run,
        regenerate=False,
    )


def test_each_tested_row_is_in_the_docs_table():
    """The rows above are docs/architecture.md's (a row added there gets its test here)."""
    table = (ROOT / "docs/architecture.md").read_text().split("## Adding things")[1].split("\n\n| to add")[1]
    rows = {line.split(" | ")[0].strip("| ") for line in table.split("\n\n")[0].splitlines()[2:]}
    tested = {"a model", "a storage benchmark record format", "a storage backend", "a top-level key", "a scenario"}
    assert tested | {"a launcher"} <= rows, rows  # each with its test above
