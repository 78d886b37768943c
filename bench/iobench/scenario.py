"""The storage benchmark (mode=storage): MLPerf-Storage-style emulation of training I/O.

Phases, each in its own module: prepare (write the dataset, or reuse it), read (simulated
accelerators: reader threads + emulated compute; processes of this run on one host, or
torch.distributed ranks across hosts), checkpoint (torch.save to the store and back, per
client). No model runs and no GPU is needed: the accelerators are emulated. storage.runs and
storage.warmup_runs repeat the read and checkpoint phases as MLPerf's harness does.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Callable, Optional

from bench.config import BenchConfig
from bench.config.distributed import DistributedName
from bench.config.storage import ReadMode, StorageName
from bench.iobench.report import StorageReport

log = logging.getLogger(__name__)


def clients_of(config: BenchConfig) -> int:
    """Simulated accelerators: the ranks with distributed=ddp (WORLD_SIZE under torchrun, srun,
    Kubernetes), else storage.accelerators processes on this host."""
    if config.distributed.name == DistributedName.ddp:
        return int(os.environ.get("WORLD_SIZE") or config.distributed.world_size)
    return config.storage.accelerators


class StorageScenario:
    preload = ()
    report_class = StorageReport

    def has_ranks(self, config: BenchConfig) -> bool:
        """With distributed=ddp the simulated accelerators are ranks started by a launcher;
        otherwise this process runs the benchmark and starts accelerator processes of its own."""
        return config.distributed.name == DistributedName.ddp

    def preflight(self, config: BenchConfig) -> None:
        """What the schema cannot know: how many clients the launcher brings, the machine's
        memory, the size an MLPerf result needs (a hint). The store is checked when opened."""
        import psutil

        from bench.errors import ConfigError
        from bench.iobench.qualify import dataset_size, host_memory

        storage, workload = config.storage, config.storage.workload
        clients = clients_of(config)
        if self.has_ranks(config):
            if storage.accelerators != 1:
                raise ConfigError("storage.accelerators", storage.accelerators,
                                  "1 with distributed=ddp: each rank is one simulated accelerator "
                                  "(distributed.nproc_per_node per host x distributed.nnodes hosts)")
            if config.distributed.nnodes > 1 and storage.name == StorageName.local and storage.root is None:
                raise ConfigError("storage.root", None, "a directory every host sees (a shared file system), or "
                                                        "storage=s3, with several hosts")
            if not workload.checkpoint_only:
                storage.check_clients(clients, "distributed.nproc_per_node")
        largest = workload.record_size + 3 * workload.record_size_stdev
        read = largest if workload.read_mode == ReadMode.sample else largest * workload.samples_per_file
        held = read * workload.read_threads * (storage.accelerators if not self.has_ranks(config) else 1)
        ram = psutil.virtual_memory().total
        if held > ram and not workload.checkpoint_only:
            raise ConfigError("storage.workload.record_size", workload.record_size,
                              f"records whose files fit in memory: each reader thread reads a whole "
                              f"{'record' if workload.read_mode == ReadMode.sample else 'file'} into a buffer of its "
                              f"own, {held / 2**30:.1f} GiB in all, and this machine has {ram / 2**30:.1f} GiB "
                              "(lower record_size, samples_per_file or read_threads)")
        hosts = config.distributed.nnodes if self.has_ranks(config) else 1
        size = dataset_size(storage, clients, hosts, host_memory(storage))
        if not workload.checkpoint_only and workload.num_files < size.min_files:
            log.warning("storage.workload.num_files=%d is below MLPerf's dataset size for %d host(s): %s "
                        "(python -m bench.tools.storage_size prints it for other hosts)", workload.num_files, hosts,
                        size.explain(hosts, host_memory(storage), clients))

    def run_name(self, config: BenchConfig) -> str:
        storage = config.storage
        return f"storage-{storage.workload.name}-{storage.name}-c{clients_of(config)}"

    def run_rank(self, config: BenchConfig, ctx: Any, out_dir: Path,
                 heartbeat: Optional[Callable[[], None]] = None) -> Optional[StorageReport]:
        """Prepare, read and checkpoint phases, runs times."""
        if ctx.distributed:
            from bench.iobench.ranks import run_as_rank

            return run_as_rank(config, ctx, out_dir, heartbeat)
        from bench.iobench.accelerators import run_accelerators
        from bench.iobench.prepare import Prepared, prepare_dataset
        from bench.iobench.session import build_report, drop_dataset_cache, jobs_for, measure
        from bench.storage.registry import backend

        storage, workload = config.storage, config.storage.workload
        where = backend(storage)
        dataset = where.location(out_dir, storage.dataset_dir)
        store = where.open(dataset)  # S3: one LIST, so a bad bucket/endpoint/credential fails here
        prepared = Prepared([], skipped=True, reason="storage.workload.checkpoint_only: no dataset") \
            if workload.checkpoint_only else prepare_dataset(store, workload, storage.prepare, storage.prepare_workers)
        log.info("read: %d files, %d simulated accelerators x %d reader threads, batch %d, computation_time %gs",
                 len(prepared.files), storage.accelerators, workload.read_threads, workload.batch_size,
                 workload.computation_time)
        keys = [f.key for f in prepared.files + prepared.eval_files]
        per_run, results = measure(
            config, lambda run: run_accelerators(storage, jobs_for(config, prepared, dataset, str(out_dir),
                                                                   storage.accelerators, run)),
            lambda run: drop_dataset_cache(store, keys, run))
        return build_report(config, prepared, store.url, where.describe(store), per_run, results,
                            storage.accelerators, 1)

    def report(self, outcome: StorageReport, config: BenchConfig) -> StorageReport:
        return outcome

    def explain(self, exc: BaseException, config: BenchConfig) -> Optional[str]:
        return None
