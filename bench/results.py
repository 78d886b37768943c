"""What every scenario's report shares: the interface the app drives, the final stdout line,
and output files written whole or not at all.

A report (bench.train.report.TrainReport, bench.iobench.report.StorageReport) aggregates what
the ranks or simulated accelerators measured, flattens it to the `radix_metrics` dict (the
final stdout line and the MLflow metrics), writes the run's files and reads them back for
`python -m bench.report`.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Protocol, Sequence

from bench.secrets import redact


class Report(Protocol):
    metrics: Dict[str, Any]  # the radix_metrics dict: field names are a public contract
    problems: List[str]  # what failed after the measurement (a checkpoint): the run ends FAILED, the figures stand

    def headline(self) -> str: ...

    def write(self, out_dir: Path, config: Mapping[str, Any], environment: Mapping[str, Any],
              run_id: Optional[str]) -> List[Path]: ...

    def log_to(self, tracker: Any, files: List[Path], out_dir: Path, log_series: bool) -> None: ...


def strict(value: Any) -> Any:
    """A value JSON can carry: non-finite floats (nan, inf) become None (null), recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {k: strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict(v) for v in value]
    return value


def final_line(metrics: Mapping[str, Any]) -> str:
    """The last stdout line of a run: `{"radix_metrics": {...}}` (the original Radix contract,
    extended), always strict JSON: a figure that is not a finite number is null."""
    return json.dumps({"radix_metrics": strict(dict(metrics))}, default=str, allow_nan=False)


def write_text(path: Path, text: str) -> Path:
    """Write to a temporary name and rename: the file is complete or absent, never half-written.
    Every run file goes through here, and through bench.secrets.redact."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        tmp.write_text(redact(text))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def write_json(path: Path, data: Any) -> Path:
    return write_text(path, json.dumps(strict(data), indent=2, default=str, allow_nan=False) + "\n")


def write_jsonl(path: Path, rows: Iterable[Mapping[str, Any]]) -> Path:
    return write_text(path, "".join(json.dumps(strict(dict(row)), default=str, allow_nan=False) + "\n"
                                    for row in rows))


def write_csv(path: Path, fields: Sequence[str], rows: Iterable[Any]) -> Path:
    """Rows are dicts (by field name) or sequences (in field order)."""
    buffer = io.StringIO()
    rows = list(rows)
    if rows and isinstance(rows[0], Mapping):
        writer: Any = csv.DictWriter(buffer, fieldnames=list(fields))
        writer.writeheader()
    else:
        writer = csv.writer(buffer)
        writer.writerow(fields)
    writer.writerows(rows)
    return write_text(path, buffer.getvalue())


def read_summary(job_dir: Path) -> Dict[str, Any]:
    return json.loads((job_dir / "run_summary.json").read_text())


def read_column(path: Path, column: str) -> List[float]:
    """One numeric column of a CSV file ([] when the file is not there)."""
    if not path.is_file():
        return []
    with path.open() as fh:
        return [float(row[column]) for row in csv.DictReader(fh)]
