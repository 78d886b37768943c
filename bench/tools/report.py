"""`python -m bench.report --sweep <sweep dir | MLflow parent run id>`: compare a sweep's runs.

(Its documented name is `python -m bench.report`: bench/report.py.)

Writes into --out (default <sweep dir>/report, or ./report-<run id> for an MLflow parent):
report.csv, report.md, report.html (one self-contained page, plots embedded) and four PNGs:
throughput vs GPU count, scaling efficiency vs GPU count, throughput vs batch size, and the
step-time distribution of every run, plus accuracy_vs_time.png when some job evaluated
accuracy (a storage-benchmark sweep gets its own three). Prints the
table. Given a parent run id, the files are also logged to that run under report/.

Exit codes: 0 written, 2 the sweep cannot be read (one `[ERROR] ...` line on stderr).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Optional, Sequence

from bench.analysis import ReportError, build_report, report_from_mlflow
from bench.errors import ConfigError, print_error
from bench.machine.children import exit_without_teardown
from bench.machine.writable import check_writable_dir
from bench.secrets import redact_output
from bench.tracking.store import missing_sqlite_store, resolve_tracking_uri, store_problem


def main(argv: Optional[Sequence[str]] = None) -> int:
    redact_output()  # a tracking URI or an endpoint read from the environment may carry a password
    parser = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sweep", required=True, help="a multirun directory, or the MLflow run id of a sweep's parent")
    parser.add_argument("--out", type=Path, help="where the files go (default <sweep dir>/report or ./report-<run id>)")
    parser.add_argument("--tracking-uri", help="MLflow store (default: MLFLOW_TRACKING_URI, else sqlite:///mlflow.db)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    local = Path(args.sweep).exists()
    out = args.out or (Path(args.sweep) / "report" if local else Path(f"report-{args.sweep[:8]}"))
    try:
        check_writable_dir("--out", str(out))  # before the sweep is read (or a store opened)
        if local:
            files, _ = build_report(Path(args.sweep), out)
        else:
            uri = args.tracking_uri or resolve_tracking_uri(None, Path.cwd())  # where `python -m bench` run here logs
            if missing := missing_sqlite_store(uri):
                raise ReportError(
                    f"--sweep {args.sweep} is neither a directory nor a run in the MLflow store at {uri}: "
                    f"{missing} does not exist (pass a multirun directory, or name the sweep's store with "
                    "--tracking-uri)"
                )
            if problem := store_problem(uri):
                raise ReportError(problem)
            files, _ = report_from_mlflow(args.sweep, uri, out)
    except (ReportError, ConfigError) as exc:
        return print_error(str(exc), exc.exit_code)
    print(f"report: {files[2].resolve()}", file=sys.stderr)  # report.html
    return 0


if __name__ == "__main__":
    exit_without_teardown(main)
