"""Checkpoints and resume, as real processes: a run killed with SIGKILL continues from its last
checkpoint with the same command line (train.resume=auto) and ends where an uninterrupted run
ends, with the same weights, and its MLflow run names the checkpoint; SIGTERM writes a checkpoint
before the run ends KILLED; checkpoints on a loopback S3 server.
Issue 18: train.resume=auto finishes on every preset a CPU trains (a checkpoint at every epoch
end, the temporaries of killed writes removed); a checkpoint of another model or optimizer is one
line before any step; a checkpoint that would run code is refused and runs nothing (and one that is
no torch.save zip file, damaged or not bench's, is one line); a checkpoint of bench's previous format
still resumes."""

from __future__ import annotations

import functools
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

HANG_GUARD_S = 900
# 6 epochs of 4 steps at 48 px on 1 CPU thread: long enough to be killed mid-way, short for a test
RUN = [
    "train.epochs=6",
    "train.steps_per_epoch=4",
    "data.image_size=48",
    "checkpoint.every_epochs=1",
    "checkpoint.keep_last=3",
    "tracking.enabled=false",
]


def checkpoints_in(root: Path) -> list:
    return sorted(p.name for p in root.glob("checkpoints/*/*.pt"))


def wait_for(predicate, proc, what: str) -> None:
    """Until `predicate()` holds (the event); fails if the process ends first or the guard runs out."""
    deadline = time.monotonic() + HANG_GUARD_S
    while not predicate():
        assert proc.poll() is None, f"the run ended before {what}: {proc.communicate()}"
        assert time.monotonic() < deadline, f"no {what} within {HANG_GUARD_S} s"
        time.sleep(0.02)


def test_sigkill_mid_run_then_resume_auto_ends_like_an_uninterrupted_run(bench, tiny, tmp_path):
    bench.with_store()
    whole = bench.metrics(bench.run(*tiny, *RUN, f"hydra.run.dir={tmp_path}/whole", f"storage.root={tmp_path}/a"))

    root = tmp_path / "b"
    proc = bench.start(*tiny, *RUN, f"hydra.run.dir={tmp_path}/killed", f"storage.root={root}")
    wait_for(lambda: "epoch-0002.pt" in checkpoints_in(root), proc, "the epoch-2 checkpoint")
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=HANG_GUARD_S)
    assert proc.returncode == -signal.SIGKILL
    done_before = max(int(name[6:10]) for name in checkpoints_in(root))
    assert 2 <= done_before < 6

    # the same command line, plus resume=auto: continues after the last checkpoint
    resumed_dir = tmp_path / "resumed"
    tracked = [arg for arg in RUN if arg != "tracking.enabled=false"]  # this one lands in MLflow
    resumed = bench.metrics(
        bench.run(*tiny, *tracked, "train.resume=auto", f"hydra.run.dir={resumed_dir}", f"storage.root={root}")
    )
    assert resumed["resumed_epoch"] == done_before and resumed["resumed_from"].endswith(f"epoch-{done_before:04d}.pt")
    assert resumed["checkpoint_load_seconds"] > 0 and resumed["checkpoint_save_gbps"] > 0
    epochs = bench.epochs(resumed_dir)
    assert [e["epoch"] for e in epochs] == [1, 2, 3, 4, 5, 6]  # numbered from where the checkpoint left off
    assert set(epochs[0]) == set(epochs[-1])
    assert resumed["measured_steps"] == (6 - done_before) * 4
    assert set(whole) <= set(resumed)  # the same figures, plus where it resumed from
    # CPU, fixed seeds, one thread: the same weights after the same steps
    assert resumed["param_checksum"] == pytest.approx(whole["param_checksum"], rel=1e-9)
    assert resumed["final_loss"] == pytest.approx(whole["final_loss"], rel=1e-5)
    assert checkpoints_in(root)[-1] == "epoch-0006.pt" and len(checkpoints_in(root)) == 3  # keep_last
    (run,) = bench.runs()  # the MLflow run says which checkpoint it continued from
    assert run.data.params["train.resume"] == "auto" and run.data.params["resumed_from"] == resumed["resumed_from"]
    assert run.data.metrics["resumed_epoch"] == done_before and run.data.metrics["checkpoint_load_gbps"] > 0


