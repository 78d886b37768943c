"""Fit to measure: was the machine quiet enough, before and during the measured window, for the
window's figures to be trusted? Torch-free and config-free (bench.runtime.scenario ties it to a run).

What makes a run unfit (a reason, with its figure; docs/measurement.md lists them):
- other processes (outside the run's own process tree) used more than OUTSIDE_CPU_LIMIT of the
  usable cores during the window: system busy CPU time on the usable CPUs (/proc/stat) minus the
  run tree's CPU time. Both are counted in clock ticks, so a short window judges to a slack of a
  few ticks per CPU and per process, which is taken off before the limit is applied;
- oversubscription: torch threads x ranks on this host + loader workers above the usable cores
  (the CPUs this process may run on, capped by the cgroup CPU quota);
- swap-in during the window;
- the run stopped during the window (SIGSTOP, Ctrl-Z): a sample PAUSE_S late, the run's tree idle meanwhile;
- the GPU checks of bench.machine.gpu_monitor.
Reported, but not unfit by themselves (notes): the load average at the start (it looks back a
minute, the window's own CPU count is the judge), a frequency governor other than performance,
CPUs below SLOW_CLOCK of their max frequency at the window's end.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import psutil

from bench.maths.stats import on_its_side

OUTSIDE_CPU_LIMIT = 0.10  # share of the usable cores other processes may use during the window
SAMPLE_INTERVAL_S = 0.25  # how often the run's tree (and the GPU) is sampled during the window
PAUSE_S = 1.0  # a sample this late, the tree using under a tenth of a core meanwhile: the run was stopped
TICK_S = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01
ROOT_ENV = "BENCH_RUN_ROOT_PID"  # the process that launched the ranks (set in each elastic worker)
VERDICT, REASONS, NOTES = "fit_to_measure", "fit_reasons", "fit_notes"  # the record's fields (and figures fit_*)


@dataclass
class Verdict:
    reasons: List[str] = field(default_factory=list)  # each makes the run unfit
    notes: List[str] = field(default_factory=list)  # reported, not judged
    figures: Dict[str, Any] = field(default_factory=dict)  # fit_* figures of the record

    @property
    def fit(self) -> bool:
        return not self.reasons

    def add(self, other: "Verdict") -> "Verdict":
        self.reasons += [r for r in other.reasons if r not in self.reasons]
        self.notes += [n for n in other.notes if n not in self.notes]
        self.figures = {**other.figures, **self.figures}
        return self

    def as_dict(self) -> Dict[str, Any]:
        """The record's fit_* fields (plain data: it crosses process boundaries)."""
        return {VERDICT: self.fit, REASONS: "; ".join(self.reasons), NOTES: "; ".join(self.notes), **self.figures}

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "Verdict":
        split = lambda text: [s for s in (text or "").split("; ") if s]  # noqa: E731
        figures = {k: v for k, v in data.items() if k not in (VERDICT, REASONS, NOTES)}
        return cls(split(data.get(REASONS)), split(data.get(NOTES)), figures)


def unfit_reason(row: Mapping[str, Any]) -> Optional[str]:
    """Why a result (a record's dict, a sweep frame's row; MLflow gives the verdict back as 0/1) was not
    fit to measure; None when it was, or when it holds no verdict (recorded before there was one)."""
    value = row.get(VERDICT)
    if value is None or value != value or str(value).lower() in ("", "true", "1", "1.0"):  # value != value: NaN
        return None
    reasons = row.get(REASONS)
    return str(reasons) if isinstance(reasons, str) and reasons else "no reason recorded"


# ---- What this machine's CPUs give a run, read from Linux without torch: the CPUs this process may use
# (affinity) capped by the cgroup CPU quota, whether a run's threads and workers oversubscribe them, and
# the frequency governor and clocks (cpufreq). The watch below judges with them.
CGROUP = Path("/sys/fs/cgroup")
CPUFREQ = Path("/sys/devices/system/cpu")
SLOW_CLOCK = 0.80  # a CPU clock below this share of its max is noted


def affinity() -> List[int]:
    """The CPUs this process may run on."""
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))


def cgroup_quota(root: Path = CGROUP) -> Optional[float]:
    """The cgroup's CPU quota in cores (v2 cpu.max, else v1 cfs_quota_us / cfs_period_us); None: no quota."""
    with contextlib.suppress(OSError, ValueError):
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    for group in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
        with contextlib.suppress(OSError, ValueError):  # not this group's folder: the next
            quota_us = int((root / group / "cpu.cfs_quota_us").read_text())
            period_us = int((root / group / "cpu.cfs_period_us").read_text())
            return quota_us / period_us if quota_us > 0 and period_us > 0 else None
    return None


def usable_cores(cpus: Sequence[int], root: Path = CGROUP) -> float:
    quota = cgroup_quota(root)
    return min(float(len(cpus)), quota) if quota else float(len(cpus))


LOADER_SHARE = 4  # a CPU run's default split gives the loader one core in four (at least one, at most 8)


