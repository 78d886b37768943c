"""Each rule written once (issue 41 §3): a file written whole, the strong/weak batch split, a
module's constants, the doctor's markdown table. Static reads of bench/, plus the one split's
behaviour; the paths that use them run in their own tests (storage, profiling, doctor, DDP)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from bench.config import compose

BENCH = Path(__file__).resolve().parents[2] / "bench"
OWN = [path for path in BENCH.rglob("*.py") if "tools" not in path.relative_to(BENCH).parts]


def _where(pattern: str) -> set:
    found = re.compile(pattern)
    return {path.relative_to(BENCH).as_posix() for path in OWN if found.search(path.read_text())}


def test_a_file_is_replaced_whole_in_one_function():
    """bench.machine.writable.write_whole is the one temp-and-rename of a file (the profiler's trace
    and the stores' objects go through it). results.py's write_text still has its own until it is
    switched over; the two data folders move whole directories, another rule."""
    assert _where(r"os\.replace\(") - {"results.py", "data/layout.py"} == {"machine/writable.py"}


def test_the_strong_weak_batch_split_is_computed_in_one_function():
    assert _where(r"batch\w*\s*//\s*\(?\s*(world|self\.world|config\.distributed)") == {"config/schema.py"}
    weak = compose("distributed=ddp", "distributed.nproc_per_node=4", "data.batch_size=8").distributed
    strong = compose(
        "distributed=ddp", "distributed.nproc_per_node=4", "distributed.scaling=strong", "data.batch_size=8"
    ).distributed
    assert (weak.per_process(8), strong.per_process(8), strong.per_process(12, world=3)) == (8, 2, 4)


def test_no_module_assigns_a_constant_twice():
    """A module-level UPPER_CASE name is assigned once (launch/worker.py had RANK_LOG_FORMAT and
    NOISY_LOGGERS twice)."""
    twice = []
    for path in OWN:
        names = [
            target.id
            for node in ast.parse(path.read_text()).body
            if isinstance(node, (ast.Assign, ast.AnnAssign))
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
            if isinstance(target, ast.Name) and target.id.isupper()
        ]
        twice += [f"{path.relative_to(BENCH)}:{name}" for name in set(names) if names.count(name) > 1]
    assert twice == []


def test_markdown_tables_are_written_by_the_sweep_reports_writer():
    """doctor.md's tables come from bench.analysis.render.render_markdown, the sweep report's."""
    assert _where(r'"---\|"') == {"analysis/render.py"}
