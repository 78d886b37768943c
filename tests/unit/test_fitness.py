"""Fit to measure in-process (bench.machine.fitness, .fitness_gpu, .fit_watch): the oversubscription
sentence, the cgroup quota and cpufreq readers on real files, the verdict's round trip through a
record and its ranks, require_fit's failed run, and every NVML branch against a mocked NVML (no GPU
here: those tests say mocked_nvml in their names). The real CPU hog beside a real run is in
tests/e2e/test_fit_to_measure.py."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import fields
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, List

import pytest
import yaml

from bench.machine.fitness import (
    MachineWatch,
    Verdict,
    affinity,
    cgroup_quota,
    cpu_split,
    cpufreq_notes,
    outside_cpu_reason,
    oversubscription,
    unfit_reason,
    usable_cores,
)
from bench.machine.gpu_monitor import GpuWatch, cpus_of_mask, gpu_watch
from bench.results import FitFigures
from bench.runtime.reporting import fit_figures, fit_problems, fit_tags
from bench.train.result import TrainMetrics

FIELDS = [f.name for f in fields(FitFigures)]
CONF = Path(__file__).resolve().parents[2] / "conf" / "experiment"


def preset_scenario(path: Path) -> str:
    """The scenario a preset chooses: `override /scenario: <name>` in its defaults (an older one: `mode:`)."""
    data = yaml.safe_load(path.read_text()) or {}
    chosen = [
        e["override /scenario"] for e in data.get("defaults", []) if isinstance(e, dict) and "override /scenario" in e
    ]
    return chosen[-1] if chosen else data.get("mode", "train")


TRAINING_PRESETS = sorted(p.stem for p in CONF.glob("*.yaml") if preset_scenario(p) == "train")


@pytest.mark.parametrize(
    "threads, ranks, workers, usable, demand, reason",
    [
        (2, 1, 2, 2.0, 4, "2 torch threads x 1 rank + 2 loader workers = 4 > 2 usable cores"),
        (1, 2, 2, 2.0, 6, "1 torch thread x 2 ranks + 2 loader workers x 2 ranks = 6 > 2 usable cores"),
        (3, 1, 0, 2.5, 3, "3 torch threads x 1 rank = 3 > 2.5 usable cores"),
        (1, 1, 1, 2.0, 2, None),
        (2, 1, 0, 2.0, 2, None),
    ],
)
def test_oversubscription_names_threads_ranks_workers_and_cores(threads, ranks, workers, usable, demand, reason):
    assert oversubscription(threads, ranks, workers, usable) == (demand, reason)


@pytest.mark.parametrize(
    "usable, ranks, threads, workers, reads_files, split",
    [
        (2.0, 1, None, None, True, (1, 1)),  # this machine: the digits run was 2 threads + 2 workers
        (1.5, 1, None, None, True, (1, 0)),  # a one-core share loads in the main process
        (8.0, 1, None, None, True, (6, 2)),  # a quarter of the cores load
        (64.0, 1, None, None, True, (56, 8)),  # at most 8 workers, as on a GPU
        (8.0, 2, None, None, True, (3, 1)),  # each rank's share: 4 cores
        (2.0, 1, None, None, False, (2, 0)),  # synthetic data: every core computes
        (4.0, 1, 3, None, True, (3, 1)),  # the user's threads kept, the workers what is left
        (2.0, 1, 2, None, True, (2, 0)),
        (4.0, 1, None, 3, True, (1, 3)),  # the user's workers kept, the threads what is left
        (2.0, 1, 2, 2, True, (2, 2)),  # both set: the user's, fit or not
    ],
)
def test_a_cpu_run_splits_the_usable_cores_between_threads_and_workers(
    usable, ranks, threads, workers, reads_files, split
):
    assert cpu_split(usable, ranks, threads, workers, reads_files) == split


@pytest.mark.slow  # in-process, but composes every training preset: ~5 CPU-s
@pytest.mark.parametrize("preset", TRAINING_PRESETS)
def test_a_cpu_run_of_every_training_preset_fits_this_machines_cores(compose, preset, monkeypatch):
    """Issue 34.3: bench's defaults on the CPU (bench.runtime.device.fit_cpu) keep torch threads x
    ranks + loader workers x ranks within this machine's usable cores, for each training preset as
    composed here (the ones that ask for more ranks or workers than there are cores are refused
    before they run, exit 2); the choice is said in one line. Without OMP_NUM_THREADS (a user's
    shell; the suite sets it to 1) bench picks the threads too."""
    from bench.errors import ConfigError
    from bench.runtime.device import fit_cpu
    from bench.runtime.scenario import check_cores, demand

    config = compose(f"+experiment={preset}", "allow_cpu=true")
    try:
        check_cores(config, SimpleNamespace(type="cpu"))
    except ConfigError as refused:
        assert refused.key in ("distributed.nproc_per_node", "data.num_workers"), refused
        return
    monkeypatch.delenv("OMP_NUM_THREADS")
    run, said = fit_cpu(config, "cpu")
    threads, ranks, workers, word = demand(run, "cpu", run.distributed.nproc_per_node, run.cpu_threads)
    assert oversubscription(threads, ranks, workers, usable_cores(affinity()), word)[1] is None
    assert f"cpu_threads={run.cpu_threads}" in said and "usable cores (set them to choose)" in said
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the user's thread count: kept, the workers fit beside it
    run, said = fit_cpu(config, "cpu")
    threads, ranks, workers, word = demand(run, "cpu", run.distributed.nproc_per_node, run.cpu_threads)
    assert threads == 1 and oversubscription(threads, ranks, workers, usable_cores(affinity()), word)[1] is None
    assert "cpu_threads" not in said and (said == "" or said.endswith("beside OMP_NUM_THREADS=1 (set them to choose)"))


def test_the_cgroup_quota_caps_the_usable_cores(tmp_path):
    assert cgroup_quota(tmp_path) is None  # no cgroup files: no quota
    assert usable_cores([0, 1, 2, 3], tmp_path) == 4
    (tmp_path / "cpu.max").write_text("150000 100000\n")  # v2: 1.5 cores
    assert cgroup_quota(tmp_path) == 1.5 and usable_cores([0, 1, 2, 3], tmp_path) == 1.5
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cgroup_quota(tmp_path) is None
    (tmp_path / "cpu.max").unlink()
    v1 = tmp_path / "cpu,cpuacct"
    v1.mkdir()
    (v1 / "cpu.cfs_quota_us").write_text("300000\n")
    (v1 / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_quota(tmp_path) == 3.0 and usable_cores([0, 1], tmp_path) == 2
    (v1 / "cpu.cfs_quota_us").write_text("-1\n")
    assert cgroup_quota(tmp_path) is None


def test_cpufreq_notes_name_the_governor_and_a_slow_clock(tmp_path):
    for cpu, governor, current in ((0, "powersave", 1_200_000), (1, "performance", 1_400_000)):
        folder = tmp_path / f"cpu{cpu}" / "cpufreq"
        folder.mkdir(parents=True)
        (folder / "scaling_governor").write_text(governor + "\n")
        (folder / "scaling_cur_freq").write_text(f"{current}\n")
        (folder / "cpuinfo_max_freq").write_text("3000000\n")
    notes = cpufreq_notes([0, 1], tmp_path)
    assert notes == [
        "CPU frequency governor powersave on 1 of 2 usable CPUs (performance holds the clock)",
        "CPUs at 1.30 of 3.00 GHz max (43%, under 80%) at the window's end",
    ]
    assert cpufreq_notes([0, 1], tmp_path / "absent") == []  # a VM shows none of it: nothing said
    (tmp_path / "cpu1" / "cpufreq" / "scaling_cur_freq").write_text("2398800\n")  # 79.96% of max: under 80%
    assert cpufreq_notes([1], tmp_path) == ["CPUs at 2.40 of 3.00 GHz max (79.96%, under 80%) at the window's end"]


def test_the_verdict_goes_last_in_the_record_and_merges_the_ranks():
    rank0 = Verdict(
        ["other processes used 0.97 of 2 usable cores during the window (limit 0.2)"],
        ["load"],
        {"fit_other_cpu_cores": 0.97, "fit_usable_cores": 2.0},
    )
    rank1 = Verdict(["GPU 1 ran 1 other compute process(es) (pid 9)"], [], {"fit_gpu_sm_clock_ratio": 0.5})
    merged = fit_figures(rank0, [rank1, None])  # typed verdicts (None: a rank whose window was not watched)
    assert rank0.reasons == ["other processes used 0.97 of 2 usable cores during the window (limit 0.2)"]  # kept
    assert merged.fit_to_measure is False
    assert merged.fit_reasons == (
        "other processes used 0.97 of 2 usable cores during the window (limit 0.2); "
        "GPU 1 ran 1 other compute process(es) (pid 9)"
    )
    assert merged.fit_other_cpu_cores == 0.97 and merged.fit_gpu_sm_clock_ratio == 0.5
    assert fit_figures(None).to_metrics() == {}  # no window watched: no fields (the record leaves them out)
    record = TrainMetrics.from_metrics({"images_per_second": 1.0, "fit_reasons": "swap", "fit_to_measure": False})
    names = list(record.to_metrics())
    assert names[-2:] == ["fit_to_measure", "fit_reasons"]  # after every other key: their order is unchanged
    assert Verdict.from_dict(Verdict([], [], {"fit_usable_cores": 2.0}).as_dict()).fit


def test_unfit_reason_reads_a_record_a_frame_row_and_mlflow():
    assert unfit_reason({"fit_to_measure": False, "fit_reasons": "swap"}) == "swap"
    assert unfit_reason({"fit_to_measure": 0.0}) == "no reason recorded"  # MLflow's metric, no tag
    assert unfit_reason({"fit_to_measure": 1.0}) is None and unfit_reason({"fit_to_measure": True}) is None
    assert unfit_reason({}) is None and unfit_reason({"fit_to_measure": float("nan")}) is None  # older runs


def test_a_run_stopped_during_the_window_is_unfit_and_says_for_how_long():
    """Issue 39 probe W10: SIGSTOP for 4 s mid-window cut a run's images/s five-fold and the verdict did not
    say it (the machine was idle meanwhile). A real process watched, stopped 2 s, continued; a window
    without a pause is not flagged."""
    code = "import sys\nfrom bench.machine.fitness import MachineWatch\nw = MachineWatch().start()\n"
    code += "print('watching', flush=True)\nsys.stdin.readline()\nprint(w.stop().as_dict()['fit_reasons'])"
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "watching\n"
    proc.send_signal(signal.SIGSTOP)
    time.sleep(2.0)  # the pause is what is measured
    proc.send_signal(signal.SIGCONT)
    out, _ = proc.communicate("\n", timeout=60)
    assert re.search(r"the run was stopped for [12]\.\d s during the window \(SIGSTOP, Ctrl-Z\)", out), out
    watch = MachineWatch().start()
    time.sleep(0.6)  # a window with nothing stopped
    assert "stopped" not in "; ".join(watch.stop().reasons)


def test_require_fit_turns_an_unfit_window_into_a_failed_run_and_tags_say_why():
    record = FitFigures(
        fit_to_measure=False, fit_reasons="the machine swapped in 3.0 MiB during the window", fit_notes=""
    )
    assert fit_problems(record, require_fit=False) == []
    assert fit_problems(record, require_fit=True) == [
        "the machine was not fit to measure (benchmark.require_fit=true): the machine swapped in 3.0 MiB during the "
        "window"
    ]
    assert fit_tags(record) == {
        "bench.fit_to_measure": "false",
        "bench.fit_notes": "",
        "bench.fit_reasons": "the machine swapped in 3.0 MiB during the window",
    }
    assert fit_tags(FitFigures()) == {}


# ---- the GPU's checks, against a mocked NVML ------------------------------------------------------------


class MockedNvml:
    """What pynvml answers for a healthy, busy, x16 gen-5 GPU on NUMA node 0 (CPUs 0-63); a test
    changes one answer. An answer set to an exception is raised (a feature the GPU lacks)."""

    def __init__(self, **answers: Any):
        self.answers: Dict[str, Any] = {
            "events": 0,
            "sm_clock": 1900,
            "max_sm_clock": 1980,
            "processes": [],
            "limit": 700_000,
            "default_limit": 700_000,
            "mig": (0, 0),
            "persistence": 1,
            "ecc": {1: 0, 0: 0},
            "width": 16,
            "max_width": 16,
            "gen": 5,
            "max_gen": 5,
            "affinity": [2**64 - 1],
            **answers,
        }
        self.inits = 0

    def _get(self, name: str) -> Any:
        value = self.answers[name]
        if isinstance(value, Exception):
            raise value
        return value

    def nvmlInit(self) -> None:
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.inits -= 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        return f"gpu{index}"

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: str) -> int:
        return self._get("events")

    def nvmlDeviceGetClockInfo(self, handle: str, clock: int) -> int:
        return self._get("sm_clock")

    def nvmlDeviceGetMaxClockInfo(self, handle: str, clock: int) -> int:
        return self._get("max_sm_clock")

    def nvmlDeviceGetComputeRunningProcesses(self, handle: str) -> List[Any]:
        return [SimpleNamespace(pid=pid, usedGpuMemory=2**30) for pid in self._get("processes")]

    def nvmlDeviceGetPowerManagementLimit(self, handle: str) -> int:
        return self._get("limit")

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: str) -> int:
        return self._get("default_limit")

    def nvmlDeviceGetMigMode(self, handle: str) -> Any:
        return self._get("mig")

    def nvmlDeviceGetPersistenceMode(self, handle: str) -> int:
        return self._get("persistence")

    def nvmlDeviceGetTotalEccErrors(self, handle: str, kind: int, counter: int) -> int:
        return self._get("ecc")[kind]

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: str) -> int:
        return self._get("width")

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: str) -> int:
        return self._get("max_width")

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: str) -> int:
        return self._get("gen")

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: str) -> int:
        return self._get("max_gen")

    def nvmlDeviceGetCpuAffinity(self, handle: str, words: int) -> List[int]:
        return self._get("affinity")


def _watch(nvml: MockedNvml, during: Any = None) -> Verdict:
    watch = gpu_watch(0, nvml=nvml)
    assert isinstance(watch, GpuWatch)
    watch.start({os.getpid()})
    if during:
        during(nvml)
    watch.sample()
    return watch.stop()


ME = os.getpid()


@pytest.mark.parametrize(
    "answers, during, reason, note",
    [
        ({}, None, None, None),  # a healthy GPU: nothing to say
        ({"processes": [ME, 4242]}, None, "GPU 0 ran 1 other compute process(es) (pid 4242)", None),
        (
            {"processes": [11, 12]},
            None,
            "GPU 0 ran 1 other compute process(es) (pid 12)",
            None,
        ),  # another PID namespace
        (
            {},
            lambda n: n.answers.update(events=0x40),
            "GPU 0 throttled during the window: hardware thermal slowdown",
            None,
        ),
        (
            {"events": 0x08 | 0x20},
            None,
            "GPU 0 throttled during the window: software thermal slowdown, hardware slowdown",
            None,
        ),
        ({"events": 0x04}, None, None, "GPU 0 reached its power cap during the window"),
        ({"sm_clock": 990}, None, None, "GPU 0 SM clock 990 of 1980 MHz max (50%, under 80%) during the window"),
        # 1583 of 1980 is 79.95%: noted as under 80%, so printed under it, not as "80%"
        ({"sm_clock": 1583}, None, None, "GPU 0 SM clock 1583 of 1980 MHz max (79.9%, under 80%) during the window"),
        ({"limit": 300_000}, None, "GPU 0 power limit 300 W < default 700 W", None),
        ({"limit": 699_600}, None, "GPU 0 power limit 699.6 W < default 700 W", None),  # not "700 W < 700 W"
        ({"mig": (1, 1)}, None, None, "GPU 0 is in MIG mode: the figures are one partition's"),
        ({"persistence": 0}, None, None, "GPU 0 persistence mode is off"),
        ({"ecc": {1: 2, 0: 0}}, None, "GPU 0 has 2 uncorrected ECC errors since the driver loaded", None),
        ({}, lambda n: n.answers.update(ecc={1: 0, 0: 5}), None, "GPU 0 corrected 5 ECC errors during the window"),
        ({"width": 4}, None, "GPU 0 PCIe link x4 of x16", None),
        ({"gen": 3}, None, None, "GPU 0 PCIe link gen 3 of gen 5 during the window"),
    ],
    ids=[
        "healthy",
        "neighbour",
        "namespace",
        "thermal",
        "hw-slowdown",
        "power-cap",
        "sm-clock",
        "sm-clock-just-under",
        "power-limit",
        "power-limit-just-under",
        "mig",
        "persistence",
        "ecc-uncorrected",
        "ecc-corrected",
        "pcie-width",
        "pcie-gen",
    ],
)
def test_each_gpu_check_mocked_nvml(answers, during, reason, note):
    nvml = MockedNvml(**answers)
    verdict = _watch(nvml, during)
    assert verdict.reasons == ([reason] if reason else [])
    assert verdict.notes == ([note] if note else [])
    assert nvml.inits == 0  # every init is shut down again


def test_a_check_the_gpu_cannot_answer_is_left_out_mocked_nvml():
    unsupported = RuntimeError("NVMLError_NotSupported")
    nvml = MockedNvml(
        **{
            name: unsupported
            for name in (
                "events",
                "sm_clock",
                "processes",
                "limit",
                "mig",
                "ecc",
                "width",
                "gen",
                "affinity",
                "persistence",
            )
        }
    )
    assert _watch(nvml).reasons == [] and _watch(MockedNvml(**{"limit": unsupported})).reasons == []


@pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs to pin to one"
)
def test_a_rank_pinned_off_its_gpus_numa_node_mocked_nvml():
    """The rank pinned to CPU 0 while its GPU's NUMA node holds CPU 1 (and on: a remote node)."""
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {0})
    try:
        remote = _watch(MockedNvml(affinity=[0b10]))
        local = _watch(MockedNvml(affinity=[0b01]))
    finally:
        os.sched_setaffinity(0, allowed)
    assert remote.reasons == ["GPU 0: this rank runs on CPUs 0, none on the GPU's NUMA node (CPUs 1)"]
    assert local.reasons == [] and local.notes == []
    assert cpus_of_mask([0b101, 1]) == {0, 2, 64}