def cpu_split(
    usable: float, ranks: int, threads: Optional[int], workers: Optional[int], reads_files: bool
) -> Tuple[int, int]:
    """(torch threads, loader workers) per rank for a run on the CPU whose threads x ranks + workers
    x ranks fit the usable cores: what the user set is kept, what is unset (None) takes what fits
    beside it. Each rank's share is its whole cores; with both unset a quarter of it loads the data
    and the rest computes, and a one-core share loads in the main process (0 workers: the loader
    then runs between the steps, on the compute thread's core). Synthetic data has no workers."""
    share = max(1, int(usable // max(1, ranks)))
    if not reads_files:
        return (threads or share), 0
    if workers is None:
        loader = max(1, share // LOADER_SHARE) if share > 1 else 0
        room = share - (threads or 1)  # what is left once the compute has its threads (at least one)
        workers = max(0, min(8, loader, room))
    return (threads or max(1, share - workers)), workers


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def oversubscription(
    threads: int, ranks: int, workers: int, usable: float, thread_word: str = "torch thread"
) -> Tuple[int, Optional[str]]:
    """(threads x ranks + loader workers on this host, the reason when that is above the usable cores)."""
    demand = threads * ranks + workers * ranks
    if demand <= usable:
        return demand, None
    text = f"{_plural(threads, thread_word)} x {_plural(ranks, 'rank')}"
    if workers:
        text += f" + {_plural(workers, 'loader worker')}" + (f" x {_plural(ranks, 'rank')}" if ranks > 1 else "")
    return demand, f"{text} = {demand} > {usable:g} usable cores"


def _read(path: Path) -> Optional[str]:
    with contextlib.suppress(OSError):
        return path.read_text().strip()
    return None


def cpufreq_notes(cpus: Sequence[int], base: Path = CPUFREQ) -> List[str]:
    """The frequency governor and the clock against its max, where the kernel shows them (not in most VMs)."""
    governors: Dict[str, int] = {}
    current, top = [], []
    for cpu in cpus:
        folder = base / f"cpu{cpu}" / "cpufreq"
        if governor := _read(folder / "scaling_governor"):
            governors[governor] = governors.get(governor, 0) + 1
        cur, most = _read(folder / "scaling_cur_freq"), _read(folder / "cpuinfo_max_freq")
        if cur and most and cur.isdigit() and most.isdigit() and int(most) > 0:
            current.append(int(cur))
            top.append(int(most))
    notes = [
        f"CPU frequency governor {name} on {count} of {len(cpus)} usable CPUs (performance holds the clock)"
        for name, count in sorted(governors.items())
        if name != "performance"
    ]
    if current and sum(current) / sum(top) < SLOW_CLOCK:
        notes.append(
            f"CPUs at {sum(current) / len(current) / 1e6:.2f} of {sum(top) / len(top) / 1e6:.2f} GHz max "
            f"({share_under(sum(current) / sum(top), SLOW_CLOCK)}) at the window's end"
        )
    return notes


def share_under(share: float, threshold: float) -> str:
    """A share noted ("43%, under 80%") for being under a threshold, printed on its side of it (79.96%
    is not "80%")."""
    return f"{on_its_side(share * 100, threshold * 100, 0)}%, under {threshold * 100:g}%"


def root_pid() -> int:
    """The process that launched the ranks: the run's tree is it and everything under it."""
    if os.environ.get(ROOT_ENV, "").isdigit():
        return int(os.environ[ROOT_ENV])
    if "TORCHELASTIC_RUN_ID" in os.environ:  # torchrun's agent started this rank and its siblings
        return os.getppid()
    return os.getpid()


def busy_seconds(cpus: Sequence[int]) -> float:
    """CPU seconds the usable CPUs spent busy since boot (everything but idle and iowait), every process's."""
    per_cpu = psutil.cpu_times(percpu=True)
    chosen = [per_cpu[c] for c in cpus] if cpus and max(cpus) < len(per_cpu) else per_cpu
    return sum(
        t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0) + getattr(t, "steal", 0.0)
        for t in chosen
    )


class TreeClock:
    """CPU seconds the run's process tree used since the first sample: each process's first and
    last reading (one that starts later counts from 0; one that ends loses at most one interval)."""

    def __init__(self, root: int):
        self.root = root
        self.first: Dict[Tuple[int, float], float] = {}
        self.last: Dict[Tuple[int, float], float] = {}
        self.pids: set = set()

    def sample(self) -> None:
        try:
            top = psutil.Process(self.root)
            processes = [top, *top.children(recursive=True)]
        except psutil.Error:
            return
        starting = not self.last
        for process in processes:
            with contextlib.suppress(psutil.Error), process.oneshot():  # one gone meanwhile is left out
                times, key = process.cpu_times(), (process.pid, process.create_time())
                seconds = times.user + times.system
                self.first.setdefault(key, seconds if starting else 0.0)
                self.last[key] = seconds
                self.pids.add(process.pid)

    def seconds(self) -> float:
        return sum(last - self.first.get(key, 0.0) for key, last in self.last.items())


def cpu_seconds_with_children() -> float:
    """CPU time of this process and its live children (the loader's workers); clock-tick
    resolution (10 ms), so it needs a few hundred milliseconds of work to mean anything."""
    tree = TreeClock(os.getpid())
    tree.sample()
    return sum(tree.last.values())


def outside_cpu_reason(other: float, slack: float, usable: float) -> Optional[str]:
    """Why a window was unfit for other processes' CPU, or None: `other` cores used outside the run, judged
    against OUTSIDE_CPU_LIMIT of the usable cores plus `slack` (/proc's whole ticks). Both figures print so
    that the sentence bears its verdict out (12.90 of 128 cores beside "limit 13" read as under it)."""
    limit = OUTSIDE_CPU_LIMIT * usable
    if other - slack <= limit:
        return None
    used = on_its_side(other, limit, 2)
    return f"other processes used {used} of {usable:g} usable cores during the window (limit {limit:g})"


class MachineWatch:
    """start() before the window, stop() -> Verdict after it; `gpu` (gpu_monitor.GpuWatch) is sampled alongside."""

    def __init__(self, demand: Optional[Tuple[int, int, int, str]] = None, gpu: Any = None, cpu: bool = True):
        self.root = root_pid()
        # cpu=False: the GPU's checks only (a rank other than 0: rank 0 judges the CPU); demand: (threads,
        # ranks on this host, loader workers per rank, what a thread is)
        self.cpu, self.demand, self.gpu = cpu, demand, gpu
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> "MachineWatch":
        self.cpus = affinity()
        self.usable = usable_cores(self.cpus)
        self.load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        self.swap_in = psutil.swap_memory().sin
        self.tree = TreeClock(self.root)
        self.tree.sample()
        self.busy, self.started = busy_seconds(self.cpus), time.monotonic()
        self.last, self.used, self.paused = self.started, self.tree.seconds(), 0.0
        if self.gpu is not None:
            self.gpu.start(self.tree.pids)
        self._thread = threading.Thread(target=self._run, name="fit-watch", daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        self.tree.sample()
        now, used = time.monotonic(), self.tree.seconds()
        if now - self.last > PAUSE_S and used - self.used < 0.1 * (now - self.last):
            self.paused += now - self.last - SAMPLE_INTERVAL_S
        self.last, self.used = now, used

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_INTERVAL_S):
            self._sample()
            if self.gpu is not None:
                self.gpu.sample()

    def stop(self) -> Verdict:
        self._stop.set()
        if self._thread is not None:
            with contextlib.suppress(RuntimeError):  # a Ctrl-C inside start(): the thread ends at its first wait
                self._thread.join()
        self._sample()
        busy, seconds = busy_seconds(self.cpus), max(time.monotonic() - self.started, 1e-9)
        other = max(0.0, busy - self.busy - self.tree.seconds()) / seconds
        # /proc counts whole ticks: each CPU's and each process's reading is off by up to one
        slack = TICK_S * (len(self.cpus) + 2 * max(1, len(self.tree.last))) / seconds
        swapped = max(0, psutil.swap_memory().sin - self.swap_in)
        gpu = self.gpu.stop() if self.gpu is not None else Verdict()
        if not self.cpu:
            return gpu
        verdict = Verdict(
            figures={
                "fit_other_cpu_cores": round(other, 3),
                "fit_usable_cores": self.usable,
                "fit_swap_in_mb": round(swapped / 2**20, 3),
            }
        )
        verdict.reasons += [reason] if (reason := outside_cpu_reason(other, slack, self.usable)) else []
        if self.demand is not None:
            threads, ranks, workers, word = self.demand
            cpu_demand, reason = oversubscription(threads, ranks, workers, self.usable, word)
            verdict.figures.update(fit_cpu_demand=cpu_demand)
            verdict.reasons += [reason] if reason else []
        if swapped:
            verdict.reasons.append(f"the machine swapped in {swapped / 2**20:.1f} MiB during the window")
        if self.paused:
            verdict.reasons.append(f"the run was stopped for {self.paused:.1f} s during the window (SIGSTOP, Ctrl-Z)")
        if self.load is not None:
            verdict.figures.update(fit_load_average=round(self.load, 2))
            if self.load > self.usable:
                load = on_its_side(self.load, self.usable, 2)
                verdict.notes.append(f"load average {load} at the start > {self.usable:g} usable cores")
        verdict.notes += cpufreq_notes(self.cpus)
        return verdict.add(gpu)


def wait_until_quiet(wait_s: float, probe_s: float = 1.0) -> Verdict:
    """Probe until the machine is fit or `wait_s` is spent (each probe: `probe_s` of this machine with
    nothing measured); the last probe's verdict."""
    deadline = time.monotonic() + wait_s
    while True:
        watch = MachineWatch().start()
        time.sleep(probe_s)  # the interval observed, not a wait for an event
        verdict = watch.stop()
        if verdict.fit or time.monotonic() + probe_s > deadline:
            return verdict
