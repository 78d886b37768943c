"""format=npz: a numpy archive (np.savez, stored, as DLIO writes UNet3D's) of one (samples,
record_size) uint8 array.

A file read whole is checked by parsing its zip entry and .npy header in place and viewing
the array without a copy (np.load would copy it out of an in-memory file); a sample read is
one record at the array's offset, which the prepare phase records in the manifest.
"""

from __future__ import annotations

import ast
import io
import struct
from typing import Tuple

import numpy as np

from bench.iobench.formats.base import CorruptFile, FileSpec, Format

ZIP_LOCAL_HEADER = 0x04034B50
ZIP_END = b"PK\x05\x06"  # the end-of-central-directory record: a file cut short has lost it
NPY_MAGIC = b"\x93NUMPY"


def array_layout(data: memoryview, key: str) -> Tuple[int, np.dtype, Tuple[int, ...]]:
    """(offset, dtype, shape) of the archive's first array."""
    if len(data) < 30 or struct.unpack_from("<I", data, 0)[0] != ZIP_LOCAL_HEADER:
        raise CorruptFile(f"{key}: not a zip archive")
    name_length, extra_length = struct.unpack_from("<HH", data, 26)
    start = 30 + name_length + extra_length
    if bytes(data[start : start + 6]) != NPY_MAGIC:
        raise CorruptFile(f"{key}: no .npy array in the archive")
    length_format, length_size = ("<H", 2) if data[start + 6] == 1 else ("<I", 4)  # by the format's major version
    (header_length,) = struct.unpack_from(length_format, data, start + 8)
    header_start = start + 8 + length_size
    header = ast.literal_eval(bytes(data[header_start : header_start + header_length]).decode("latin1"))
    return header_start + header_length, np.dtype(header["descr"]), tuple(header["shape"])


class NpzFormat(Format):
    name, extension = "npz", "npz"
    overhead_per_file, overhead_per_sample = 1024, 0  # on disk: measured: ~256 B of zip and npy headers a file

    def encode(self, spec: FileSpec, payload: bytes) -> Tuple[bytes, FileSpec]:
        buffer = io.BytesIO()
        np.savez(buffer, x=np.frombuffer(payload, dtype=np.uint8).reshape(spec.samples, spec.record_size))
        data = buffer.getvalue()
        return data, spec.written(len(data), array_layout(memoryview(data), spec.key)[0])

    def check_file(self, data: memoryview, spec: FileSpec, decode: bool = False) -> int:
        self.expect_size(data, spec)
        if bytes(data[-22:-18]) != ZIP_END:
            raise CorruptFile(f"{spec.key}: the archive is cut short (no end-of-directory record)")
        offset, dtype, shape = array_layout(data, spec.key)
        count = int(np.prod(shape))
        if offset + count * dtype.itemsize > len(data):
            raise CorruptFile(f"{spec.key}: the archive is cut short ({len(data)} bytes)")
        array = np.frombuffer(data, dtype=dtype, count=count, offset=offset).reshape(shape)  # in place: no copy
        if array.shape != (spec.samples, spec.record_size):
            raise CorruptFile(f"{spec.key}: an array of {array.shape}, expected {(spec.samples, spec.record_size)}")
        return spec.samples
