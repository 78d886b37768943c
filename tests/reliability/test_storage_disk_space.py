"""The storage benchmark and a disk that is too small (issue 18, item 4), on real tmpfs mounts:
a plan larger than the free space (less the margin) is refused before any write; a disk that runs
out mid-way ends the run naming the path, with no partial file and nothing this run wrote left
behind; a finished run deletes its checkpoints, and the next start deletes what a killed write
left (`<name>.tmp<pid>` of a dead pid).

A disk that runs out although the plan fit: the files the run replaces are also hard-linked
elsewhere on the same disk, so replacing them frees nothing (the plan counts a replaced file's
bytes as room, as it should for a re-run): a deterministic way to fill the disk mid-write."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

STORAGE = [
    "mode=storage",
    "storage.workload.samples_per_file=4",
    "storage.workload.record_size=4096",
    "storage.workload.batch_size=4",
    "storage.workload.epochs=1",
    "storage.workload.read_threads=1",
    "storage.prepare_workers=2",
]
MIB = 2**20
SIZE = re.compile(r"needs? ([\d.]+) (kB|MB|GB|TB) on (\S+); ([\d.]+) (kB|MB|GB|TB) free, keeping a ([\d.]+) MB margin")
UNITS = {"kB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}


def _figures(line: str) -> tuple:
    """(needed bytes, the path named, free bytes, margin bytes) from a refusal."""
    match = SIZE.search(line)
    assert match, line
    need, unit, where, free, free_unit, margin = match.groups()
    return float(need) * UNITS[unit], where, float(free) * UNITS[free_unit], float(margin) * 1e6


def _dead_pid() -> int:
    """The pid of a process that has exited (a killed writer's leftover names such a pid)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _everything(disk: Path) -> list:
    return sorted(str(p.relative_to(disk)) for p in disk.rglob("*"))


def _files_kept_elsewhere(directory: Path, names: list, size: int, kept: Path) -> None:
    """Files of `size` bytes in `directory`, each hard-linked into `kept` (same disk)."""
    directory.mkdir(parents=True)
    kept.mkdir()
    for name in names:
        (directory / name).write_bytes(b"\1" * size)
        os.link(directory / name, kept / name)


@pytest.mark.parametrize(
    "case, args, keys",
    [
        # 100 x 1 MB is 5x the disk: the refusal is the same as for a million (which cost ~6.5 CPU-s more:
        # the plan lists every checkpoint's name)
        (
            "checkpoints",
            [
                "storage.workload.checkpoint_only=true",
                "storage.workload.checkpoint_size_mb=1",
                "storage.workload.checkpoint_count=100",
            ],
            "storage.workload.checkpoint_count=100 x checkpoint_size_mb=1 needs",
        ),
        (
            "dataset",
            [
                "storage.workload.num_files=400",
                "storage.workload.samples_per_file=8",
                "storage.workload.record_size=65536",
                "storage.workload.checkpoint_size_mb=0",
            ],
            "storage.workload.num_files=400 x samples_per_file=8 x record_size=65536 needs",
        ),
        # 20.6 MB fits in the 21.0 MB free, but not with the margin: the margin is what refuses it
        (
            "margin",
            ["storage.workload.checkpoint_only=true", "storage.workload.checkpoint_size_mb=19.6"],
            "storage.workload.checkpoint_count=1 x checkpoint_size_mb=19.6 needs",
        ),
    ],
)
def test_a_plan_larger_than_the_free_space_is_refused_before_any_write(bench, small_disk, tmp_path, case, args, keys):
    disk = small_disk("size=20m")
    proc = bench.run(*STORAGE, *args, f"storage.root={disk}", f"hydra.run.dir={tmp_path}/run")
    assert proc.returncode == 2, proc.stderr
    line = bench.single_error(proc)
    assert keys in line and line.endswith(": lower them, or set storage.root to a larger disk"), line
    need, where, free, margin = _figures(line)
    assert where.startswith(str(disk)) and margin == pytest.approx(0.05 * 20 * MIB, rel=0.05)
    assert need > free - margin
    if case == "margin":
        assert need < free  # it would have fit, leaving the disk full
    assert _everything(disk) == []  # nothing written, not even a directory
    assert not bench.db.exists()  # refused before an MLflow run


def test_a_prepare_that_runs_out_of_space_names_the_path_and_leaves_nothing_it_wrote(bench, small_disk, tmp_path):
    bench.with_store()
    disk = small_disk("size=20m")
    dataset, names = disk / "iobench-dataset", [f"file_{i:05d}.bin" for i in range(24)]
    _files_kept_elsewhere(dataset, names, 8 * 65536, disk / "kept")  # 12.6 MB, rewritten by prepare=always
    proc = bench.run(
        *STORAGE,
        "storage.workload.num_files=24",
        "storage.workload.samples_per_file=8",
        "storage.workload.record_size=65536",
        "storage.workload.checkpoint_size_mb=0",
        "storage.prepare=always",
        f"storage.root={disk}",
        f"hydra.run.dir={tmp_path}/run",
    )
    assert proc.returncode == 1, proc.stderr
    line = bench.single_error(proc)
    match = re.fullmatch(
        rf"\[ERROR\] the dataset could not be prepared: no space left on {dataset}/(file_\d+\.bin) "
        r"\(No space left on device\), after (\d+) of 24 files; the (\d+) files it wrote were deleted "
        r"\(lower storage.workload.num_files or record_size, or set storage.root to a larger disk\)",
        line,
    )
    assert match, line
    written, deleted = int(match.group(2)), int(match.group(3))
    assert 0 < written == deleted < 24
    left = sorted(p.name for p in dataset.iterdir())
    assert all(".tmp" not in name for name in _everything(disk))  # the write that failed left no partial file
    assert len(left) == 24 - written and all((dataset / name).stat().st_nlink == 2 for name in left)  # old ones only
    (run,) = bench.runs()
    assert run.info.status == "FAILED" and f"no space left on {dataset}/" in run.data.tags["error"]


def test_checkpoints_that_run_out_of_space_name_the_path_and_are_deleted(bench, small_disk, tmp_path):
    disk = small_disk("size=20m")
    checkpoints, names = disk / "iobench-checkpoints", [f"checkpoint-{i}.pt" for i in range(15)]
    _files_kept_elsewhere(checkpoints, names, MIB + 8192, disk / "kept")  # a kept earlier run's, 15.9 MB
    proc = bench.run(
        *STORAGE,
        "storage.workload.num_files=4",
        "storage.workload.checkpoint_only=true",
        "storage.workload.checkpoint_size_mb=1",
        "storage.workload.checkpoint_count=15",
        f"storage.root={disk}",
        "tracking.enabled=false",
        f"hydra.run.dir={tmp_path}/run",
    )
    assert proc.returncode == 1, proc.stderr
    metrics = json.loads(proc.stdout.strip().splitlines()[-1])["radix_metrics"]  # the figures are reported
    failed = re.fullmatch(
        rf"no space left on {checkpoints}/checkpoint-(\d+)\.pt \(No space left on device\)", metrics["checkpoint_error"]
    )
    assert failed and 0 < int(failed.group(1)) < 15, metrics["checkpoint_error"]
    assert bench.error_lines(proc.stderr) == [
        "[ERROR] run failed after its measurement was reported: the checkpoint phase failed: "
        f"{metrics['checkpoint_error']}"
    ]
    assert "Traceback" not in proc.stderr
    assert all(".tmp" not in name for name in _everything(disk))
    left = sorted(p.name for p in checkpoints.iterdir())  # the ones this run wrote are deleted
    assert len(left) == 15 - int(failed.group(1)) and all((checkpoints / n).stat().st_nlink == 2 for n in left)


def test_a_finished_run_deletes_its_checkpoints_and_a_killed_writes_leftovers(bench, tmp_path):
    root = tmp_path / "data"
    dead, alive = _dead_pid(), os.getpid()
    (root / "iobench-checkpoints").mkdir(parents=True)
    (root / "iobench-dataset").mkdir()
    stale = [
        root / "iobench-checkpoints" / f"checkpoint-0.pt.tmp{dead}",
        root / "iobench-dataset" / f"file_00001.bin.tmp{dead}",
    ]
    in_progress = root / "iobench-checkpoints" / f"checkpoint-1.pt.tmp{alive}"  # a live writer's: left alone
    for path in [*stale, in_progress]:
        path.write_bytes(b"half a file")
    proc = bench.run(
        *STORAGE,
        "storage.workload.num_files=4",
        "storage.workload.epochs=2",
        "storage.workload.checkpoint_size_mb=1",
        "storage.workload.checkpoint_count=2",
        "storage.workload.checkpoint_every_steps=2",
        f"storage.root={root}",
        "tracking.enabled=false",
        f"hydra.run.dir={tmp_path}/run",
    )
    metrics = bench.metrics(proc)
    assert metrics["checkpoint_count"] == 2 and metrics["periodic_checkpoints"] >= 2 and metrics["checkpoint_read_gbps"]
    assert sorted(p.name for p in (root / "iobench-checkpoints").iterdir()) == [in_progress.name]
    assert not any(path.exists() for path in stale)
    assert f"removed 1 temporary file(s) left by a killed write under {root}/iobench-dataset" in proc.stderr
    assert len(list((root / "iobench-dataset").glob("file_*.bin"))) == 4  # the dataset stays, for the next run


def test_the_checkpoint_phase_checks_the_space_again_before_it_writes(small_disk):
    """In-process, on a real tmpfs: the disk filled up after the preflight (another writer):
    the phase is not started, the error names the path, and no file is written."""
    from bench.iobench.checkpoint import Checkpointer, run_checkpoints
    from bench.storage.local import LocalStore

    disk = small_disk("size=20m")
    (disk / "filler").write_bytes(b"\0" * 15 * MIB)
    checkpointer = Checkpointer(LocalStore(disk / "iobench-checkpoints"), "checkpoint.pt", 1.0, 0)
    how, error = run_checkpoints(checkpointer, 5, lambda: None)
    assert error is not None and error.startswith(
        f"5 checkpoint(s) of 1.1 MB needs 5.3 MB on {disk}/iobench-checkpoints; "
    ), error
    assert how == "" and checkpointer.records == [] and _everything(disk) == ["filler"]
