"""The shape of bench's output, held (issue 41 §6): a training, a storage and an inference run, a 2-job
training sweep and `bench.compare` of its two jobs, run once as real processes into one sqlite store, then
captured: run_summary.json, the final line, the MLflow params/metrics/tags of each run, the sweep's printed
table and report.csv/report.md, and compare's output. Keys, value types and every value that is not a
measurement (config values, names, statuses, units, formats) are kept; measured values (floats, times,
bytes, paths, ids, hosts, the machine's verdicts) only for presence and type. The capture must equal
tests/e2e/output_shape.json: 0 differences. A deliberate change of the output regenerates it:

    BENCH_WRITE_GOLDEN=1 python -m pytest -q -n 0 tests/e2e/test_output_shape.py
"""

from __future__ import annotations

import csv
import json
import os
import re
from pathlib import Path
from typing import Any, Dict, List

import pytest

GOLDEN = Path(__file__).with_name("output_shape.json")
STORAGE = [
    "mode=storage",
    "storage.workload.num_files=4",
    "storage.workload.samples_per_file=2",
    "storage.workload.record_size=4096",
    "storage.workload.batch_size=2",
    "storage.workload.epochs=1",
    "storage.workload.read_threads=1",
    "storage.workload.checkpoint_size_mb=0",
    "storage.prepare_workers=1",
]
# keys whose values are measured or the machine's whatever their type: presence and type only
MEASURED = re.compile(
    r"(^|[._ ])(fit|pid|host|hostname|user|time|seconds|bytes|memory|checkpoint|cpu|cores|load|swap|"
    r"unstable|stable|source|git|commit|date|start|end|uuid|sha|version|python|torch|platform|machine|"
    r"kernel|checksum|au_pass|mlperf_au_pass|potential_caching|mlperf_qualifies|verdict|run_id|runName|"
    r"interval|os|cuda|cudnn|torchvision|packages_sha256|min_num_files)($|[._ ])|^(mlflow|env)\.|_id$"
)
FIT_COLUMNS = {"fit_reasons", "fit_notes"}  # report.csv's, there when a job was unfit or noted
UNFIT_LINES = {"  baseline", "  candidate", "  measured"}  # compare's "not judged" lines, naming the unfit runs
SECTIONS_BY_TYPE = ("environment", "files")  # run_summary.json sections that are the machine's: keys and types


def kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def text(value: str, root: str) -> str:
    """A string with the run's folders, ids and times taken out."""
    value = value.replace(root, "<root>")
    value = re.sub(r"\b[0-9a-f]{32}\b", "<id>", value)
    value = re.sub(r"\d{4}-\d\d-\d\d[ T_]?\d\d[:-]\d\d[:-]\d\d(\.\d+)?|\b\d{8}-\d{6}\b", "<time>", value)
    # MLPerf's dataset floor is set by this host's RAM (min_num_files): a machine's figure, not the shape's
    value = re.sub(
        r"at least \d+ files \([\d.]+ GiB(; set by 5x the hosts' RAM: \d+ host\(s\) x )[\d.]+ GiB",
        r"at least <n> files (<n> GiB\1<n> GiB",
        value,
    )
    return value


def shape(value: Any, root: str, key: str = "", config: bool = False) -> Any:
    """`value` with its measured parts replaced by their type (a run's config is kept whole)."""
    if isinstance(value, dict):
        if key in SECTIONS_BY_TYPE:
            return {k: kind(v) for k, v in sorted(value.items())}
        return {k: shape(v, root, k, config or key == "config") for k, v in value.items()}
    if isinstance(value, list):
        return [shape(v, root, key, config) for v in value]
    if not config and (isinstance(value, float) or MEASURED.search(key)):
        return f"<{kind(value)}>"
    return text(value, root) if isinstance(value, str) else value


def cell(value: str, root: str) -> str:
    """A table cell: a number's presence (its digits, and whether they show a decimal point, are the
    measurement's: 4 significant digits print 1234 and 123.4), any other text as it is."""
    value = value.strip()
    if re.fullmatch(r"-?\d+(\.\d+)?(e[-+]?\d+)?%?|nan|inf", value):
        return "<number>"
    return text(value, root)


def table(lines: List[str], root: str) -> List[str]:
    """A printed or markdown table and the lines around it: its header as it is, its cells shaped (a
    measured column's: presence only); a warning (the machine's fitness) and blank lines left out. A
    printed table's cells are cut where its dashes line puts its columns (an empty cell stays a cell),
    and that line is its column count: its widths are the measured values' (`False` is wider than `True`)."""
    shaped: List[str] = []
    header: List[str] = []
    columns: List[re.Match] = []  # a printed table's: the spans of its dashes line
    for line in lines:
        if not line.strip() or line.startswith("warning: "):
            continue
        if "|" not in line and set(line) <= set("- "):
            columns = list(re.finditer(r"-+", line))
            shaped.append(" | ".join("---" for _ in columns))
            continue
        if "|" in line:
            split = line.strip().strip("|").split("|")
        elif columns:
            ends = [span.start() for span in columns[1:]] + [len(line)]
            split = [line[span.start() : end] for span, end in zip(columns, ends, strict=True)]
        else:
            split = re.split(r"\s{2,}", line.strip())
        cells = [c.strip() for c in split]
        if not header and len(cells) > 1:
            header = cells
        elif header and not set(line) <= set("-|: "):
            named = header if len(cells) == len(header) else [""] * len(cells)
            cells = ["<cell>" if MEASURED.search(h) else cell(c, root) for h, c in zip(named, cells, strict=True)]
        shaped.append(" | ".join(text(c, root) for c in cells))
    return shaped


