"""The `storage` group: where checkpoints, shards and the storage benchmark's dataset live
(StorageLocation, read by bench.storage), and the storage benchmark's own keys (StorageBenchmarkConfig,
read by bench.iobench: how many simulated accelerators, how the dataset is prepared, MLPerf's runs, and
the workload they emulate, `storage.workload`). StorageConfig is both in one group, so every key keeps
its path (`storage.root`, `storage.runs`, `storage.workload.num_files`); code that only needs the where
takes a StorageLocation.

S3 credentials have no key here on purpose: they come from the AWS environment or profile
only, since the config is saved in .hydra/ and logged to MLflow."""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass, field, fields
from typing import Any, List, Optional, Tuple, Union
from urllib.parse import urlparse

from bench.config.fields import Checks, Choice, changed_keys, non_negative, positive
from bench.errors import ConfigError


def _number(*values: object) -> bool:
    """Every value a number (not null, not an unresolved ${...} default)."""
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


class PrepareMode(Choice):
    auto = "auto"  # reuse a dataset whose manifest matches the workload, else write it
    always = "always"
    never = "never"  # a missing or different dataset is an error


class ReadMode(Choice):
    whole_file = "whole_file"  # one request per file, read whole (in transfer_size pieces)
    sample = "sample"  # one request per sample: a seek and a read of one record


class Readers(Choice):
    """How one simulated accelerator's read_threads readers run (bench.iobench.reader_processes)."""

    auto = "auto"  # processes where the files are local (and the OS can fork), threads otherwise
    threads = "threads"  # threads of the accelerator's process, any store
    processes = "processes"  # forked processes, as DataLoader workers: local files only


PROCESSES_NEED = (
    "threads or auto unless the files are in a local directory (not s3, not direct_io) on an OS "
    "that can fork: a forked reader opens the files itself"
)


class Shuffle(Choice):
    none = "none"  # files and samples in order
    file = "file"  # file order shuffled per epoch (seeded)
    sample = "sample"  # file order shuffled, then samples through a shuffle buffer (shuffle_buffer)


class CheckpointWriters(Choice):
    one = "one"  # client 0 writes the whole checkpoint (DLIO 2.0.0)
    all = "all"  # every client writes its 1/N share at once; the slowest sets the time (MLPerf 2025+)


# The shuffle key took true/false before it took a mode: they still mean file / none.
_SHUFFLE_SPELLINGS = {"true": Shuffle.file, "false": Shuffle.none}

# Threads that wait on I/O may outnumber the cores, but past this a Python process spends its time
# switching between them (and a typo such as 40000 starts that many threads before any read).
MAX_THREADS = 1024
# The most one read call returns on Linux (2 GiB - 4 KiB): a larger transfer_size buys nothing, and
# its buffer is allocated whole.
MAX_TRANSFER_SIZE = 0x7FFFF000


