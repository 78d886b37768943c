"""docs/architecture.md's "Adding things" table, held row by row (issue 41 §4): each row's thing is
added to a copy of the repository exactly as its row says (no other file). The six rows' additions
share one copy (they touch different files and names; each test asserts its own): the docs' lists
are regenerated once there (`python tests/unit/test_doc_lists.py`, for the rows that say so; the
rows that say not are held by the regeneration changing no list but the other rows' names), then
one process importing the copy runs every row's tests that list registered names (the registry
tests, the bad-input rows, the docs' lists), unedited, and each row's test of its added thing; each
test here asserts that its own row's tests passed in that run's report. A row whose true cost
grows fails here, naming the row."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import traceback
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Dict, Tuple

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
COPIED = ("bench", "conf", "tests", "docs", "launchers", "README.md", "pyproject.toml")
REGISTRY = "tests/unit/test_registries.py::"
ROW = "tests/reliability/test_bad_inputs_config.py::test_bad_input_is_one_line_and_no_run"
DOC_LISTS = "tests/unit/test_doc_lists.py"
CHECKS = "tests/unit/test_the_added_things.py"  # each row's test of its added thing, named as the row's test
MARKED = re.compile(r"<!-- names: ([\w.]+) -->(.*?)<!-- /names -->")  # tests/unit/test_doc_lists.py's markers


def add_to_table(path: Path, table: str, line: str) -> None:
    """`line` as the last entry of the dict `table` ({ ... } closed by a `}` line) in `path`."""
    text = path.read_text()
    end = text.index("\n}\n", text.index(f"\n{table}: "))
    path.write_text(text[:end] + f"\n    {line}" + text[end:])


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} in {path}: the row's place moved; say where in the table and here"
    path.write_text(text.replace(old, new))


# ---- the rows' additions: each adds its files and returns (its tests, its check's lines) ---------------


def add_a_storage_format(repo: Path) -> Tuple[Tuple[str, ...], str]:
    (repo / "bench/iobench/formats/plain.py").write_text(
        "from bench.iobench.formats.raw import RawFormat\n\n\n"
        "class PlainFormat(RawFormat):\n"
        '    name, extension = "plain", "plain"\n'
    )
    add_to_table(repo / "bench/registries.py", "FORMATS", '"plain": "bench.iobench.formats.plain:PlainFormat",')
    tests = (
        REGISTRY + "test_an_unknown_name_is_refused_in_one_line_naming_the_registered_ones",
        REGISTRY + "test_a_sweep_is_refused_before_any_job_for_a_name_no_job_can_take",
        f"{ROW}[unknown record format in a sweep]",
        DOC_LISTS,
        "tests/unit/test_storage_formats.py::test_a_damaged_file_is_an_error_not_a_fast_read[plain]",
    )
    return tests, ""


def add_a_model(repo: Path) -> Tuple[Tuple[str, ...], str]:
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
    tests = (
        REGISTRY + "test_bench_s_own_models_are_one_list_each_with_its_yaml",
        f"{ROW}[unknown model option]",
        f"{ROW}[misspelt model option]",
        f"{ROW}[an unknown option in a sweep]",
        DOC_LISTS,
    )
    return tests, build


def add_a_storage_backend(repo: Path) -> Tuple[Tuple[str, ...], str]:
    (repo / "bench/storage/scratch.py").write_text(
        "from bench.storage.local import LocalBackend\n\n\nclass ScratchBackend(LocalBackend):\n    pass\n"
    )
    add_to_table(repo / "bench/registries.py", "BACKENDS", '"scratch": "bench.storage.scratch:ScratchBackend",')
    tests = (
        REGISTRY + "test_an_unknown_name_is_refused_in_one_line_naming_the_registered_ones",
        REGISTRY + "test_own_code_of_the_wrong_shape_or_not_on_the_path_is_refused_when_composed",
        DOC_LISTS,
    )
    return tests, "from bench.config import compose\nassert compose('storage=scratch').storage.name == 'scratch'\n"


def add_a_top_level_key(repo: Path) -> Tuple[Tuple[str, ...], str]:
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
    tests = (f"{ROW}[misspelt key]", f"{ROW}[unknown top-level key]", f"{ROW}[a bad value in a sweep]", DOC_LISTS)
    return tests, check


def add_a_scenario(repo: Path) -> Tuple[Tuple[str, ...], str]:
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
    tests = (
        "tests/unit/test_layout.py::test_the_scenarios_are_found_from_their_config_group",
        "tests/unit/test_layout.py::test_no_scenario_imports_another",
        f"{ROW}[unknown mode]",
        DOC_LISTS,
    )
    return tests, run


def add_a_launcher(repo: Path) -> Tuple[Tuple[str, ...], str]:
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
    tests = (
        "tests/unit/test_tracking.py::test_select_launcher_is_the_one_place_that_decides",
        "tests/unit/test_tracking.py::test_a_scenario_without_ranks_runs_in_process",
        DOC_LISTS,
    )
    return tests, run


# test here -> (the row's addition, whether its row regenerates the docs' lists, the list names it adds)
ROWS: Dict[str, Tuple[Callable[[Path], Tuple[Tuple[str, ...], str]], bool, Dict[str, str]]] = {
    "test_a_storage_format_is_a_module_and_a_registry_line": (
        add_a_storage_format, True, {"storage.workload.format": "plain"}
    ),
    "test_a_model_of_bench_s_own_is_a_builder_and_its_yaml": (add_a_model, True, {"model": "tiny_mlp"}),
    "test_a_storage_backend_is_a_module_and_a_registry_line": (
        add_a_storage_backend, True, {"storage.name": "scratch"}
    ),
    "test_a_top_level_key_is_a_field_of_its_group": (add_a_top_level_key, False, {}),
    "test_a_scenario_is_a_module_and_its_yaml": (add_a_scenario, True, {"scenario": "ping"}),
    "test_a_launcher_is_a_class_and_its_condition": (add_a_launcher, False, {}),
}  # fmt: skip


def outcomes(report: Path) -> Dict[str, Tuple[str, str]]:
    """pytest's junit XML report: `path.py::name[id]` -> (passed, failed, error or skipped; its message)."""
    found: Dict[str, Tuple[str, str]] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        nodeid = case.get("classname", "").replace(".", "/") + ".py::" + case.get("name", "")
        bad = [child for child in case if child.tag in ("failure", "error", "skipped")]
        found[nodeid] = (bad[0].tag, (bad[0].text or bad[0].get("message") or "")[-3000:]) if bad else ("passed", "")
    return found


