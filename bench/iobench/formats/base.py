"""What a record format is to the storage benchmark: how a file is written, how a file read whole
is checked, and where one sample lies in it (for sample-level reads).

A format checks what it reads as a loader would before handing samples on (a short file, a
broken frame, a bad checksum or an undecodable image is an error, never a fast read), and
works on a memoryview of a reused buffer: no copy of the data on the way.

storage.workload.format -> its Format, from the one table (bench.registries.FORMATS) or the
user's own module:Class.

Adding a format: a module with a Format subclass (bench.iobench.formats.base), one line in
bench.registries.FORMATS.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Optional, Protocol, Tuple

from bench.errors import ConfigError
from bench.registries import FORMATS, load_named


@dataclass(frozen=True)
class FileSpec:
    key: str  # relative to the dataset root
    index: int
    samples: int
    record_size: int
    size: int = 0  # bytes on the store, known once written (headers and framing included)
    offset: int = 0  # where sample 0 starts in the file
    stride: int = 0  # bytes from one sample's start to the next's (0: record_size)

    def written(self, size: int, offset: int = 0, stride: int = 0) -> "FileSpec":
        return replace(self, size=size, offset=offset, stride=stride or self.record_size)


class CorruptFile(ValueError):
    """A file (or a sample) read back is not what was written: short, badly framed, bad checksum."""


class StreamCheck(Protocol):
    """Checks a file fed piece by piece as it is read (a format that needs no whole file to check)."""

    def feed(self, piece: memoryview) -> None: ...

    def finish(self) -> int: ...  # samples found; raises CorruptFile


class LengthCheck:
    """A file of a known length, nothing else to check (raw records)."""

    def __init__(self, spec: "FileSpec", expected: int):
        self.spec, self.expected, self.got = spec, expected, 0

    def feed(self, piece: memoryview) -> None:
        self.got += len(piece)

    def finish(self) -> int:
        if self.got != self.expected:
            raise CorruptFile(f"{self.spec.key}: read {self.got} bytes, expected {self.expected}")
        return self.spec.samples


class Format:
    name = ""
    extension = "bin"
    # what the format adds on disk, for the free-space check before any write (bench.iobench.preflight):
    # bytes per file (headers, an index) and per sample (framing); the defaults are a generous guess
    overhead_per_file = 4096
    overhead_per_sample = 64

    def stream(self, spec: FileSpec, decode: bool = False) -> Optional[StreamCheck]:
        """A checker fed the file piece by piece, so a whole-file read can go through one small
        buffer that stays in the CPU cache; None: check_file needs the whole file at once."""
        return None

    def encode(self, spec: FileSpec, payload: bytes) -> Tuple[bytes, FileSpec]:
        """The file's bytes for `payload` (samples x record_size seeded random bytes) and the spec
        with its size and sample layout filled in."""
        raise NotImplementedError

    def check_file(self, data: memoryview, spec: FileSpec, decode: bool = False) -> int:
        """Samples found in a whole file just read; raises CorruptFile. By default the format's
        stream checker, fed the whole file as one piece."""
        if (stream := self.stream(spec, decode)) is None:
            raise NotImplementedError
        stream.feed(data)
        return stream.finish()

    def sample_span(self, spec: FileSpec, sample: int) -> Tuple[int, int]:
        """(offset, length) of one sample's read: the record, with its framing where it has one."""
        return spec.offset + sample * (spec.stride or spec.record_size), spec.record_size

    def check_sample(self, data: memoryview, spec: FileSpec, decode: bool = False) -> None:
        """One sample just read on its own; raises CorruptFile."""
        self.expect_size(data, spec, spec.record_size, " of a sample")

    @staticmethod
    def expect_size(data: memoryview, spec: FileSpec, size: Optional[int] = None, what: str = "") -> None:
        """`size` bytes read (None: the file's spec.size, once known: not 0), of a file or of `what`."""
        size = spec.size if size is None else size
        if size and len(data) != size:
            raise CorruptFile(f"{spec.key}: read {len(data)} bytes{what}, expected {size}")


class Unchecked(Format):
    """storage.workload.verify_records=false: `fmt`'s files read as they are laid out, with only
    their lengths checked (a whole file's size, a sample's read): no framing, checksum or decode.
    What the reads cost without what checking them costs (TFRecord's CRC-32C of every byte)."""

    def __init__(self, fmt: Format):
        self.fmt, self.name, self.extension = fmt, fmt.name, fmt.extension

    def stream(self, spec: FileSpec, decode: bool = False) -> Optional[StreamCheck]:
        return LengthCheck(spec, spec.size)

    def encode(self, spec: FileSpec, payload: bytes) -> Tuple[bytes, FileSpec]:
        return self.fmt.encode(spec, payload)

    def sample_span(self, spec: FileSpec, sample: int) -> Tuple[int, int]:
        return self.fmt.sample_span(spec, sample)

    def check_sample(self, data: memoryview, spec: FileSpec, decode: bool = False) -> None:
        # every format's samples read alike within a file
        self.expect_size(data, spec, self.fmt.sample_span(spec, 0)[1], " of a sample")


@lru_cache(maxsize=None)
def format_for(name: str) -> Format:
    """The format's instance; a user's module:Class that does not import, or is no Format, is a
    ConfigError naming storage.workload.format."""
    cls = load_named("storage.workload.format", name, FORMATS)
    if not (isinstance(cls, type) and issubclass(cls, Format)):
        raise ConfigError("storage.workload.format", name, "a subclass of bench.iobench.formats.base.Format")
    return cls()
