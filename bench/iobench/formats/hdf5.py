"""format=hdf5: an HDF5 file (h5py) holding one (samples, record_size) uint8 dataset, chunked one
sample per chunk and unfiltered, as DLIO's hdf5 generator lays it out.

A file read whole is opened by h5py from memory and its dataset's shape checked (decode=true
also reads every sample through h5py). A sample read is one chunk, at the address h5py gave it
when the file was written (chunks are allocated in order, so sample i lies at offset + i x
stride; the prepare phase checks that and records both in the manifest).
"""

from __future__ import annotations

import io
import itertools
from typing import Tuple

import numpy as np

from bench.iobench.formats.base import CorruptFile, FileSpec, Format

DATASET = "x"


class HDF5Format(Format):
    name, extension = "hdf5", "h5"
    overhead_per_file, overhead_per_sample = 8192, 64  # on disk: measured: ~4 KiB of HDF5 metadata a file

    def encode(self, spec: FileSpec, payload: bytes) -> Tuple[bytes, FileSpec]:
        import h5py

        buffer = io.BytesIO()
        array = np.frombuffer(payload, dtype=np.uint8).reshape(spec.samples, spec.record_size)
        with h5py.File(buffer, "w") as h5:
            h5.create_dataset(DATASET, data=array, chunks=(1, spec.record_size))
        data = buffer.getvalue()
        with h5py.File(io.BytesIO(data), "r") as h5:
            chunks = h5[DATASET].id
            offsets = [chunks.get_chunk_info(i).byte_offset for i in range(spec.samples)]
        stride = offsets[1] - offsets[0] if len(offsets) > 1 else spec.record_size
        if any(b - a != stride for a, b in itertools.pairwise(offsets)):
            raise RuntimeError(f"{spec.key}: h5py did not lay the chunks out in order; sample reads cannot find them")
        return data, spec.written(len(data), offsets[0], stride)

    def check_file(self, data: memoryview, spec: FileSpec, decode: bool = False) -> int:
        import h5py

        self.expect_size(data, spec)
        try:
            with h5py.File(io.BytesIO(data), "r") as h5:
                dataset = h5[DATASET]
                if dataset.shape != (spec.samples, spec.record_size):
                    raise CorruptFile(
                        f"{spec.key}: a dataset of {dataset.shape}, expected {(spec.samples, spec.record_size)}"
                    )
                if decode:
                    for index in range(spec.samples):
                        dataset[index]
        except OSError as exc:  # h5py's word for a file it cannot parse
            raise CorruptFile(f"{spec.key}: not a readable HDF5 file ({exc})") from None
        return spec.samples
