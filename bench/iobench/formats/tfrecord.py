"""format=tfrecord: real TFRecord files, as TensorFlow writes and reads them, without TensorFlow.

Each record is framed as
    uint64 length (little-endian) | uint32 masked CRC-32C of those 8 bytes | data | uint32 masked CRC-32C of data
and both checksums are verified on every read (a whole file, or one record read on its own), by
one checker fed the bytes as they come (FrameStream).
CRC-32C (Castagnoli) comes from the `crc32c` package (hardware instructions, no copy of the
buffer; a dependency of bench).
"""

from __future__ import annotations

import struct
from dataclasses import replace
from functools import lru_cache
from typing import Optional, Tuple

from crc32c import crc32c

from bench.iobench.formats.base import CorruptFile, FileSpec, Format, StreamCheck

HEADER, FOOTER = 12, 4  # length + its CRC; the data's CRC
MASK_DELTA = 0xA282EAD8
_LENGTH = struct.Struct("<QI")
_CRC = struct.Struct("<I")


def mask(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + MASK_DELTA) & 0xFFFFFFFF


def masked_crc(data: bytes | bytearray | memoryview) -> int:
    return mask(crc32c(data))


def frame(record: bytes | memoryview) -> bytes:
    return _LENGTH.pack(len(record), length_crc(len(record))) + bytes(record) + _CRC.pack(masked_crc(record))


@lru_cache(maxsize=4096)
def length_crc(length: int) -> int:
    """The masked CRC-32C of a record's 8-byte length field: a function of the length alone, so a
    file's records (all of one size) have it computed once, not once per record."""
    return masked_crc(struct.pack("<Q", length))


class FrameStream:
    """The frames of a file fed piece by piece (pieces cut anywhere, as a reader's transfer size
    falls), both checksums verified, as TensorFlow's record reader does with its read buffer.

    The per-record Python work is what the checksums leave: a piece of one record's size holds the
    end of one record's data, its footer, the next header and the start of its data; a header or
    footer that lies whole in the piece is unpacked in place, and one cut by the piece's edge is
    gathered in a small buffer (the slow path, about once in every record_size / 16 pieces)."""

    def __init__(self, spec: FileSpec):
        self.spec, self.records, self.offset = spec, 0, 0
        self._part = bytearray()  # a header or footer cut by a piece's edge, so far
        self._left, self._crc = -1, 0  # data bytes still to come in this record (-1: in its header)

    def feed(self, piece: memoryview) -> None:
        at, size = 0, len(piece)
        while at < size:
            left = self._left
            if left > 0:  # data, checksummed as it passes
                take = min(left, size - at)
                self._crc = crc32c(piece[at : at + take], self._crc)
                self._left = left - take
                at += take
            elif self._part or size - at < (HEADER if left else FOOTER):  # framing cut by the edge
                at = self._gather(piece, at, HEADER if left else FOOTER)
            elif left:  # a whole header
                self._start_record(*_LENGTH.unpack_from(piece, at))
                at += HEADER
            else:  # a whole footer
                self._end_record(_CRC.unpack_from(piece, at)[0])
                at += FOOTER

    def _gather(self, piece: memoryview, at: int, want: int) -> int:
        take = min(want - len(self._part), len(piece) - at)
        self._part += piece[at : at + take]
        if len(self._part) == want:
            part, self._part = self._part, bytearray()
            if want == HEADER:
                self._start_record(*_LENGTH.unpack(part))
            else:
                self._end_record(_CRC.unpack(part)[0])
        return at + take

    def _start_record(self, length: int, crc: int) -> None:
        if length_crc(length) != crc:
            raise CorruptFile(f"{self.spec.key}: bad length checksum of the record at byte {self.offset}")
        if length != self.spec.record_size:
            raise CorruptFile(f"{self.spec.key}: a record of {length} bytes, expected {self.spec.record_size}")
        self._left, self._crc = length, 0

    def _end_record(self, crc: int) -> None:
        if mask(self._crc) != crc:
            raise CorruptFile(f"{self.spec.key}: bad data checksum of the record at byte {self.offset}")
        self.records += 1
        self.offset += HEADER + self.spec.record_size + FOOTER
        self._left = -1

    def finish(self) -> int:
        if self._part or self._left >= 0:
            raise CorruptFile(f"{self.spec.key}: the record at byte {self.offset} is cut short")
        if self.records != self.spec.samples:
            raise CorruptFile(f"{self.spec.key}: {self.records} records, expected {self.spec.samples}")
        return self.records


class TFRecordFormat(Format):
    name, extension = "tfrecord", "tfrecord"
    overhead_per_file, overhead_per_sample = 0, 16  # on disk: a 16-byte frame a record (length, two CRCs)

    def encode(self, spec: FileSpec, payload: bytes) -> Tuple[bytes, FileSpec]:
        size = spec.record_size
        view = memoryview(payload)
        data = b"".join(frame(view[i * size : (i + 1) * size]) for i in range(spec.samples))
        return data, spec.written(len(data), 0, size + HEADER + FOOTER)

    def stream(self, spec: FileSpec, decode: bool = False) -> Optional[StreamCheck]:
        return FrameStream(spec)

    def sample_span(self, spec: FileSpec, sample: int) -> Tuple[int, int]:
        return sample * spec.stride, spec.stride

    def check_sample(self, data: memoryview, spec: FileSpec, decode: bool = False) -> None:
        self.check_file(data, replace(spec, samples=1))  # one whole frame