def report_csv(path: Path, root: str) -> List[Dict[str, str]]:
    """Its rows shaped; `fit_reasons` and `fit_notes`, columns only when a job was unfit or noted (the
    machine's), left out."""
    with path.open() as fh:
        return [
            {k: "<cell>" if MEASURED.search(k) else cell(v, root) for k, v in row.items() if k not in FIT_COLUMNS}
            for row in csv.DictReader(fh)
        ]


def mlflow_run(run: Any, root: str) -> Dict[str, Any]:
    metrics = {k: "<float>" for k in sorted(run.data.metrics)}
    params = {k: shape(v, root, k) for k, v in sorted(run.data.params.items())}
    tags = {k: shape(v, root, k) for k, v in sorted(run.data.tags.items())}
    return {"status": run.info.status, "params": params, "metrics": metrics, "tags": tags}


def one_run(proc, run_dir: Path, runs_by_id: Dict[str, Any], root: str) -> Dict[str, Any]:
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr[-3000:]}"
    summary = json.loads((run_dir / "run_summary.json").read_text())
    final = json.loads(proc.stdout.strip().splitlines()[-1])
    return {
        "exit": proc.returncode,
        "final_line": shape(final, root),
        "run_summary": shape(summary, root),
        "mlflow": mlflow_run(runs_by_id[summary["mlflow_run_id"]], root),
    }


@pytest.fixture(scope="module")
def capture(tmp_path_factory, bench_at, tiny_args) -> Dict[str, Any]:
    root = tmp_path_factory.mktemp("shape")
    bench = bench_at(root).with_store()
    procs = {
        "train": bench.run(*tiny_args, f"hydra.run.dir={root}/train"),
        "storage": bench.run(*STORAGE, f"storage.root={root}/data", f"hydra.run.dir={root}/storage"),
        "inference": bench.run(
            "mode=inference",
            *(a for a in tiny_args if not a.startswith("train.steps_per_epoch=")),
            "train.steps_per_epoch=2",
            f"hydra.run.dir={root}/inference",
        ),
    }
    sweep = root / "sweep"
    swept = bench.run("-m", *tiny_args, "seed=1,2", f"hydra.sweep.dir={sweep}")
    assert swept.returncode == 0, swept.stderr[-3000:]
    compared = bench.run(str(sweep / "0"), str(sweep / "1"), "--out", str(root / "compare"), module="bench.compare")
    assert compared.returncode in (0, 1, 3), compared.stderr[-3000:]  # the verdict is the machine's

    runs = {r.info.run_id: r for r in bench.runs()}
    top = str(root)
    found: Dict[str, Any] = {name: one_run(procs[name], root / name, runs, top) for name in procs}
    lines = swept.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("job "))
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    jobs = sorted((r for r in runs.values() if "sweep.job" in r.data.tags), key=lambda r: r.data.tags["sweep.job"])
    (parent,) = [r for r in runs.values() if r.data.tags.get("sweep") == "parent"]
    found["sweep"] = {
        "exit": swept.returncode,
        "printed_table": table(lines[start:end], top),
        "report_files": sorted(p.name for p in (sweep / "report").iterdir()),
        "report.md": table((sweep / "report" / "report.md").read_text().splitlines(), top),
        "report.csv": report_csv(sweep / "report" / "report.csv", top),
        "job_summaries": [shape(json.loads((sweep / n / "run_summary.json").read_text()), top) for n in "01"],
        "mlflow_parent": mlflow_run(parent, top),
        "mlflow_jobs": [mlflow_run(job, top) for job in jobs],
    }
    found["compare"] = {
        "stdout": table(compared.stdout.splitlines(), top),
        # the lines that say why a side was unfit are the machine's: there when a run was unfit to measure
        "stderr_starts": sorted(
            {line.split(":")[0] for line in compared.stderr.splitlines() if ":" in line} - UNFIT_LINES
        ),
        "files": sorted(p.name for p in (root / "compare").iterdir()),
    }
    return json.loads(json.dumps(found))  # as the golden file holds it (tuples as lists)


def differences(want: Any, got: Any, where: str = "") -> List[str]:
    if isinstance(want, dict) and isinstance(got, dict):
        out = [f"{where}/{k}: only in the golden file" for k in want if k not in got]
        out += [f"{where}/{k}: new" for k in got if k not in want]
        if not out and list(want) != list(got):
            out.append(f"{where}: key order {list(want)} -> {list(got)}")
        return out + [d for k in want if k in got for d in differences(want[k], got[k], f"{where}/{k}")]
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        return [d for i, (w, g) in enumerate(zip(want, got, strict=True)) for d in differences(w, g, f"{where}[{i}]")]
    return [] if want == got else [f"{where}: {want!r} -> {got!r}"]


def test_the_output_shape_is_the_golden_files(capture):
    if os.environ.get("BENCH_WRITE_GOLDEN") == "1":
        GOLDEN.write_text(json.dumps(capture, indent=1) + "\n")
    found = differences(json.loads(GOLDEN.read_text()), capture)
    assert found == [], "\n".join(found[:60])
