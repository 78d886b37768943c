"""The storage benchmark (mode=storage): MLPerf-Storage-style emulation of training I/O."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Mapping


def run_storage_benchmark(cfg: Dict[str, Any], out_dir: Path, environment: Mapping[str, Any],
                          tracker: Any) -> Dict[str, Any]:
    """Prepare, read and checkpoint phases; writes the output files, logs to `tracker`, returns
    the radix_metrics dict."""
    raise NotImplementedError("mode=storage is being built (issue 4)")