def test_sigterm_writes_a_checkpoint_and_the_run_continues_from_it(bench, tiny, tmp_path):
    root = tmp_path / "store"
    run_dir = tmp_path / "run"
    # one long epoch: the signal lands mid-epoch however far the run got before the test saw "step 6/"
    # (with 4-step epochs a loaded box ran on to the epoch's end, whose checkpoint was then the last)
    long_epoch = [*RUN, "train.epochs=2", "train.steps_per_epoch=100000"]
    proc = bench.start(*tiny, *long_epoch, "benchmark.log_every=1", f"hydra.run.dir={run_dir}", f"storage.root={root}")
    bench.wait_for_line(proc, run_dir / "bench.log", "step 6/")
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=HANG_GUARD_S)
    assert proc.returncode == 143, err
    assert "Traceback" not in err and "run interrupted" in err
    names = checkpoints_in(root)
    mid = [n for n in names if "-step-" in n]
    assert names == mid and len(mid) == 1, names  # written on the signal, mid-epoch: epoch-0000-step-00000N.pt
    assert mid[0].startswith("epoch-0000-step-")
    steps_done = int(mid[0].split("-step-")[1][:6])

    resumed = bench.metrics(
        bench.run(
            *tiny,
            *long_epoch,
            "train.resume=auto",
            "benchmark.measure_steps=3",
            f"hydra.run.dir={tmp_path}/resumed",
            f"storage.root={root}",
        )
    )
    assert resumed["resumed_from"].endswith(mid[0]) and resumed["measured_steps"] == 3
    assert steps_done >= 6


# A damaged checkpoint named on the command line (a file that is no torch.save zip) is one line before
# the run (2), like a file that is not there: the bad-input table's row "resume from a file that is not a
# checkpoint", and through a real process test_a_checkpoint_that_would_run_code_is_refused_and_runs_nothing[pickle]
# (a pickle named epoch-0001.pt: the same check, the same line).


def test_checkpoints_on_s3_and_resume_from_them(bench, tiny, tmp_path, s3_server):
    bucket = s3_server.new_bucket()
    s3 = s3_server.overrides(bucket, "storage.prefix=ckpt", "storage.client=boto3")
    first = bench.metrics(
        bench.run(*tiny, *RUN, "train.epochs=2", *s3, f"hydra.run.dir={tmp_path}/one", env=s3_server.env())
    )
    assert first["checkpoints_saved"] == 2 and first["checkpoint_dir"].startswith(f"s3://{bucket}/ckpt/checkpoints/")
    keys = [o["Key"] for o in s3_server.admin().list_objects_v2(Bucket=bucket)["Contents"]]
    assert sorted(k.rsplit("/", 1)[-1] for k in keys) == ["epoch-0001.pt", "epoch-0002.pt"]

    more = bench.metrics(
        bench.run(
            *tiny,
            *RUN,
            "train.epochs=3",
            "train.resume=auto",
            *s3,
            f"hydra.run.dir={tmp_path}/two",
            env=s3_server.env(),
        )
    )
    assert more["resumed_epoch"] == 2 and more["resumed_from"].startswith(f"s3://{bucket}/ckpt/")
    assert more["measured_steps"] == 4 and [e["epoch"] for e in bench.epochs(tmp_path / "two")] == [1, 2, 3]


# ---- issue 18 ------------------------------------------------------------------------------------

# each preset shrunk to 2 epochs of 2 steps of 4 small images on 1 thread: one short process each
SHRINK = [
    "train.epochs=2",
    "train.steps_per_epoch=2",
    "data.batch_size=4",
    "data.image_size=32",
    "benchmark.warmup_steps=1",
    "benchmark.log_every=1",
    "benchmark.progress=false",
    "cpu_threads=1",
    "allow_cpu=true",
    "tracking.enabled=false",
]


EXPERIMENTS = Path(__file__).resolve().parents[2] / "conf" / "experiment"


@functools.cache
def _defaults(preset: str) -> list:
    import yaml

    return yaml.safe_load((EXPERIMENTS / f"{preset}.yaml").read_text()).get("defaults", [])


def _chosen(preset: str, group: str, option: str) -> str:
    """The option of `group` a preset chooses: its own `override /<group>: X`, else that of a preset
    it builds on (read from the YAML: composing all 27 presets cost every collection ~8 CPU-s)."""
    for entry in _defaults(preset):
        if isinstance(entry, str) and entry != "_self_":
            option = _chosen(entry, group, option)
        elif isinstance(entry, dict):
            option = entry.get(f"override /{group}", option)
    return option


def cpu_trainable_presets() -> list:
    """The presets a CPU trains as written: mode=train in fp32 (bf16/fp16 presets are GPU recipes,
    mode=storage trains nothing). Found from conf/experiment, so a new preset is covered."""
    names = sorted(p.stem for p in EXPERIMENTS.glob("*.yaml"))
    return [
        n for n in names if _chosen(n, "scenario", "train") == "train" and _chosen(n, "precision", "fp32") == "fp32"
    ]


PRESETS = cpu_trainable_presets()


