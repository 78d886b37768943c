"""The emulated dataset: which files, how many samples of what size, and their bytes.

A file holds `samples_per_file` records of one size; with `record_size_stdev` each file
draws its own record size from N(record_size, stdev) (seeded, so every client and every run
agrees without reading anything). Two formats:
- raw: the records back to back (TFRecord-like streaming reads; decoding is free);
- npz: a numpy archive of a (samples, record_size) uint8 array, decoded with np.load on read.
"""

from __future__ import annotations

import io
from dataclasses import asdict, dataclass
from typing import Any, Dict, List

from bench.config.storage import StorageWorkloadConfig

import numpy as np

# The workload keys that change the dataset's bytes: a prepared dataset is reused only when
# all of them match.
DATASET_KEYS = ("num_files", "samples_per_file", "record_size", "record_size_stdev", "format", "seed")


@dataclass(frozen=True)
class FileSpec:
    key: str  # relative to the dataset root
    index: int
    samples: int
    record_size: int
    size: int = 0  # bytes on the store, known once written (npz adds a header)

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def dataset_spec(workload: StorageWorkloadConfig) -> Dict[str, Any]:
    return {key: getattr(workload, key) for key in DATASET_KEYS}


def plan_files(workload: StorageWorkloadConfig) -> List[FileSpec]:
    extension = "npz" if workload.format == "npz" else "bin"
    width = max(5, len(str(workload.num_files)))
    files = []
    for index in range(workload.num_files):
        record = workload.record_size
        if workload.record_size_stdev:
            rng = np.random.default_rng([workload.seed, index])
            record = max(1, int(round(rng.normal(record, workload.record_size_stdev))))
        files.append(FileSpec(f"file_{index:0{width}d}.{extension}", index, workload.samples_per_file, record))
    return files


def encode(spec: FileSpec, fmt: str, seed: int) -> bytes:
    """The file's bytes: seeded random records (incompressible, like decoded-then-encoded media)."""
    payload = np.random.default_rng([seed, spec.index, 1]).bytes(spec.samples * spec.record_size)
    if fmt == "raw":
        return payload
    buffer = io.BytesIO()
    np.savez(buffer, x=np.frombuffer(payload, dtype=np.uint8).reshape(spec.samples, spec.record_size))
    return buffer.getvalue()


def decode_samples(data: bytes, spec: FileSpec, fmt: str) -> int:
    """Samples found in a file read back; a short or corrupt file is an error, not a fast read."""
    if fmt == "raw":
        if len(data) != spec.samples * spec.record_size:
            raise ValueError(f"{spec.key}: read {len(data)} bytes, expected {spec.samples * spec.record_size}")
        return spec.samples
    with np.load(io.BytesIO(data)) as archive:
        samples = archive["x"].shape[0]
    if samples != spec.samples:
        raise ValueError(f"{spec.key}: {samples} samples in the archive, expected {spec.samples}")
    return samples