def test_without_nvml_there_is_no_gpu_watch():
    """This machine has no NVIDIA driver: the watch is None, quietly (the CPU checks stand alone)."""
    pytest.importorskip("pynvml")
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        pytest.skip("NVML works here")
    except pynvml.NVMLError:
        pass
    assert gpu_watch(0) is None


def test_the_watch_reads_this_machine():
    """The CPU readers on this machine's own /proc and /sys: the usable cores are its affinity (no
    quota here, or the quota) and a verdict has every figure the record holds."""
    from bench.machine.fitness import MachineWatch, affinity

    cpus = affinity()
    assert cpus == sorted(os.sched_getaffinity(0))
    verdict = MachineWatch(demand=(len(cpus), 1, 1, "torch thread")).start().stop()
    assert verdict.figures["fit_usable_cores"] == usable_cores(cpus) <= len(cpus)
    assert verdict.figures["fit_cpu_demand"] == len(cpus) + 1
    assert f"{len(cpus)} torch threads x 1 rank + 1 loader worker = {len(cpus) + 1} > " in "; ".join(verdict.reasons)
    assert set(verdict.as_dict()) <= set(FIELDS)


def test_the_busy_machines_reason_shows_its_figure_over_the_limit_it_prints():
    """With 128 usable cores the limit (12.8) printed as "13", so "12.90 of 128 usable cores (limit 13)"
    read as under it; a figure just over a limit (0.2004 of 2) printed as "0.20" beside "limit 0.2".
    The limit prints as it is, the figure to the places that show it over; within the ticks' slack, fit."""
    assert outside_cpu_reason(12.9, 0.0, 128) == (
        "other processes used 12.90 of 128 usable cores during the window (limit 12.8)"
    )
    assert outside_cpu_reason(0.2004, 0.0001, 2) == (
        "other processes used 0.2004 of 2 usable cores during the window (limit 0.2)"
    )
    assert (
        outside_cpu_reason(0.97, 0.02, 2) == "other processes used 0.97 of 2 usable cores during the window (limit 0.2)"
    )
    assert outside_cpu_reason(0.21, 0.02, 2) is None and outside_cpu_reason(0.1, 0.0, 1.5) is None
    assert (
        outside_cpu_reason(0.2, 0.0, 1.5)
        == "other processes used 0.20 of 1.5 usable cores during the window (limit 0.15)"
    )


def test_a_load_average_just_over_the_cores_is_noted_over_them_mocked_load(monkeypatch):
    """The note beside a start on a loaded machine printed "load average 2.00 at the start > 2 usable
    cores" for 2.004: the figure keeps the places that show it over (the load itself is faked: this
    machine's cannot be set)."""
    import bench.machine.fitness as fitness

    monkeypatch.setattr(fitness.os, "getloadavg", lambda: (2.004, 0.0, 0.0))
    monkeypatch.setattr(fitness, "usable_cores", lambda cpus: 2.0)
    notes = MachineWatch().start().stop().notes
    assert "load average 2.004 at the start > 2 usable cores" in notes, notes
