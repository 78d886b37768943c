"""The package keeps its shape: no import circle (function-level imports included), small
modules, typed config access instead of dict lookups, every package shipped in the wheel, the
config layer free of torch, and scenarios that share the model runtime (bench.runtime) instead
of importing each other."""

from __future__ import annotations

import ast
import functools
import re
import sys
from pathlib import Path
from typing import Dict, List, Set, Tuple

import pytest
import tomllib

BENCH = Path(__file__).resolve().parents[2] / "bench"
MAX_LINES = 300


# one parse of each source for the whole file (the rules below walk every module of bench several times);
# keyed on the text, so a source a test writes is parsed as it is
parse = functools.lru_cache(maxsize=None)(ast.parse)


def _modules() -> Dict[str, Path]:
    found = {}
    for path in sorted(BENCH.rglob("*.py")):
        parts = path.relative_to(BENCH.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


MODULES = _modules()


def _imports(path: Path, module: str) -> Set[str]:
    """bench modules this one imports, anywhere in the file (a function-level import is an edge too)."""
    tree = parse(path.read_text())
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    edges = set()
    for node in ast.walk(tree):
        names: List[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative import
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        for name in names:
            while name and name not in MODULES:
                name = name.rsplit(".", 1)[0] if "." in name else ""
            if name and name != module:
                edges.add(name)
    return edges


def _cycle(graph: Dict[str, Set[str]]) -> List[str]:
    """One import cycle, as a list of modules, or [] when the graph has none."""
    state: Dict[str, int] = {}
    stack: List[str] = []

    def visit(node: str) -> List[str]:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        state[node] = 2
        stack.pop()
        return []

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return []


def test_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_import_circle():
    graph = {}
    for name, path in MODULES.items():
        # a package's __init__ importing its own submodules is how packages work, not a circle
        graph[name] = {m for m in _imports(path, name) if not (path.name == "__init__.py" and m.startswith(name + "."))}
    assert _cycle(graph) == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_over_300_lines(module):
    """Counted in code lines (tests/code_lines.py: no blanks, comments or docstrings; issue 41 §5), so
    a module's explanations never force a split."""
    sys.path.insert(0, str(BENCH.parent / "tests"))
    from code_lines import code_lines

    assert code_lines(MODULES[module]) <= MAX_LINES


# bench's size as issue 35 counts it (tests/code_lines.py: code lines without blanks, comments and
# docstrings). A ceiling, not a goal: code that grows past it is a choice to make in review (raise it
# with the reason in the commit), not something that happens unsaid. Measured: 17,629 when set at
# 17,700; raised to 18,200 for issues 39-40 (+551: data checks, one writer per folder, whole stores,
# the kit's resolver, the doctor's set-up stop, ...; 18,180 measured) while issue 41's shrink is open;
# moved down to 17,980 after issue 41's first pass (records declare their presentation, one runner,
# 18 one-importer modules folded, and the merge fixes: 17,977 measured); raised to 17,995 for the
# stop-proof temporary folders a CI run found missing (bench.machine.children.stop_proof_folder: 17,992);
# moved down to 17,862 by issue 41 §6's pass (assignments folded into their `if`, unused loggers and
# repeated imports dropped: 17,862 measured), then 17,871 with the kit's temporary folders moved into
# --out (a SIGKILL left them in TMPDIR); moved down to 17,706 by a further folding pass (one-use locals
# and helpers inlined, calls that fit on one line, leftover second loggers: 17,706 measured), 17,713 with
# a sweep's runs grouped under its name in the MLflow view (issue 40 §6); 17,720 with the kit's one
# build per --out; moved down to 17,670 by a structural pass (one HTML table writer for the sweep and
# doctor pages, print_error returning the exit code so a refusal is `return print_error(...)`, three
# checks assigned in their `if`: 17,670 measured); moved down to 17,570 by a de-duplication pass (the tools'
# refusals through print_error, one all_gather, imports repeated in a module's functions made once at its
# top, gpu_check's names read from its checks, Checks.__post_init__ running each group's ranges then its
# rules, one walk for strict and as_plain, ab.one_epoch, StorageWorkloadConfig.read_steps: 17,570 measured);
# 17,596 with a stop signal held while a storage read takes its readers' records (STOPS_HELD); 17,598 with
# bench.app importing the launcher and environment (torch) after the config is checked again; 17,600
# with a second stop signal held while an interrupted run is marked KILLED.
# 2026-11-30: 17,601 -> 17,510: 13 small modules folded into the module of their idea (their imports made once);
# 17,520 with the GPU day's CUDA start and torch's rendezvous event names read without inspect.stack().
# 17,562: +42 for a new sqlite store copied from the empty one MLflow made first (bench.tracking.store);
# 17,574: +12 so a Ctrl-C landing as MLflow makes a run still ends it KILLED (bench.tracking.tracker).
# 17,590: +16 so four A/B tools refuse --rounds=0 (and their other counts) in one line, not a traceback
# (bench.tools.ab.below_one, which storage_ceiling's and train_costs' checks now use too).
# 17,552: -38 by a simplification pass (contextlib.suppress for try/except-return, one-caller helpers
# inlined, one bench.config.fields.changed_keys for the storage and inference default checks).
# 17,558: +6 so a stop signal landing as bench forks (a storage reader, a run_child) is held past os.fork's
# at-fork hooks, which it cut short (logging's lock left held: a CI run hung; children.stops_held_over_fork).
# 17,560: +2 so the doctor's set-up stop, landing inside logging's lock, does not leave it held (stopped_after).
# 17,085: -475 by a pass per package (2026-11-30, 12th session): measured.py, fetch.py, ceiling_readers.py folded
# into their one importer; one NVML opener; Tracker's four writers through one batch call; cifar100 and
# imagefolder builders from one map_style_builders; MlperfLog's generic start/end/event; check_model_run
# shared by training and inference; contextlib.suppress and comprehensions where an except or loop only filtered.
# 17,087: +2 so TrainStep's arguments are named again at its one call (review of that pass).
# 16,716: a second, structural pass per package (config's small groups into schema.py, storage_benchmark
# into storage.py; qualify into figures; loader_benchmark into tools/data.py; worker into launchers;
# cpu_facts into fitness; synthetic into device_batches; Backend a base class; final_keys shared by the
# checkpoint need and room; the tools' helps and overrides as named parts).
# 16,636: a third pass per package (-90: storage/registry into storage/base, s3/settings into s3's package,
# runtime/rules into model_names, fit_watch split between runtime/scenario and reporting; one-caller helpers
# folded), +10 so the doctor's set-up stop waits out an import in progress (stopped_after).
# 16,632: +6 so a rank's loader workers end with it (a pidfd watch, fork named), -10 (make_loader reads s3:// from
# its config, a cell's absent() in one line, mode_name by the names a missing mode reads as).
# 16,633: +1 so a worker on a kernel without pidfd (Linux before 5.3) is left to torch's watchdog, not ended.
# 16,530: a fourth pass over every package (2026-12-01, 17th session, -103: dead parameters and one-caller
# forwarders, pathlib's own checks in storage.local, MeasuredWindow holding its counts, loader_workers
# calling resolve_workers, BenchError's one __init__, package metadata read by the e-mail parser
# importlib.metadata uses); five reviewers, one per package group, found 4 to 40 honest lines each.
# 16,541: +11 so a prepare pool's worker blocked in native code with a Python SIGTERM handler (coverage's) is
# killed after the grace, not waited for ever (bench.data.prepare._pool).
# 16,549: +8 so a loader worker's resource-sharer thread does not print a traceback when a stopped rank broke
# a batch's descriptor fetch mid-handshake (bench.data.loader._quiet_when_the_fetch_broke).
# 16,569: +20 so `python -m bench` composes its config once, not twice, where only -m can set hydra.mode
# (bench.config.argv.compose_once: Hydra's get_mode compose was ~16% of a small run's CPU).
# 16,572: +3 so a Slurm job cancelled as its rank failed first says CANCELLED (bench.tracking.sweep.job_lost).
# 16,587: +15 so a Ctrl-C Python flagged without interrupting the probe's recv ends the tracking probe at once,
# not at its timeout (bench.tracking.store.probe waits in slices; the 602 s stall of the probe's Ctrl-C test).
# 16,592: +5 so the forkserver's socket folder a SIGKILLed launcher or rank left is removed by the next
# run (bench.machine.children.make_multiprocessing_temp_dir: owned `bench-mp-*`, not multiprocessing's pymp-*).
# 16,596: +4 so a rank torchrun started ends (SIGTERM, its run KILLED) when torchrun is SIGKILLed.
# 16,605: +9 for bench.tools.torchrun: a stopped torchrun (the multi-node scripts') is one line and 130/143.
# 16,608: +3 so an A/B ratio under 0.01 prints its digits (0.0042), not 0.00 (bench.tools.ab.said).
# 16,614: +6 so torchrun's failed rendezvous is one line, and Ctrl-C while it connects ends it at once.
# 16,625: +11 so a Ctrl-C or SIGTERM landing inside an MLflow sqlite write still ends the run KILLED and frees
# the store for the process's next run (bench.tracking.store.free_interrupted_write).
# 16,653: +28 so a composition is made once for the same overrides over unchanged config files (bench.config
# .composed; not with a folder added to Hydra's search path): `compare --rerun` composed each side again
# every round (65 composes of 3 configs in its tests).
# 16,659: +6 so a Slurm job cancelled (or timed out, or its node lost) is counted failed when its state says
# so, not 15 s later (submitit's wait for a result file such a job never writes; bench.slurm).
# 16,666: +7 so the offline kit builds bench's wheel with this Python's setuptools only where it meets
# pyproject's setuptools>=77 (bench's license an SPDX expression; bench.tools.kit.setuptools_builds).
# 16,708: +42 so a command's process ends without the interpreter's teardown of every module
# (bench.machine.children.exit_without_teardown, called by each `python -m bench...` entry point: ~0.2
# CPU-s of a fresh bench process, ~0.3 of one the tests' fork server forked, ~60 CPU-s of a suite run).
# 16,722: +14 so a figure judged against a gate is printed on its side of it, not rounded onto it
# (bench.maths.stats.on_its_side: the storage headline's AU, 89.96% was "90.0%" beside FAIL at 90%;
# the --min-ratio refusal and the storage ceiling's floors; gpu_check's overhead and CUDA-events lines; the
# MLPerf runs' spread, 5.04% was "5.0%" beside "within 5%"; the busy machine's reason, whose limit of
# 12.8 cores printed as "13": bench.machine.fitness.outside_cpu_reason; the load-average note; a GPU
# power limit of 699.6 W printed "700 W < default 700 W").
# 16,725: +3 so a CPU or SM clock noted for being under 80% of its max prints its share under 80%, with the
# threshold (bench.machine.fitness.share_under: 79.96% was "(80%)").
CODE_LINE_CEILING = 16_725


def test_bench_stays_under_its_code_line_ceiling(capsys):
    import sys

    sys.path.insert(0, str(BENCH.parent / "tests"))
    from code_lines import count

    per = count(BENCH)
    total = sum(per.values())
    with capsys.disabled():  # the figure, printed by the suite (pytest -s not needed)
        print(f"\nbench: {total} code lines in {len(MODULES)} modules (ceiling {CODE_LINE_CEILING})")
    assert total <= CODE_LINE_CEILING, {package: lines for package, lines in per.most_common()}


def test_config_is_read_through_typed_objects_not_dict_lookups():
    """`cfg["data"]["batch_size"]` turns a key typo into a KeyError at run time; the schema's
    attributes are checked when the config loads."""
    lookup = re.compile(r"\b(cfg|config|storage|workload|data|dist)\[[\"']\w+[\"']\]")
    offenders = [
        f"{path.relative_to(BENCH.parent)}:{number}: {line.strip()}"
        for path in MODULES.values()
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if lookup.search(line)
    ]
    assert offenders == []


def test_every_package_ships_in_the_wheel():
    """Every folder of modules, with an __init__.py or without one (bench/train is a namespace package)."""
    listed = set(tomllib.loads((BENCH.parent / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    packages = {".".join(path.parent.relative_to(BENCH.parent).parts) for path in MODULES.values()}
    assert packages <= listed, f"add to pyproject's [tool.setuptools] packages: {sorted(packages - listed)}"


def _scenario_packages() -> Tuple[str, ...]:
    """The package (or top-level module) of each class a conf/scenario/*.yaml names (`_target_`): bench.train,
    bench.iobench, ... A new scenario is found here, never listed."""
    options = sorted((BENCH.parent / "conf" / "scenario").glob("*.yaml"))
    targets = [re.search(r"_target_: *(\S+)", path.read_text()) for path in options]
    return tuple(sorted({".".join(t.group(1).split(".")[:2]) for t in targets if t}))


SCENARIO_PACKAGES = _scenario_packages()


def _scenario_of(module: str) -> str:
    return next((p for p in SCENARIO_PACKAGES if module == p or module.startswith(p + ".")), "")


def _arrows_between_scenarios(graph: Dict[str, Set[str]]) -> Set[Tuple[str, str]]:
    """(importer, imported) where both are in scenario packages, and not in the same one."""
    return {
        (name, target)
        for name, targets in graph.items()
        for target in targets
        if _scenario_of(name) and _scenario_of(target) and _scenario_of(name) != _scenario_of(target)
    }


@functools.cache
def import_graph() -> Dict[str, Set[str]]:
    """bench's module -> the bench modules it imports; made when a test asks (not at collection, in every worker)."""
    return {name: _imports(path, name) for name, path in MODULES.items()}


def test_the_arrow_finder_finds_an_arrow_between_scenarios():
    graph = {
        "bench.infer.loop": {"bench.train.models", "bench.runtime.models", "bench.infer.result"},
        "bench.train.loop": {"bench.runtime.timing", "bench.train.step"},
        "bench.iobench.x": {"bench.infer"},
    }
    assert _arrows_between_scenarios(graph) == {
        ("bench.infer.loop", "bench.train.models"),
        ("bench.iobench.x", "bench.infer"),
    }


def test_the_scenarios_are_found_from_their_config_group():
    assert {"bench.train", "bench.infer", "bench.iobench"} <= set(SCENARIO_PACKAGES)


def test_no_scenario_imports_another():
    """Training and inference run a model through one runtime (bench.runtime: models, precision,
    device, timing, FLOPs and peaks, profiling, the epochs' batches); neither imports the other,
    and neither imports the storage benchmark nor it them (function-level imports included)."""
    assert _arrows_between_scenarios(import_graph()) == set()


def test_the_runtime_imports_no_scenario_and_nothing_above_it():
    """bench.runtime sits under the scenarios: it imports none of them, nor what starts them."""
    above = ("bench.app", "bench.scenarios", "bench.tools", "bench.__main__")
    for name in (n for n in MODULES if n.startswith("bench.runtime")):
        wrong = {m for m in import_graph()[name] if _scenario_of(m) or m.startswith(above)}
        assert not wrong, f"{name} imports {sorted(wrong)}"


def test_the_config_layer_never_imports_torch_or_mlflow():
    for name, path in MODULES.items():
        # and what checks a config when it loads (bench.api.compose_config: torch-free)
        checks = ("bench.runtime.model_names", "bench.train.scenario", "bench.infer.scenario")
        if name.startswith("bench.config") or name in ("bench", "bench.errors", "bench.__main__", "bench.api", *checks):
            heavy = {m for m in _imports_any(path) if m.split(".")[0] in ("torch", "torchvision", "mlflow")}
            assert not heavy, f"{name} imports {heavy}"


def _imports_any(path: Path) -> Set[str]:
    names: Set[str] = set()
    for node in ast.walk(parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def test_test_files_have_names_of_their_own():
    """tests/ has no __init__.py: pytest imports each test file by its base name, so two files of
    one name in two folders fail to collect (import file mismatch)."""
    names = [path.name for path in (BENCH.parent / "tests").rglob("test_*.py")]
    assert sorted({name for name in names if names.count(name) > 1}) == []


# ---- results are read through their typed records -----------------------------------------------

# Modules whose job is to (de)serialise result dicts or to name their keys for display: the records'
# home (bench.results), the per-scenario sweep views (column specs), dicts that merely share a
# figure's name (the training loop's window dicts, DataLoader options, bench.data.prepare's own
# statistics), and gpu_check, which reads other processes' final lines as JSON, as a user's script
# does (compare --rerun names no key: it looks up the figure the run's scenario names).
RESULT_SERIALISERS = {
    "bench/results.py",
    "bench/runtime/sweep_view.py",
    "bench/train/report.py",  # its view and the accuracy curve it reads back
    "bench/data/loader.py",
    "bench/data/prepare.py",
    "bench/tools/gpu_checks/checks.py",
    "bench/tools/gpu_check.py",  # how a check runs: the runs' figures as gpu_check judges them
}
# One name in one module, where the lookup is not on a result: the evaluation pass's own dict (its
# "eval_seconds" is also a storage figure's name), a column of the sweep table (a pandas frame).
SHARED_NAMES = {("bench/train/epochs.py", "eval_seconds"), ("bench/iobench/report.py", "au_threshold_percent")}


def _record_keys() -> Set[str]:
    """The radix_metrics keys, as the typed records (subclasses of bench.results.Record) declare them;
    compound names only ("images_per_second", not "model": a one-word key is also a config group's)."""
    keys: Set[str] = set()
    for path in MODULES.values():
        for node in ast.walk(parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(getattr(base, "id", None) == "Record" for base in node.bases):
                keys |= {
                    s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
                }
    return {key for key in keys if "_" in key}


def _string_keyed_result_lookups(source: str, keys: Set[str], allowed: Set[str] = frozenset()) -> List[int]:
    """Lines of `x["images_per_second"]`, `x.get("images_per_second")`, `x.pop("images_per_second")` and
    `record.figure("images_per_second")` for a result key (but `allowed`)."""
    found = []
    for node in ast.walk(parse(source)):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value in keys:
            found.append((node.lineno, node.slice.value))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("get", "pop", "figure")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value in keys
        ):
            found.append((node.lineno, node.args[0].value))
    return [line for line, key in found if key not in allowed]


def test_the_result_lookup_rule_sees_string_keys():
    keys = _record_keys()
    assert {"images_per_second", "latency_ms_p50", "step_time_ms_p99", "data_wait_fraction"} <= keys and len(keys) > 50
    # the storage benchmark's record (bench.iobench.result), inline parts included
    assert {
        "mlperf_samples_per_second",
        "checkpoint_store_write_gbps",
        "prepare_seconds",
        "potential_caching",
        "mlperf_qualifies",
    } <= keys
    assert _string_keyed_result_lookups(
        'm["images_per_second"]\nm.get("latency_ms_p50", 0)\nm.images_per_second\n'
        'm.pop("images_per_second", 0)\nr.figure("step_time_ms_p99")\n',
        keys,
    ) == [1, 2, 4, 5]


def test_results_are_read_through_typed_records_not_string_keys():
    """`metrics["images_per_second"]` turns a renamed figure into a KeyError (or a silent None) at
    run time; a record's attribute is checked by the type checker. Outside the serialisers, results
    are read as `record.images_per_second` (bench.train.result.TrainMetrics, ...)."""
    keys = _record_keys()
    offenders = [
        f"{path.relative_to(BENCH.parent)}:{line}"
        for path in MODULES.values()
        if str(path.relative_to(BENCH.parent)) not in RESULT_SERIALISERS
        for line in _string_keyed_result_lookups(
            path.read_text(),
            keys,
            {key for module, key in SHARED_NAMES if module == str(path.relative_to(BENCH.parent))},
        )
    ]
    assert offenders == []


def _declared_twice(sources: Dict[str, str], shared: Set[str]) -> Dict[str, List[str]]:
    """Fields declared in more than one class: a fit_* field in any class, a shared group's field in
    any two records (subclasses of Record); {name: ["path:Class", ...]}."""
    where: Dict[str, List[str]] = {}
    for path, source in sources.items():
        for node in ast.walk(parse(source)):
            if not isinstance(node, ast.ClassDef):
                continue
            record = any(getattr(base, "id", None) == "Record" for base in node.bases)
            for statement in node.body:
                if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                    name = statement.target.id
                    if name.startswith("fit_") or (record and name in shared):
                        where.setdefault(name, []).append(f"{path}:{node.name}")
    return {name: places for name, places in where.items() if len(places) > 1}


def test_a_figure_group_the_records_share_is_declared_once():
    """FitFigures, RepeatFigures (bench.results) and Execution (bench.runtime.reporting) are nested in
    every record that reports them (INLINE: the key order stays); a second declaration of one of
    their fields (a fit_* field anywhere in bench) is a copy that would drift from the first."""
    from dataclasses import fields

    from bench.results import FitFigures, RepeatFigures
    from bench.runtime.reporting import Execution

    shared = {f.name for group in (FitFigures, RepeatFigures, Execution) for f in fields(group)}
    copy = "class Copy(Record):\n    fit_to_measure: bool\n    stable: bool\nclass Other:\n    fit_notes: str\n"
    assert _declared_twice({"a.py": copy, "bench/results.py": (BENCH / "results.py").read_text()}, shared) == {
        "fit_to_measure": ["a.py:Copy", "bench/results.py:FitFigures"],
        "stable": ["a.py:Copy", "bench/results.py:RepeatFigures"],
        "fit_notes": ["a.py:Other", "bench/results.py:FitFigures"],
    }
    sources = {str(path.relative_to(BENCH.parent)): path.read_text() for path in MODULES.values()}
    assert _declared_twice(sources, shared) == {}


DOCUMENTED = {
    "bench.report": "bench.tools.report",
    "bench.compare": "bench.tools.compare",
    "bench.data": "bench.tools.data",
    "bench.radix": "bench.tools.radix",
    "bench.overhead": "bench.tools.overhead",
    "bench.sweep_overhead": "bench.tools.sweep_overhead",
    "bench.iobench.compare": "bench.tools.iobench_compare",
}


def test_every_command_is_taught_under_one_name():
    """Issue 19: the short names (bench.report, ...) and bench.tools.<module> ran the same code and the
    docs used both. Each command has one documented name (docs/architecture.md, "Commands")."""
    import re

    texts = [BENCH.parent / "README.md", *sorted((BENCH.parent / "docs").glob("*.md"))]
    named = {m for path in texts for m in re.findall(r"python -m (bench(?:\.\w+)+)", path.read_text())}
    assert not named & set(DOCUMENTED.values()), "teach the short name: " + str(
        sorted(named & set(DOCUMENTED.values()))
    )
    table = (BENCH.parent / "docs" / "architecture.md").read_text().split("## Commands: one name each")[1]
    listed = set(re.findall(r"^\| `python -m (bench(?:\.\w+)+)`", table, re.M))
    assert named - {"bench"} <= listed | {"bench.tools.gpu_check", "bench.doctor"}, sorted(named - listed)
    for short, code in DOCUMENTED.items():  # each short name is a two-line module running that code
        module = BENCH.parent / (short.replace(".", "/") + (".py" if short != "bench.data" else "/__main__.py"))
        assert f"from {code} import main" in module.read_text(), module


def test_the_readme_and_pyproject_give_the_same_suite_time():
    """Issue 19: pyproject's comment on the test command and the README said different times. Both
    name the measured range (minutes:seconds), and it is the same range."""
    import re

    readme = (BENCH.parent / "README.md").read_text().split("Run the tests", 1)[1].split("python -m pytest", 1)[0]
    pyproject = (BENCH.parent / "pyproject.toml").read_text().split("[tool.pytest.ini_options]", 1)[1]
    pyproject = pyproject.split("addopts", 1)[0]

    def minutes_seconds(time: str):  # "9:30" before "10:05": as times, not as strings
        return tuple(map(int, time.split(":")))

    times = [sorted(re.findall(r"\b(\d{1,2}:\d\d)\b", text), key=minutes_seconds) for text in (readme, pyproject)]
    assert times[0] and (times[0][0], times[0][-1]) == (times[1][0], times[1][-1]), times


def test_the_readme_fits_250_lines_and_says_where_the_hosts_meet():
    """Issue 40 §9: the README grew to 256 lines, and its 4-host line did not say where the hosts meet.
    It stays within 250 lines (the detail lives in docs/), and that line names MASTER_ADDR and
    distributed.rdzv_endpoint."""
    readme = (BENCH.parent / "README.md").read_text().splitlines()
    assert len(readme) <= 250, len(readme)
    at = next(i for i, line in enumerate(readme) if "storage_hosts4" in line)
    said = " ".join(readme[at : at + 3])
    assert "MASTER_ADDR" in said and "distributed.rdzv_endpoint" in said, said


# The maths every model scenario's report uses (step-time percentiles, the repeats' interval) lives below
# bench.analysis, in bench.maths; nothing under bench/analysis is exempt.
ANALYSIS_MATHS: Set[str] = set()


def test_the_analysis_names_no_scenarios_figure():
    """issue 29: bench.compare read any run with a timeline and a batch size as training (a storage run
    came out 43x off, labelled images/s). What a sweep and a compare show of a run, in which unit,
    and what is read back is its scenario's report class's `view` (bench.scenarios.View): no module of
    bench/analysis names a figure of a scenario's typed record."""
    keys = _record_keys()
    named = [
        f"{path.relative_to(BENCH.parent)}:{node.lineno} {node.value}"
        for path in sorted((BENCH / "analysis").glob("*.py"))
        if str(path.relative_to(BENCH.parent)) not in ANALYSIS_MATHS
        for node in ast.walk(parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in keys
    ]
    assert named == []


# ---- packages that layer (issue 29) --------------------------------------------------------------

# A command's entry module (`python -m bench.data`, the short names kept by two-line modules) is
# imported by no one: it is a node of its own, on top, not part of the package it sits in.
ENTRY_POINTS = {f"{short}.__main__" if f"{short}.__main__" in MODULES else short for short in DOCUMENTED}


def _package_of(module: str) -> str:
    """The package-graph node of a module: bench/<sub>/ as one node, each top-level module of bench/
    (bench.app, bench.results, ...) as its own, entry modules as their own."""
    if module in ENTRY_POINTS or module.count(".") < 1:
        return module
    return ".".join(module.split(".")[:2])


def _package_graph(graph: Dict[str, Set[str]]) -> Dict[str, Set[str]]:
    packages: Dict[str, Set[str]] = {}
    for name, targets in graph.items():
        source = _package_of(name)
        packages.setdefault(source, set()).update(_package_of(t) for t in targets if _package_of(t) != source)
    return packages


@functools.cache
def package_graph() -> Dict[str, Set[str]]:
    return _package_graph(import_graph())


def test_the_package_graph_groups_modules_by_package():
    graph = {
        "bench.runtime.device": {"bench.rank_context", "bench.runtime.precision"},
        "bench.data.__main__": {"bench.tools.data"},
        "bench.tools.data": {"bench.data.prepare"},
    }
    assert _package_graph(graph) == {
        "bench.runtime": {"bench.rank_context"},
        "bench.data.__main__": {"bench.tools"},
        "bench.tools": {"bench.data"},
    }
    assert _cycle(_package_graph({"bench.a.x": {"bench.b.y"}, "bench.b.z": {"bench.a.w"}})) == [
        "bench.a",
        "bench.b",
        "bench.a",
    ]


def test_no_import_circle_between_packages():
    """Issue 29: the module graph had no circle, but 11 packages were one strongly connected
    component (runtime -> launch.context -> launch.worker -> runtime, ...). No package imports one
    that imports it back, function-level imports included."""
    assert _cycle(package_graph()) == []


def _documented_layers() -> List[Set[str]]:
    """docs/architecture.md's "## Layers" list, bottom first: one line per layer, `- `bench.x`, ...`; the
    layer that says "the scenarios" (before its colon) holds every scenario's package (SCENARIO_PACKAGES)."""
    section = (BENCH.parent / "docs" / "architecture.md").read_text().split("## Layers", 1)[1].split("\n## ", 1)[0]
    return [
        set(re.findall(r"`(bench(?:\.\w+)*)`", line.split(":", 1)[0]))
        | (set(SCENARIO_PACKAGES) if "the scenarios" in line.split(":", 1)[0] else set())
        for line in section.splitlines()
        if re.match(r"\d+\. ", line)
    ]


def test_the_documented_layers_match_the_tree():
    """Every package (and top-level module) of bench/ is in exactly one documented layer, and each one
    imports only from layers below its own: a new package, a removed one or an arrow upwards or
    sideways fails here until docs/architecture.md says where it sits."""
    layers = _documented_layers()
    listed = [name for layer in layers for name in layer]
    assert len(listed) == len(set(listed)), "listed twice: " + str(sorted({n for n in listed if listed.count(n) > 1}))
    packages = set(package_graph())
    assert set(listed) == packages, (
        f"not documented: {sorted(packages - set(listed))}, gone: {sorted(set(listed) - packages)}"
    )
    level = {name: number for number, layer in enumerate(layers) for name in layer}
    upward = sorted(
        f"{source} -> {target}"
        for source, targets in package_graph().items()
        for target in targets
        if level[target] >= level[source]
    )
    assert upward == []
