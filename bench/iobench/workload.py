"""The emulated dataset: which files, how many samples of what size, and their bytes.

A file holds `samples_per_file` records of one size; with `record_size_stdev` each file
draws its own record size from N(record_size, stdev) (seeded, so every client and every run
agrees without reading anything). The bytes are seeded random records (incompressible, like
decoded-then-encoded media), written in one of the formats of bench.iobench.formats.
Evaluation files (`eval_num_files`) live under eval/ beside the training files.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

import numpy as np

from bench.config.storage import StorageWorkloadConfig
from bench.iobench.formats.base import FileSpec
from bench.iobench.formats.registry import format_for

__all__ = ["FileSpec", "dataset_spec", "decode_samples", "encode", "encode_file", "plan_files"]

# The workload keys that change the dataset's bytes: a prepared dataset is reused only when
# all of them match.
DATASET_KEYS = ("num_files", "samples_per_file", "record_size", "record_size_stdev", "format", "seed", "eval_num_files")
EVAL_DIR = "eval"
EVAL_INDEX = 1_000_000  # eval files draw their bytes and sizes from indices of their own


def dataset_spec(workload: StorageWorkloadConfig) -> Dict[str, Any]:
    spec = {key: getattr(workload, key) for key in DATASET_KEYS}
    if not spec["eval_num_files"]:
        del spec["eval_num_files"]  # so a dataset prepared before eval files existed still matches
    return {key: str(value) if key == "format" else value for key, value in spec.items()}


def _record_size(workload: StorageWorkloadConfig, index: int) -> int:
    if not workload.record_size_stdev:
        return workload.record_size
    rng = np.random.default_rng([workload.seed, index])
    return max(1, int(np.rint(rng.normal(workload.record_size, workload.record_size_stdev))))


def plan_files(workload: StorageWorkloadConfig, evaluation: bool = False) -> List[FileSpec]:
    """The training files (or, with evaluation=True, the eval files), not yet written (size 0)."""
    extension = format_for(workload.format).extension
    count = workload.eval_num_files if evaluation else workload.num_files
    width = max(5, len(str(count)))
    prefix, first = (f"{EVAL_DIR}/", EVAL_INDEX) if evaluation else ("", 0)
    return [
        FileSpec(
            f"{prefix}file_{i:0{width}d}.{extension}",
            first + i,
            workload.samples_per_file,
            _record_size(workload, first + i),
        )
        for i in range(count)
    ]


def encode_file(spec: FileSpec, fmt: str, seed: int) -> Tuple[bytes, FileSpec]:
    """The file's bytes and its spec as written (size, where its samples lie)."""
    payload = np.random.default_rng([seed, spec.index, 1]).bytes(spec.samples * spec.record_size)
    return format_for(fmt).encode(spec, payload)


def encode(spec: FileSpec, fmt: str, seed: int) -> bytes:
    return encode_file(spec, fmt, seed)[0]


def decode_samples(data: bytes | memoryview, spec: FileSpec, fmt: str, decode: bool = False) -> int:
    """Samples found in a file read back; a short or corrupt file is an error, not a fast read."""
    return format_for(fmt).check_file(memoryview(data), spec, decode)