@pytest.mark.slow  # no process, but 24 Hydra compositions (~7 CPU-s)
def test_the_cpu_trainable_presets_include_the_shipped_cpu_ones(compose):
    assert {"cpu_smoke", "digits_tta", "cifar100_resnet18"} <= set(PRESETS), PRESETS
    # the YAML reading above is what Hydra composes: every other preset is no fp32 training run
    others = sorted({p.stem for p in EXPERIMENTS.glob("*.yaml")} - set(PRESETS))
    trainable = [
        n for n in others if (lambda c: c.mode == "train" and c.precision.name == "fp32")(compose(f"+experiment={n}"))
    ]
    assert trainable == [], trainable


def dead_pid() -> int:
    """The pid of a process that has ended."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.mark.parametrize("preset", PRESETS)
def test_resume_auto_finishes_on_every_cpu_trainable_preset(bench, compose, datasets, tmp_path, preset):
    """Issue 18: train.resume=auto without checkpoint.every_epochs died after epoch 1
    (ZeroDivisionError); now it writes one at every epoch end. A `.tmp<pid>` a killed write left in
    the checkpoint folder is removed at the start; one of a live process stays."""
    from bench.train.resume import fingerprint

    preset_config = compose(f"+experiment={preset}")
    assert preset_config.mode == "train" and preset_config.precision.name == "fp32", preset
    data = preset_config.data.name
    if data == "imagefolder":
        datasets.imagenet_layout(tmp_path / "images")
        extra = [f"data.root={tmp_path}/images", "data.num_classes=4"]
    elif data == "cifar100":
        datasets.cifar100(tmp_path / "cifar")
        extra = [f"data.root={tmp_path}/cifar"]
    else:
        assert data == "synthetic", f"{preset}: write its {data} data here"
        extra = []
    overrides = [f"+experiment={preset}", *SHRINK, *extra, f"storage.root={tmp_path}/store", "train.resume=auto"]
    config = compose(*overrides)
    folder = tmp_path / "store" / "checkpoints" / fingerprint(config)
    folder.mkdir(parents=True)
    stale, live = folder / f"epoch-0001.pt.tmp{dead_pid()}", folder / f"epoch-0001.pt.tmp{os.getpid()}"
    stale.write_bytes(b"half a checkpoint")
    live.write_bytes(b"a write in progress")

    metrics = bench.metrics(bench.run(*overrides, f"hydra.run.dir={tmp_path}/run"))
    every = preset_config.checkpoint.every_epochs or 1  # the preset's, or resume's default
    assert metrics["measured_steps"] == 4 and "resumed_from" not in metrics
    assert metrics["checkpoints_saved"] == len([e for e in (1, 2) if e % every == 0 or e == 2])
    assert (folder / "epoch-0002.pt").is_file()
    assert not stale.exists() and live.read_bytes() == b"a write in progress"


@pytest.fixture(scope="module")
def first_checkpoint(bench_at, tiny_args, tmp_path_factory) -> Path:
    """One epoch of the tiny run, checkpointed: the file later runs resume from (one run for the
    module: the tests only read it)."""
    where = tmp_path_factory.mktemp("first")
    bench = bench_at(where)
    bench.metrics(
        bench.run(
            *tiny_args,
            "checkpoint.every_epochs=1",
            "tracking.enabled=false",
            f"storage.root={where}/store",
            f"hydra.run.dir={where}/first",
        )
    )
    (path,) = (where / "store").glob("checkpoints/*/epoch-0001.pt")
    return path


def as_previous_format(path: Path, to: Path) -> Path:
    """The checkpoint as bench wrote it before issue 18 (format 1): numpy's RNG state as numpy's
    own tuple (an ndarray inside), no `meta`."""
    state = torch.load(path, weights_only=True)
    rng = state["rng"]["numpy"]
    state["rng"]["numpy"] = (
        rng["kind"],
        rng["keys"].numpy().astype(np.uint32),
        rng["pos"],
        rng["has_gauss"],
        rng["cached_gaussian"],
    )
    state["format"] = 1
    del state["meta"]
    torch.save(state, to)
    return to


def test_a_checkpoint_of_another_model_or_optimizer_is_one_line_before_any_step(
    bench, tiny, tmp_path, first_checkpoint
):
    """Issue 18: another model's checkpoint printed load_state_dict's dump after the warm-up,
    another optimizer's a KeyError: 'step'. Now one line naming what differs, before the MLflow
    run is opened (exit 2, as for a checkpoint file that is not there)."""
    path = first_checkpoint
    # one run of another model and another optimizer: the line names each key that differs, and only those
    proc = bench.run(*tiny, "model=resnet34", "optimizer=adam", f"train.resume={path}", f"hydra.run.dir={tmp_path}/run")
    assert proc.returncode == 2, proc.stderr
    line = bench.single_error(proc)
    assert line == (
        f"[ERROR] train.resume: checkpoint {path} was written by another run: model.arch 'small_cnn' there, "
        "'resnet34' here; optimizer.name 'sgd' there, 'adam' here (a checkpoint continues the model, optimizer "
        "and schedule it was written by: resume with the same config, or start without train.resume)"
    )
    assert not bench.db.exists()  # refused in the preflight: before an MLflow run, a model or a step


def test_a_checkpoint_of_the_previous_format_still_resumes(bench, tiny, tmp_path, first_checkpoint):
    """Issue 18: checkpoints now hold plain data only; one bench wrote before (numpy's RNG state
    as an ndarray) still loads, continues (with a checkpoint at every epoch end: resume's default
    interval, from a path too), and one of another optimizer is one line."""
    bench.with_store()
    old = as_previous_format(first_checkpoint, tmp_path / "old.pt")
    assert torch.serialization.get_unsafe_globals_in_checkpoint(old)  # what weights_only refuses by default
    resumed = bench.metrics(
        bench.run(
            *tiny,
            "train.epochs=2",
            f"train.resume={old}",
            "tracking.enabled=false",
            f"storage.root={tmp_path}/store",
            f"hydra.run.dir={tmp_path}/resumed",
        )
    )
    assert resumed["resumed_epoch"] == 1 and resumed["measured_steps"] == 3 and resumed["checkpoints_saved"] == 1

    proc = bench.run(
        *tiny,
        "optimizer=adam",
        "train.epochs=2",  # an epoch left to train (else 'no epoch is left' comes first)
        f"train.resume={old}",
        "tracking.enabled=false",
        f"hydra.run.dir={tmp_path}/adam",
    )
    assert proc.returncode == 1
    line = bench.single_error(proc)
    assert f"checkpoint {old} holds another optimizer or schedule than this run's (KeyError: 'step')" in line

    # The same refusal inside the ranks of a DDP job (the check runs in each rank for this format):
    # torch.multiprocessing gives each worker a `pytorch-errorfile-*.pickle` in the launcher's
    # $TMPDIR, and a rank that raised left its traceback there for good (issue 18, item 13).
    # A $TMPDIR too long for the forkserver's Unix socket failed every rank with "AF_UNIX path too
    # long" (CI's pytest-183 temp path did): bench makes that socket's directory in a short one.
    tmpdir = tmp_path / ("tmpdir-" + "x" * 60)
    tmpdir.mkdir()
    proc = bench.run(
        *tiny,
        "optimizer=adam",
        "train.epochs=2",
        f"train.resume={old}",
        "distributed=ddp",
        "distributed.nproc_per_node=2",
        f"hydra.run.dir={tmp_path}/adam-ddp",
        env=bench.env(bench.uri, TMPDIR=str(tmpdir)),
    )
    assert proc.returncode == 1, proc.stderr
    (line,) = bench.error_lines(proc.stderr)
    assert line.startswith("[ERROR] run failed: WorkerFailure: worker rank") and "another optimizer" in line, line
    assert sorted(p.name for p in tmpdir.glob("pytorch-errorfile-*")) == []
    assert list(tmpdir.glob("bench-launch-*")) == []  # the launch's own temp dir is gone too
    (run,) = bench.runs()
    assert run.info.status == "FAILED"


class RunsCode:
    """What a crafted checkpoint carries: unpickled, it runs a shell command."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.mark.parametrize("kind", ["torch.save", "pickle"])
