"""What a user writes outside bench: a storage record format and a data option of their own, named
on the command line as module:attr (`storage.workload.format=mylab.own:Framed`,
`data.name=mylab.own:zero_batches`), no line of bench edited. The tests copy this file into a
folder of their own and put that folder on Python's path, as a user would (docs/storage.md,
docs/data.md)."""

from __future__ import annotations

from bench.iobench.formats.base import CorruptFile, Format
from bench.registries import DataOption

MAGIC = b"OWN1"


class Framed(Format):
    """The records back to back after a 4-byte magic; a file without it is an error."""

    name, extension = "framed", "own"
    overhead_per_file, overhead_per_sample = len(MAGIC), 0

    def encode(self, spec, payload):
        return MAGIC + payload, spec.written(len(MAGIC) + len(payload), offset=len(MAGIC))

    def check_file(self, data, spec, decode=False):
        if bytes(data[: len(MAGIC)]) != MAGIC:
            raise CorruptFile(f"{spec.key}: no {MAGIC!r} header")
        self.expect_size(data, spec, len(MAGIC) + spec.samples * spec.record_size)
        return spec.samples


def zero_batches(data, device, memory_format, seed, rank, world_size, storage):
    """A data option: one batch of zeros, forever (the arguments of bench.data.registry.build_batches)."""
    import torch

    images = torch.zeros(data.batch_size, 3, data.image_size, data.image_size, device=device)
    labels = torch.zeros(data.batch_size, dtype=torch.long, device=device)
    while True:
        yield images.contiguous(memory_format=memory_format), labels


ZEROS = DataOption("mylab.own:zero_batches")  # the same option as an object (`data.name=mylab.own:ZEROS`)
