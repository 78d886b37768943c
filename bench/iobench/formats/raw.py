"""format=raw: the records back to back, nothing else (decoding is free)."""

from __future__ import annotations

from typing import Optional, Tuple

from bench.iobench.formats.base import FileSpec, Format, LengthCheck, StreamCheck


class RawFormat(Format):
    name, extension = "raw", "bin"
    overhead_per_file, overhead_per_sample = 0, 0  # on disk: nothing: the records back to back

    def encode(self, spec: FileSpec, payload: bytes) -> Tuple[bytes, FileSpec]:
        return payload, spec.written(len(payload))

    def stream(self, spec: FileSpec, decode: bool = False) -> Optional[StreamCheck]:
        return LengthCheck(spec, spec.samples * spec.record_size)