@pytest.fixture(scope="module")
def added(tmp_path_factory):
    """One copy of the repository with every row's addition, its docs' lists regenerated once, and one
    pytest run (the copy alone on PYTHONPATH) of every row's tests and checks: its report's outcomes,
    each row's tests and the error its addition raised (none when it applied)."""
    repo = tmp_path_factory.mktemp("added")
    for name in COPIED:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, repo / name)  # with its bytecode: read only where its source is unchanged
        else:
            shutil.copy2(ROOT / name, repo / name)
    tests: Dict[str, Tuple[str, ...]] = {}
    problem: Dict[str, str] = {}
    checks = []
    for row, (add, _, _) in ROWS.items():
        try:
            tests[row], check = add(repo)
        except Exception:  # its test says so; the other rows still run
            tests[row], check, problem[row] = (), "", traceback.format_exc()
            continue
        if check:
            body = "".join(f"    {line}\n" for line in check.splitlines())
            checks.append(f"def {row}(tmp_path, monkeypatch):\n{body}")
            tests[row] += (f"{CHECKS}::{row}",)
    (repo / CHECKS).write_text("\n\n".join(checks))
    docs = {path.relative_to(repo): path.read_text() for path in [repo / "README.md", *(repo / "docs").glob("*.md")]}
    env = {k: v for k, v in os.environ.items() if k != "BENCH_TEST_FORK_LOG"}  # its tests: this test's children
    env["PYTHONPATH"] = str(repo)
    regenerated = subprocess.run(
        [sys.executable, DOC_LISTS], cwd=repo, env=env, capture_output=True, text=True, timeout=600
    )
    report = repo / "report.xml"
    wanted = list(dict.fromkeys(test for row_tests in tests.values() for test in row_tests))
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "-W", "ignore",
         f"--junitxml={report}", *wanted],
        cwd=repo, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    return SimpleNamespace(
        repo=repo,
        docs=docs,
        tests=tests,
        problem=problem,
        regenerated=regenerated,
        ran=ran,
        outcomes=outcomes(report) if report.is_file() else {},
    )


