"""The `data` group: what the training loop reads (synthetic batches or a real dataset).

data.progressive: the fast-ImageNet schedule of image size and batch size by epoch.

"0,128,512;5,160,384;10,192,320;15,224,256" = from epoch 0 train at 128 px with batches of 512,
from epoch 5 at 160 px / 384, ... (epochs count from 0). Torch-free: parsed while the config
is checked, so a bad string is one line naming data.progressive.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from bench.config.fields import Checks, Choice, non_negative, positive
from bench.errors import ConfigError
from bench.registries import DATA

# the classifier's head is num_classes x features weights: 1M classes on a 2048-feature model is
# 8 GiB of float32 before gradients and optimizer state; a count beyond this is a typo, not a run
MAX_CLASSES = 1_000_000


class Split(Choice):
    train = "train"  # random-resized crop + flip
    val = "val"  # resize + center crop


class Decoder(Choice):
    simplejpeg = "simplejpeg"  # libjpeg-turbo with DCT-domain downscaling
    pil = "pil"


@dataclass
class DataConfig(Checks):
    KEY = "data"
    # an option in bench.registries.DATA, or a batches builder of your own: mypkg.data:my_batches
    name: str = "synthetic"
    batch_size: int = positive(128)  # per process (the global batch with distributed.scaling=strong)
    image_size: int = positive(224)
    num_classes: int = positive(1000)
    # real data (ignored by synthetic): a directory, or s3://bucket/prefix for shards
    root: Optional[str] = None
    split: Split = Split.train
    # DataLoader workers; null: on a GPU this rank's share of the CPUs (<= 8), on the CPU what fits
    # beside cpu_threads in the usable cores (bench.runtime.device.fit_cpu)
    num_workers: Optional[int] = non_negative(None)
    pin_memory: bool = True  # page-locked batches for async host-to-GPU copies (CUDA only)
    persistent_workers: bool = True  # keep workers between epochs (map-style datasets)
    prefetch_factor: int = positive(4)  # batches each worker prepares ahead
    strict: bool = False  # a corrupt image stops the run (false: skipped and counted)
    decoder: Decoder = Decoder.simplejpeg
    # train split: random-resized crop + flip (cifar100: pad-crop + flip); false: the val transform
    # (digits: a flipped 2 is no 2)
    augment: bool = True
    # progressive resizing: "epoch,size,batch;..." from each epoch on (e.g. "0,128,512;5,160,384")
    progressive: Optional[str] = None
    # data=cifar100 only: fetch CIFAR-100 into data.root through torchvision when its files are not
    # there (about 340 MB with the archive; checked against the free space first)
    download: bool = False

    @property
    def dataset_root(self) -> str:
        """data.root of a dataset read from files: __post_init__ refuses a missing one."""
        assert self.root, "data.root is checked in __post_init__ for every dataset read from files"
        return self.root

    @property
    def synthetic(self) -> bool:
        return self.name == "synthetic"

    def __post_init__(self) -> None:
        self.registered("name")
        self.check_ranges()
        if self.num_classes > MAX_CLASSES:
            self._fail("num_classes", f"at most {MAX_CLASSES:,} (the classifier holds num_classes x features weights)")
        if self.progressive is not None:
            parse_progressive(self.progressive)  # raises the one-line error naming data.progressive
        if self.download and self.name != "cifar100":
            self._fail("download", f"false with data={self.name} (only data=cifar100 can be downloaded)")
        option = DATA.get(self.name)
        if option is None or option.check is None:  # made, not read from files; or a builder of the user's own
            return
        if not self.root:
            where = "a directory or s3://bucket/prefix" if self.name == "shards" else "a directory"
            self._fail("root", f"{where} holding the {self.name} dataset")
        if self.root.startswith("s3://") and self.name != "shards":
            self._fail("root", f"a local directory for data={self.name} (s3:// is read by data=shards)")


ACCEPTED = (
    '"epoch,size,batch;..." with increasing epochs starting at 0 and positive sizes and batches, '
    'e.g. "0,128,512;5,160,384;10,192,320;15,224,256"'
)


@dataclass(frozen=True)
class Phase:
    epoch: int  # the first epoch (from 0) of this phase
    image_size: int
    batch_size: int


def parse_progressive(text: str) -> List[Phase]:
    phases: List[Phase] = []
    try:
        for part in str(text).replace(" ", "").strip(";").split(";"):
            epoch, size, batch = (int(f) for f in part.split(","))  # ValueError: not three whole numbers
            if epoch < 0 or size <= 0 or batch <= 0 or (phases and epoch <= phases[-1].epoch):
                raise ValueError(part)
            phases.append(Phase(epoch, size, batch))
        if not phases or phases[0].epoch != 0:
            raise ValueError(text)
    except ValueError:
        raise ConfigError("data.progressive", text, ACCEPTED) from None
    return phases


def phase_at(phases: List[Phase], epoch: int) -> Phase:
    """The phase epoch `epoch` (from 0) trains in."""
    return [p for p in phases if p.epoch <= epoch][-1]