def test_a_checkpoint_that_would_run_code_is_refused_and_runs_nothing(bench, tiny, tmp_path, kind):
    """Issue 18: train.resume=<file> loaded with weights_only=False: a crafted file ran code."""

    def payload(marker: Path, to: Path) -> Path:
        state = {"format": 2, "model": {}, "epoch": 1, "step_in_epoch": 0, "x": RunsCode(marker)}
        if kind == "torch.save":
            torch.save(state, to)
        else:
            to.write_bytes(pickle.dumps(state))
        return to

    # the payload is live: an unsafe load of its twin runs the command
    proof = payload(tmp_path / "proof-ran", tmp_path / "proof.pt")
    torch.load(proof, weights_only=False) if kind == "torch.save" else pickle.loads(proof.read_bytes())
    assert (tmp_path / "proof-ran").exists()

    marker = tmp_path / "bench-ran-it"
    evil = payload(marker, tmp_path / "epoch-0001.pt")
    proc = bench.run(*tiny, f"train.resume={evil}", f"hydra.run.dir={tmp_path}/run")
    assert proc.returncode == 2, proc.stderr
    line = bench.single_error(proc)
    if kind == "torch.save":
        assert line == (
            f"[ERROR] train.resume: checkpoint {evil} is refused: it needs posix.system, which a bench "
            "checkpoint never holds (checkpoints are read as plain tensors, dicts, lists, numbers and "
            "strings with torch.load(weights_only=True), which runs no code)"
        )
    else:
        assert line == f"[ERROR] train.resume: checkpoint {evil} is damaged or not bench's (not a torch.save zip file)"
    assert not marker.exists()
    assert not bench.db.exists()