@dataclass
class StorageWorkloadConfig(Checks):
    """What the storage benchmark (mode=storage) emulates, in MLPerf Storage / DLIO terms."""

    KEY = "storage.workload"
    name: str = "custom"  # a label for reports (the presets name their workload)
    num_files: int = positive(16)
    samples_per_file: int = positive(8)
    record_size: int = positive(65536)  # bytes per sample
    record_size_stdev: int = non_negative(0)  # per-file record sizes drawn from N(record_size, stdev)
    format: str = "raw"  # a name in bench.registries.FORMATS, or a Format of your own: mypkg.formats:MyFormat
    read_mode: ReadMode = ReadMode.whole_file
    transfer_size: Optional[int] = positive(None)  # bytes per read call into a reused buffer; null: one record
    jpeg_decode: bool = False  # format=jpeg: decode every image (simplejpeg), as a loader would
    # check every record read as its loader would (TFRecord's two CRC-32Cs, npz and hdf5 layouts, JPEG
    # markers); false: the lengths only, a read ceiling without the checks' CPU (not an MLPerf result)
    verify_records: bool = True
    batch_size: int = positive(4)  # samples per step of one simulated accelerator
    # readers per simulated accelerator (MLPerf's name: threads or processes, see readers)
    read_threads: int = positive(4)
    readers: Readers = Readers.auto
    prefetch: int = non_negative(2)  # batches read ahead of the emulated compute
    computation_time: float = non_negative(0.0)  # seconds of emulated compute per batch; 0 = the I/O ceiling
    epochs: int = positive(1)
    max_steps: Optional[int] = positive(None)  # stop each accelerator after this many steps
    # none | file | sample (true/false: the old spelling of file/none)
    shuffle: Union[bool, str] = "file"
    shuffle_buffer: Optional[int] = positive(None)  # shuffle=sample: samples in the buffer; null: the whole epoch
    seed: int = 0
    seed_change_epoch: bool = True  # a new order every epoch (false: every epoch reads in the first one's order)
    au_threshold: float = 0.9  # accelerator-utilization pass mark
    # evaluation: eval_num_files more files (eval/ under the dataset), read every eval_every_epochs epochs
    eval_num_files: int = non_negative(0)
    eval_batch_size: Optional[int] = positive(None)  # null: batch_size
    eval_computation_time: float = non_negative(0.0)
    eval_every_epochs: int = positive(1)
    # checkpoints: checkpoint_count writes (fsync'd), the page cache dropped, then as many reads
    checkpoint_size_mb: float = non_negative(16.0)  # the whole checkpoint; 0 skips the phase
    checkpoint_count: int = positive(1)
    checkpoint_writers: CheckpointWriters = CheckpointWriters.one
    checkpoint_every_steps: Optional[int] = positive(None)  # also write one every K steps of the read phase
    checkpoint_only: bool = False  # no dataset and no read phase: the checkpoint workload alone
    checkpoint_keep: bool = False  # leave the checkpoints on the store (false: each is deleted once read back)

    def rules(self) -> None:
        self.registered("format")
        self.between("au_threshold", 0, 1, "a fraction in (0, 1], e.g. 0.9 for 90%", "(]")
        if _number(self.read_threads) and self.read_threads > MAX_THREADS:
            self._fail("read_threads", f"an integer in [1, {MAX_THREADS}] (readers per simulated accelerator)")
        if _number(self.record_size_stdev, self.record_size) and self.record_size_stdev > self.record_size:
            self._fail(
                "record_size_stdev",
                f"an integer in [0, record_size={self.record_size}] (record sizes are drawn from "
                "N(record_size, stdev); a wider spread is mostly 1-byte records)",
            )
        if isinstance(self.transfer_size, int) and self.transfer_size > MAX_TRANSFER_SIZE:
            self._fail(
                "transfer_size",
                f"an integer in [1, {MAX_TRANSFER_SIZE}] or null (2 GiB - 4 KiB: the most one "
                "read call returns on Linux; null reads one record per call)",
            )
        if (shuffle := str(self.shuffle).lower()) not in [*_SHUFFLE_SPELLINGS, *Shuffle]:
            self._fail("shuffle", "one of none, file, sample (or true/false: file/none)")
        self.shuffle = Shuffle(_SHUFFLE_SPELLINGS.get(shuffle, shuffle)).value
        if self.format == "jpeg" and self.samples_per_file != 1:
            self._fail("samples_per_file", "1 with format=jpeg (one image per file)")
        if self.jpeg_decode and not self.verify_records:
            self._fail("jpeg_decode", "false with verify_records=false (decoding an image checks it)")
        if (self.checkpoint_only or self.checkpoint_every_steps) and not self.checkpoint_size_mb:
            self._fail("checkpoint_size_mb", "a size > 0 with checkpoint_only or checkpoint_every_steps")

    @property
    def shuffle_mode(self) -> Shuffle:
        return Shuffle(self.shuffle)

    def read_steps(self, samples: int) -> int:
        """The steps of a client reading `samples` samples an epoch: each epoch's batches (the last one
        short), every epoch, capped at max_steps."""
        steps = self.epochs * -(-samples // self.batch_size)
        return steps if self.max_steps is None else min(steps, self.max_steps)


@dataclass
class StorageBenchmarkConfig(Checks):
    """The storage benchmark's own keys under `storage` (the where is StorageLocation's)."""

    KEY = "storage"
    dataset_dir: str = "iobench-dataset"  # under root (local) or prefix (s3)
    prepare: PrepareMode = PrepareMode.auto
    prepare_workers: int = positive(4)
    accelerators: int = positive(1)  # simulated accelerators: one reader process each, on its own files
    workload: StorageWorkloadConfig = field(default_factory=StorageWorkloadConfig)
    # MLPerf's harness: warm-up runs, then `runs` measured runs (mean and spread; a new seed each run)
    runs: int = positive(1)
    warmup_runs: int = non_negative(0)
    # RAM per host (GB x 1024^3, as MLPerf counts) for the size rule; null: this machine's
    host_memory_gb: Optional[float] = positive(None)
    # Deprecated spelling of accelerators (it read like storage.client, the S3 library); kept one release.
    clients: Optional[int] = None

    def __post_init__(self) -> None:
        self.check_benchmark()

    def check_benchmark(self) -> None:
        self.renamed("clients", "accelerators", ": simulated accelerators; storage.client is the S3 library")
        self.check_ranges()
        if _number(self.prepare_workers) and self.prepare_workers > MAX_THREADS:
            self._fail("prepare_workers", f"an integer in [1, {MAX_THREADS}] (threads writing the dataset)")
        if not self.workload.checkpoint_only:
            self.check_clients(self.accelerators, "storage.accelerators")
        # a non-empty relative path that stays below the directory it is joined to
        parts = [p for p in self.dataset_dir.split("/") if p not in ("", ".")]
        if not parts or self.dataset_dir.startswith("/") or ".." in parts:
            self._fail(
                "dataset_dir",
                "a relative path inside storage.root (or the bucket's prefix), without '..': "
                "storage.root is the one key that chooses where",
            )

    def check_clients(self, clients: int, key: str) -> None:
        """Each of `clients` simulated accelerators (processes, or torch.distributed ranks) reads its
        own files, and its first step is warm-up: with a batch larger than what it reads, nothing
        would be measured and every figure would be empty."""
        workload = self.workload
        if clients > workload.num_files:
            raise ConfigError(
                key,
                clients,
                f"at most storage.workload.num_files={workload.num_files} "
                "(each simulated accelerator reads its own files)",
            )
        samples = (workload.num_files // clients) * workload.samples_per_file  # the smallest share
        if workload.batch_size > samples or workload.read_steps(samples) < 2:
            self.workload._fail(
                "batch_size",
                f"at most {samples // 2 if workload.epochs == 1 else samples} (each of the {clients} simulated "
                f"accelerators reads {samples} samples per epoch x {workload.epochs} epochs; its first step is "
                "warm-up, so it needs 2 steps or more to measure anything)",
            )


def changed_benchmark_keys(storage: StorageBenchmarkConfig) -> List[Tuple[str, Any]]:
    """(dotted key, value) of each storage benchmark key (`storage.runs`, `storage.workload.*`, ...)
    set away from the schema's default: what another mode would ignore unsaid."""
    own = [f.name for f in fields(StorageBenchmarkConfig) if f.name != "workload"]
    changed = changed_keys("storage", storage, StorageBenchmarkConfig(), own)
    return changed + changed_keys("storage.workload", storage.workload, StorageWorkloadConfig())


# Loose on purpose: AWS wants 3-63 lowercase characters, but some S3-compatible stores take
# other names; the server has the last word (and its refusal is one clear line too).
BUCKET_NAME = re.compile(r"^[^/\s]+$")


@dataclass
class StorageLocation(Checks):
    """Where data lives, and how the store is reached: a local directory or an S3 bucket."""

    KEY = "storage"
    name: str = "local"  # a backend in bench.registries.BACKENDS, or one of your own: mypkg.store:MyBackend
    # local: a directory (null: the run's output directory)
    root: Optional[str] = None
    save_checkpoint: bool = False  # training: write a checkpoint after the measured window
    checkpoint_name: str = "checkpoint.pt"
    fsync: bool = True
    # local reads bypass the page cache (O_DIRECT, or fadvise DONTNEED where O_DIRECT is refused)
    direct_io: bool = False
    # s3: null endpoint = AWS; http(s)://host:port for MinIO, Ceph, moto ...
    endpoint: Optional[str] = None
    bucket: Optional[str] = None
    prefix: str = ""
    region: str = "us-east-1"
    client: str = "obstore"  # an S3 client in bench.registries.S3_CLIENTS, or mypkg.s3:MyStore
    max_attempts: int = positive(5)  # tries per request (5xx, throttling, timeouts retried with backoff)
    timeout_s: float = positive(60.0)  # per request
    connect_timeout_s: float = positive(5.0)

    def rules(self) -> None:
        self.registered("name")
        self.registered("client")
        if not self.checkpoint_name or "/" in self.checkpoint_name or self.checkpoint_name in (".", ".."):
            self._fail("checkpoint_name", "a file name (no '/'): the checkpoint goes into storage.root")
        if self.name != "s3" or self.endpoint is None:
            return
        parsed = urlparse(self.endpoint)
        if parsed.username or parsed.password:
            # the config is logged to MLflow and saved in .hydra/: credentials come from AWS_* / the profile
            self._fail(
                "endpoint",
                "a URL without user:password (set AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or AWS_PROFILE instead)",
                "<hidden: it carries credentials>",
            )
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            self._fail("endpoint", "an http:// or https:// URL such as http://minio:9000, or null for AWS")

    def check_bucket(self) -> None:
        """storage=s3 with something to store (the storage benchmark, or checkpoints) needs a bucket."""
        if self.name != "s3":
            return
        if not BUCKET_NAME.match(self.bucket or ""):
            self._fail(
                "bucket",
                "a bucket name (no '/': put paths in storage.prefix) with storage=s3 "
                "(mode=storage or storage.save_checkpoint=true)",
            )
        self.check_s3_extra()

    def check_s3_extra(self) -> None:
        """The clients of the `s3` extra (an offline kit may leave them out): boto3 (its credential chain
        serves every client) and the one storage.client names; s3torchconnector says its own."""
        wanted = ["boto3"] + (["obstore"] if self.client == "obstore" else [])
        if missing := [name for name in wanted if not _installed(name)]:
            self._fail(
                "client",
                f"a client that is installed here: {' and '.join(missing)} missing, "
                "pip install 'bench[s3]' brings them (offline: a kit built with --extras s3)",
                str(self.client),
            )


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a module set to None in sys.modules
        return False


@dataclass
class StorageConfig(StorageBenchmarkConfig, StorageLocation):
    """The whole `storage` group: StorageLocation's keys first, then the benchmark's (as always)."""

    def __post_init__(self) -> None:
        self.check_benchmark()
        self.rules()
        if self.workload.readers == Readers.processes and (self.name == "s3" or self.direct_io):
            # the same sentence as bench.iobench.reader's, where a store is met that the config did not name
            raise ConfigError("storage.workload.readers", "processes", PROCESSES_NEED)
