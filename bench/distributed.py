"""The distributed group: who runs the training loop, and how per-rank results become one.

Three ways a run executes (bench.app picks):
- in process: distributed=single, or a 1-process ddp run outside a sweep;
- launched: the Hydra job starts its workers with torch.distributed's elastic launcher
  (c10d rendezvous, max_restarts=0) and reports what rank 0 hands back. Used for
  nproc_per_node x nnodes > 1 and for every job of a multirun, so each configuration runs
  in processes of its own;
- joined: under torchrun / Slurm / Kubernetes (RANK, WORLD_SIZE, LOCAL_RANK set) every
  process is a rank already; rank 0 reports.

A 1-process run never builds a process group or a DDP wrapper: it is the plain loop, the
baseline that scaling efficiency divides by.
"""

from __future__ import annotations

import datetime
import logging
import multiprocessing
import os
import socket
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

from torch.distributed.elastic.multiprocessing.errors import record  # a worker's exception reaches the launcher

log = logging.getLogger("bench")

EXIT_HUNG = 124  # a rank whose steps stopped (the exit code `timeout` uses)
RANK_LOG_FORMAT = "[%(asctime)s][rank{rank}][%(name)s][%(levelname)s] %(message)s"


@dataclass(frozen=True)
class RankContext:
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1

    @property
    def is_reporter(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def outside_launcher_context(cfg: Mapping[str, Any]) -> Optional[RankContext]:
    """The rank of this process when an outside launcher (torchrun, srun) started it."""
    if cfg["distributed"]["name"] != "ddp":
        return None
    if not all(k in os.environ for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK")):
        return None
    return RankContext(int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"]))


def world_size(cfg: Mapping[str, Any]) -> int:
    return cfg["distributed"]["nproc_per_node"] * cfg["distributed"]["nnodes"]


def per_rank_batch_size(cfg: Mapping[str, Any], world: int) -> int:
    """weak scaling: data.batch_size per process; strong: data.batch_size split over the ranks."""
    batch = cfg["data"]["batch_size"]
    return batch // world if cfg["distributed"]["scaling"] == "strong" else batch


def resolve_backend(requested: str, device_type: str) -> str:
    if requested != "auto":
        return requested
    return "nccl" if device_type == "cuda" else "gloo"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ---- workers ------------------------------------------------------------------------------


def setup_rank_logging(out_dir: Path, rank: int, own_process: bool = True) -> None:
    """Every rank logs to <job dir>/rank<N>.log; rank 0 also to stderr. A worker's stdout is
    pointed at stderr so the job's stdout keeps only the final line. `own_process=False`: this
    process also reports (rank 0 under torchrun): keep its streams and Hydra's handlers."""
    out_dir.mkdir(parents=True, exist_ok=True)
    formatter = logging.Formatter(RANK_LOG_FORMAT.format(rank=rank))
    root = logging.getLogger()
    handlers: List[logging.Handler] = [logging.FileHandler(out_dir / f"rank{rank}.log")]
    if own_process:
        os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
        for handler in list(root.handlers):
            root.removeHandler(handler)
        if rank == 0:
            handlers.append(logging.StreamHandler(sys.stderr))
    for handler in handlers:
        handler.setFormatter(formatter)
        root.addHandler(handler)
    root.setLevel(logging.INFO)
    for noisy in ("mlflow", "urllib3", "alembic", "matplotlib"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def init_process_group(cfg: Mapping[str, Any], ctx: RankContext, device: Any) -> None:
    import torch.distributed as dist

    backend = resolve_backend(cfg["distributed"]["backend"], device.type)
    timeout = datetime.timedelta(seconds=float(cfg["distributed"]["timeout_s"]))
    kwargs: Dict[str, Any] = {"device_id": device} if device.type == "cuda" else {}
    dist.init_process_group(backend=backend, rank=ctx.rank, world_size=ctx.world_size, timeout=timeout, **kwargs)
    log.info("rank %d/%d (pid %d) joined the process group (%s, timeout %ss)", ctx.rank, ctx.world_size,
             os.getpid(), backend, cfg["distributed"]["timeout_s"])


def destroy_process_group() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


class StepWatchdog:
    """Ends this rank when no training step has finished for `timeout_s`.

    A peer that died or hung leaves the others blocked inside an all-reduce, and not every
    backend honours its timeout there (gloo inside DDP's backward does not); a rank that
    exits is something the launcher sees, and it then stops the rest. Armed at the first
    step, so model building and data start-up are not counted.
    """

    def __init__(self, timeout_s: float, rank: int):
        import threading

        self.timeout_s, self.rank = float(timeout_s), rank
        self._last: Optional[float] = None
        self._thread = threading.Thread(target=self._watch, name="bench-step-watchdog", daemon=True)
        self._thread.start()

    def beat(self) -> None:
        self._last = time.monotonic()

    def _watch(self) -> None:
        while True:
            time.sleep(min(1.0, self.timeout_s / 4))
            if self._last is not None and time.monotonic() - self._last > self.timeout_s:
                log.error("rank %d: no training step finished for %.0f s (distributed.timeout_s): a peer died or hung; "
                          "ending this rank", self.rank, self.timeout_s)
                logging.shutdown()
                os._exit(EXIT_HUNG)


def run_rank(cfg: Dict[str, Any], ctx: RankContext, out_dir: Path,
             watchdog: bool = False) -> Optional[Dict[str, Any]]:
    """Train as one rank; rank 0 returns {"result": TrainResult, "ranks": [...]}, others None.
    `watchdog`: end this process if steps stop for distributed.timeout_s (launched workers)."""
    from bench.device import resolve_device
    from bench.trainer import train

    device = resolve_device(cfg["allow_cpu"])
    if device.type == "cpu" and not cfg.get("cpu_threads") and ctx.world_size > 1:
        # CPU ranks share the cores: without this each would start one thread per core and
        # oversubscribe (torchrun sets OMP_NUM_THREADS=1 for the same reason).
        cfg = dict(cfg, cpu_threads=max(1, (os.cpu_count() or 1) // cfg["distributed"]["nproc_per_node"]))
    if ctx.distributed:
        init_process_group(cfg, ctx, device)
    try:
        on_step = StepWatchdog(cfg["distributed"]["timeout_s"], ctx.rank).beat if watchdog else None
        result = train(cfg, device, monitor=_monitor(device, ctx), on_finish=_checkpoint_writer(cfg, out_dir, ctx),
                       ctx=ctx, on_step=on_step)
        ranks = gather_rank_summaries(result, ctx)
    finally:
        destroy_process_group()
    return {"result": result, "ranks": ranks} if ctx.is_reporter else None


def _monitor(device: Any, ctx: RankContext) -> Any:
    if device.type != "cuda" or not ctx.is_reporter:
        return None
    from bench.gpu_monitor import GpuMonitor

    return GpuMonitor(device.index or 0)


def _checkpoint_writer(cfg: Mapping[str, Any], out_dir: Path, ctx: RankContext) -> Any:
    """Rank 0 writes the checkpoint after the measured window (all ranks hold the same weights)."""
    if not cfg["storage"]["save_checkpoint"] or not ctx.is_reporter:
        return None
    from bench.storage import build_storage

    storage = build_storage(cfg["storage"], out_dir)

    def write(model: Any, optimizer: Any) -> Dict[str, Any]:
        state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
        return storage.save_checkpoint(state, cfg["storage"]["checkpoint_name"])

    return write


def gather_rank_summaries(result: Any, ctx: RankContext) -> List[Dict[str, Any]]:
    """Every rank's timing, collected on all ranks (one all_gather_object, after the window)."""
    mine = {
        "rank": ctx.rank,
        "host": socket.gethostname(),
        "images": result.images,
        "window_seconds": result.window_seconds,
        "step_times_ms": result.step_times_ms,
        "data_wait_ms": result.data_wait_ms,
        "peak_memory_bytes": result.peak_memory_bytes,
        "param_checksum": result.param_checksum,
    }
    if not ctx.distributed:
        return [mine]
    import torch.distributed as dist

    gathered: List[Any] = [None] * ctx.world_size
    dist.all_gather_object(gathered, mine)
    return gathered


@record
def worker_entry(cfg: Dict[str, Any], out_dir: str) -> Optional[Dict[str, Any]]:
    """What each launched worker process runs (module level: the spawn start method pickles it)."""
    ctx = RankContext(int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"]))
    setup_rank_logging(Path(out_dir), ctx.rank)
    log.info("worker for rank %d/%d started (pid %d)", ctx.rank, ctx.world_size, os.getpid())
    # lets the launcher name a rank that died without a word (SIGKILL, the OOM killer)
    pid_file = Path(out_dir) / "workers" / f"rank{ctx.rank}.pid"
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    pid_file.write_text(f"{os.getpid()} {ctx.local_rank}")
    return run_rank(cfg, ctx, Path(out_dir), watchdog=True)


# ---- the launcher ---------------------------------------------------------------------------


class WorkerFailure(RuntimeError):
    """A launched worker died, hung past the timeout, or raised; str() names the rank and why."""


def launch(cfg: Dict[str, Any], out_dir: Path) -> Optional[Dict[str, Any]]:
    """Start nproc_per_node workers on this node (elastic launch, c10d rendezvous, no restarts)
    and return what rank 0 hands back (None on a node that does not hold rank 0)."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    dist_cfg = cfg["distributed"]
    endpoint = dist_cfg["rdzv_endpoint"] or f"127.0.0.1:{free_port()}"
    rdzv_configs: Dict[str, Any] = {"timeout": int(dist_cfg["timeout_s"])}
    backend = "c10d"
    if dist_cfg["nnodes"] > 1:
        # static rendezvous: node_rank fixes the global ranks, so rank 0 (the reporter) is on
        # node 0, whose agent hosts the store at rdzv_endpoint
        backend = "static"
        rdzv_configs["rank"] = dist_cfg["node_rank"]
    config = LaunchConfig(
        min_nodes=dist_cfg["nnodes"],
        max_nodes=dist_cfg["nnodes"],
        nproc_per_node=dist_cfg["nproc_per_node"],
        # every node of one run must name the same run: derived from the shared endpoint
        run_id=f"bench-{endpoint.replace(':', '-')}" if dist_cfg["nnodes"] > 1 else f"bench-{uuid.uuid4().hex[:12]}",
        rdzv_backend=backend,
        rdzv_endpoint=endpoint,
        rdzv_configs=rdzv_configs,
        max_restarts=0,
        monitor_interval=0.2,
        start_method="forkserver",
        shutdown_timeout=5,  # seconds between SIGTERM and SIGKILL for the survivors of a failed rank
        logs_specs=DefaultLogsSpecs(log_dir=str(out_dir / "workers")),
    )
    # The elastic agent logs its launch config and every failure at length; we report a failure in one line.
    logging.getLogger("torch.distributed.elastic").setLevel(logging.CRITICAL)
    logging.getLogger("torch.multiprocessing").setLevel(logging.ERROR)
    # Workers fork from one server process that has torch imported already: a job's workers
    # start in well under a second instead of paying torch's import each (spawn). The server
    # is a fresh interpreter, so forking from it is safe with CUDA; later sweep jobs reuse it.
    multiprocessing.set_forkserver_preload(["torch", "torchvision", "bench.trainer", "bench.distributed"])
    reaper = SurvivorReaper(dist_cfg["nproc_per_node"], out_dir / "workers")
    try:
        returns = elastic_launch(config, worker_entry)(cfg, str(out_dir))
    except ChildFailedError as exc:
        reaper.stop()
        raise WorkerFailure(describe_failure(exc, first_to_die(reaper.first_gone, out_dir / "workers"))) from None
    finally:
        reaper.stop()
    return returns.get(0)


def first_to_die(pids: List[int], workers_dir: Path) -> Optional[tuple]:
    """(rank, pid) of the worker that ended first without an error of its own, if any.

    `pids` are the workers the reaper saw gone at its first sighting of a death (several when
    they went within one poll); a rank that raised left an error.json (torch's @record), a
    rank killed by a signal left none, and that one is the root cause."""
    for pid_file in sorted(workers_dir.glob("rank*.pid"), key=lambda p: int(p.stem[len("rank"):])):
        pid, local_rank = pid_file.read_text().split()
        if int(pid) in pids and not list(workers_dir.glob(f"*/attempt_*/{local_rank}/error.json")):
            return int(pid_file.stem[len("rank"):]), int(pid)
    return None


class SurvivorReaper:
    """Once one worker has ended, SIGKILL the ones still there after a short grace period.

    The elastic launcher gives survivors 30 s after SIGTERM, and a stopped (or wedged)
    process never acts on SIGTERM: without this a failed job could outlive its timeout.
    Workers are known by the pid files they write (workers/rank<N>.pid), never by scanning
    processes: a short-lived helper process must not count as a worker that ended.
    """

    GRACE_S = 2.0

    def __init__(self, expected: int, workers_dir: Path):
        import threading

        self.expected, self.workers_dir = expected, workers_dir
        self.started = time.time()
        self.first_gone: List[int] = []  # pids of the first worker(s) seen to end
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="bench-reaper", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _watch(self) -> None:
        import psutil

        workers: Dict[int, Any] = {}  # pid -> psutil.Process, or None when it was gone at first sight
        first_exit: Optional[float] = None
        # Polled often: which worker ends first tells the root cause from the ranks that failed
        # because of it (the launcher reports only one failure, often a peer's).
        while not self._stop.wait(0.05):
            for pid in _fresh_worker_pids(self.workers_dir, self.started):
                if pid not in workers:
                    try:
                        workers[pid] = psutil.Process(pid)
                    except psutil.Error:
                        workers[pid] = None
            alive = [w for w in workers.values() if w is not None and _running(w)]
            gone = [pid for pid, w in workers.items() if w is None or w not in alive]
            if gone and not self.first_gone:
                self.first_gone = gone
            if len(workers) < self.expected or not gone:
                continue
            first_exit = first_exit or time.monotonic()
            if alive and time.monotonic() - first_exit > self.GRACE_S:
                for worker in alive:
                    log.warning("a worker ended; killing pid %d, still running after %.0f s", worker.pid, self.GRACE_S)
                    try:
                        worker.kill()
                    except psutil.Error:
                        pass


def _fresh_worker_pids(workers_dir: Path, since: float) -> List[int]:
    """Pids from this launch's pid files (older files are from an earlier run in the same dir)."""
    pids = []
    for pid_file in workers_dir.glob("rank*.pid"):
        try:
            if pid_file.stat().st_mtime >= since - 1.0:
                pids.append(int(pid_file.read_text().split()[0]))
        except (OSError, ValueError, IndexError):
            pass  # being written right now: read on the next poll
    return pids


def _running(process: Any) -> bool:
    import psutil

    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def describe_failure(exc: Any, first: Optional[tuple] = None) -> str:
    """One line from a ChildFailedError: the rank that failed first, its exit code or signal, its
    error. `first` is (rank, pid) of the worker seen to end first, if the launcher blamed another."""
    rank, failure = min(exc.failures.items(), key=lambda item: (item[1].exitcode >= 0, item[1].timestamp, item[0]))
    if first is not None and first[0] != rank and failure.exitcode >= 0 and failure.exitcode != EXIT_HUNG:
        return (f"worker rank {first[0]} (pid {first[1]}) died first, without an error of its own (killed by a "
                f"signal such as SIGKILL, or by the OOM killer); rank {rank} then failed: {_failure_detail(failure)}")
    if failure.exitcode == EXIT_HUNG:
        return f"worker rank {rank} (pid {failure.pid}) saw no training step finish for distributed.timeout_s: a rank died or hung"
    if failure.exitcode < 0:
        import signal

        try:
            name = signal.Signals(-failure.exitcode).name
        except ValueError:
            name = f"signal {-failure.exitcode}"
        return f"worker rank {rank} (pid {failure.pid}) was killed by {name}"
    return f"worker rank {rank} (pid {failure.pid}) exited with code {failure.exitcode}: {_failure_detail(failure)}"


def _failure_detail(failure: Any) -> str:
    message = failure.message
    if isinstance(message, dict):
        message = message.get("message", "")
    lines = str(message or "").strip().splitlines()
    detail = lines[0] if lines else "no error message"
    return "see its log in the job dir" if detail.startswith("Process failed with exitcode") else detail