def passes(added, row: str) -> None:
    """`row`'s addition applied; where its row says so, the docs' lists regenerated (the documented
    command), else changed by nothing but the names the rows that regenerate add; then its tests (a
    test file or a parametrized test: each of its tests) and its check passed in the one pytest run."""
    assert row not in added.problem, f"{row}: its addition did not apply:\n{added.problem[row]}"
    if ROWS[row][1]:
        done = added.regenerated
        assert done.returncode == 0, f"{row}: {DOC_LISTS} (regenerate):\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    else:
        assert_only_the_regenerating_rows_changed_the_lists(added)
    for test in added.tests[row]:
        got = {nodeid: outcome for nodeid, outcome in added.outcomes.items() if ran_as(nodeid, test)}
        tail = f"\n{added.ran.stdout[-4000:]}\n{added.ran.stderr[-4000:]}"
        assert got, f"{row}: {test} did not run in the copy (exit {added.ran.returncode}){tail}"
        for nodeid, (outcome, message) in got.items():
            assert outcome == "passed", f"{row}: {nodeid} {outcome} in the copy:\n{message}"


def ran_as(nodeid: str, test: str) -> bool:
    """`nodeid` (one test the report holds) is `test`, one of its parameters, or a test of file `test`."""
    return nodeid == test or nodeid.startswith(f"{test}[") or nodeid.split("::")[0] == test


def assert_only_the_regenerating_rows_changed_the_lists(added) -> None:
    """A row that says no regeneration: the one regeneration (run for the other rows) changed each
    marked list only by the names those rows add, so this row's addition changed none."""
    names = {source: name for _, _, adds in ROWS.values() for source, name in adds.items()}

    def expected(marked: re.Match) -> str:
        listed = re.findall(r"`([^`]+)`", marked[2])
        if marked[1] in names:
            listed.append(names[marked[1]])
            if (ROOT / "conf" / marked[1]).is_dir():  # a config group's list is sorted, a table's in its order
                listed.sort()
        return f"<!-- names: {marked[1]} -->{', '.join(f'`{name}`' for name in listed)}<!-- /names -->"

    for path, before in added.docs.items():
        after = (added.repo / path).read_text()
        assert after == MARKED.sub(expected, before), f"{path}: regenerated lists changed beyond {names}"


def test_a_storage_format_is_a_module_and_a_registry_line(added):
    passes(added, "test_a_storage_format_is_a_module_and_a_registry_line")
    repo = added.repo
    assert "`plain`" in (repo / "docs/storage.md").read_text() and "`plain`" in (repo / "README.md").read_text()


def test_a_model_of_bench_s_own_is_a_builder_and_its_yaml(added):
    passes(added, "test_a_model_of_bench_s_own_is_a_builder_and_its_yaml")
    assert "`tiny_mlp`" in (added.repo / "README.md").read_text()


def test_a_storage_backend_is_a_module_and_a_registry_line(added):
    passes(added, "test_a_storage_backend_is_a_module_and_a_registry_line")
    assert "`scratch`" in (added.repo / "docs/configuration.md").read_text()


def test_a_top_level_key_is_a_field_of_its_group(added):
    passes(added, "test_a_top_level_key_is_a_field_of_its_group")


def test_a_scenario_is_a_module_and_its_yaml(added):
    """bench/echo.py and its YAML copied under another name: a scenario of its own."""
    passes(added, "test_a_scenario_is_a_module_and_its_yaml")
    assert "`ping`" in (added.repo / "README.md").read_text()


def test_a_launcher_is_a_class_and_its_condition(added):
    passes(added, "test_a_launcher_is_a_class_and_its_condition")


def test_each_tested_row_is_in_the_docs_table():
    """The rows above are docs/architecture.md's (a row added there gets its test here)."""
    table = (ROOT / "docs/architecture.md").read_text().split("## Adding things")[1].split("\n\n| to add")[1]
    rows = {line.split(" | ")[0].strip("| ") for line in table.split("\n\n")[0].splitlines()[2:]}
    tested = {"a model", "a storage benchmark record format", "a storage backend", "a top-level key", "a scenario"}
    assert tested | {"a launcher"} <= rows, rows  # each with its test above
