"""Training runs on real data options as real `python -m bench` processes: the input-pipeline
fields they report, the one-line errors of datasets that cannot be read, `python -m bench.data
prepare` to a directory and to an S3 server on 127.0.0.1 (read back with data=shards
storage=s3), and the loader benchmark command."""

from __future__ import annotations

import json
import os
import subprocess
import threading

import pytest

HANG_GUARD_S = 900  # a prepare of a few dozen images that takes longer is stuck

# TINY minus its class count (each dataset brings its own), with one loader worker
BASE = ["data.num_workers=1"]


@pytest.fixture
def base(tiny):
    return [arg for arg in tiny if not arg.startswith("data.num_classes=")] + BASE


def check_input_pipeline_fields(metrics: dict) -> None:
    assert metrics["au"] == pytest.approx(1 - metrics["data_wait_fraction"])
    assert 0 <= metrics["au"] <= 1
    assert metrics["input_bound"] is (metrics["au"] < 0.90)
    assert metrics["data_wait_seconds"] > 0  # a real pipeline is never free


def run_ok(bench, base, tmp_path, args, env=None) -> dict:
    replaced = {arg.split("=")[0] for arg in args}
    kept = [arg for arg in base if arg.split("=")[0] not in replaced]
    metrics = bench.metrics(bench.run(*kept, *args, f"hydra.run.dir={tmp_path}/run", env=env))
    (run,) = bench.runs()
    assert run.info.status == "FINISHED"
    assert run.data.metrics["au"] == pytest.approx(metrics["au"])
    return metrics


def prepare(bench, src, dst, *extra, env=None):
    return bench.run(
        "prepare",
        "--src",
        str(src),
        "--dst",
        str(dst),
        "--workers",
        "1",
        "--no-progress",
        *extra,
        module="bench.data",
        env=env,
    )


def test_zero_byte_images_are_skipped_and_counted_and_an_empty_class_folder_is_said_once(
    bench, base, datasets, tmp_path
):
    """Issue 18: four zero-byte files among 64 (the first four the preflight probes) refused the whole
    dataset; an empty class folder counted as a class without a word. Now the empty files are skipped
    and counted as corrupt images are, and the empty class folder is named once in bench.log."""
    bench.with_store()
    root = tmp_path / "images"
    paths = sorted(datasets.image_folder(root, images=64))
    for path in paths[:4]:  # class000's first four: the images preflight would probe
        open(path, "w").close()
    (root / "zz_empty_class").mkdir()  # sorts last: the other classes keep their labels
    metrics = run_ok(
        bench,
        base,
        tmp_path,
        [
            "data=imagefolder",
            f"data.root={root}",
            f"data.num_classes={datasets.CLASSES + 1}",
            "data.batch_size=64",
            "train.steps_per_epoch=1",
        ],
    )
    assert metrics["corrupt_skipped"] == 4 and metrics["dataset_size"] == 64
    assert metrics["dataset_classes"] == datasets.CLASSES + 1
    log = (tmp_path / "run" / "bench.log").read_text()
    assert log.count("hold no images and still count as classes") == 1
    assert str(root / "zz_empty_class") in log and "an empty file (0 bytes)" in log


def test_imagefolder_run_reports_data_wait_au_skips_a_corrupt_image_a_symlink_loop_and_val_lacking_a_class(
    bench, base, datasets, tmp_path
):
    """A real `python -m bench data=imagefolder` run reports the input-pipeline fields (data wait, AU)
    and skips a corrupt image, counting it. Issue 39.1-2 in the same run: a symlink loop in a train/
    class folder (`ln -s . sub`, which made 3 x 12 images 516) counts its images once, and a val/
    lacking a class is scored with train/'s labels, each said once in bench.log; a val/ class train/
    lacks is refused in one line before any run."""
    import os
    import shutil

    bench.with_store()
    root = tmp_path / "images"
    datasets.imagenet_layout(root, train=12, val=8)
    (root / "train" / "class002" / "broken.jpg").write_bytes(b"\xff\xd8\xff not a jpeg")
    os.symlink(".", root / "train" / "class001" / "sub")
    shutil.rmtree(root / "val" / "class001")
    # one batch is the whole shuffled epoch (12 images and the broken one), so the broken file is met
    # whatever the order
    args = ["data=imagefolder", f"data.root={root}", "data.num_classes=4", "data.batch_size=13", "train.eval_every=1"]
    metrics = run_ok(bench, base, tmp_path, args)
    check_input_pipeline_fields(metrics)
    assert metrics["data"] == "imagefolder" and metrics["measured_steps"] == 3 and metrics["batch_size"] == 13
    # the loop's images counted once: the 12 and the broken one
    assert metrics["dataset_size"] == 13 and metrics["dataset_classes"] == datasets.CLASSES
    assert metrics["corrupt_skipped"] == 1 and metrics["val_images"] == 6
    log = (tmp_path / "run" / "bench.log").read_text()
    assert log.count(f"{root / 'train'}: left out {root / 'train' / 'class001' / 'sub'}: each a link") == 1
    assert log.count(f"{root}/val lacks train/'s class(es) class001: validation scores the others") == 1

    (root / "val" / "class001").mkdir()  # back, and one train/ has not
    (root / "val" / "zebra").mkdir()
    proc = bench.run(*base, *args, f"hydra.run.dir={tmp_path}/refused")
    assert f"{root}/val has 1 class(es) that train/ lacks: zebra" in one_error_line(bench, proc, 2)
    assert len(bench.runs()) == 1


def test_cifar100_run(bench, base, datasets, tmp_path):
    bench.with_store()
    datasets.cifar100(tmp_path / "cifar")
    metrics = run_ok(
        bench, base, tmp_path, ["data=cifar100", f"data.root={tmp_path / 'cifar'}", "data.num_classes=100"]
    )
    check_input_pipeline_fields(metrics)
    assert metrics["dataset_size"] == 40 and metrics["dataset_classes"] == 100 and metrics["image_size"] == 32


@pytest.fixture(scope="module")
def flat_shards(bench_at, datasets, tmp_path_factory):
    """24 images of a flat class folder prepared into shards of 10 at 40 px, once for the module: a
    training run reads them, and the test of a shard overwritten since copies one of them (as a shard of
    another prepare, of another shard size); neither writes into them."""
    where = tmp_path_factory.mktemp("flat-shards")
    datasets.image_folder(where / "flat", images=24)
    prepared = prepare(bench_at(where), where / "flat", where / "shards", "--size", "40", "--shard-size", "10")
    assert prepared.returncode == 0, prepared.stderr
    return where / "shards"


def test_shards_run_after_prepare(bench, base, flat_shards, tmp_path):
    bench.with_store()
    metrics = run_ok(bench, base, tmp_path, ["data=shards", f"data.root={flat_shards}", "data.num_classes=10"])
    check_input_pipeline_fields(metrics)
    assert metrics["dataset_size"] == 24 and metrics["dataset_shards"] == 3 and metrics["shard_image_size"] == 40


def test_one_prepare_per_destination_and_a_shard_overwritten_since_is_refused(
    bench, base, datasets, tmp_path, flat_shards
):
    """Issue 39.3: two prepares into one --dst both exited 0 and the meta.json of one listed the other's
    shards; a run trained on the mix without a word. The second prepare is refused while the first
    holds the destination (the first is held at a FIFO among its images, opened once the refusal is
    seen), meta.json names its writer and each shard's records and bytes, and a shard that does not
    match them (here: copied from a prepare of another shard size, the module's flat_shards: 10 records
    where this one's meta.json lists 4) is refused before the first step."""
    import os

    bench.with_store()
    datasets.image_folder(tmp_path / "images", images=12)
    gate = tmp_path / "images" / "class000" / "zz-gate.jpg"
    os.mkfifo(gate)  # the first prepare's worker blocks opening it until the test writes to it
    dst = tmp_path / "shards"
    first = bench.start(
        "prepare", "--src", str(tmp_path / "images"), "--dst", str(dst), "--workers", "1", "--no-progress",
        "--shard-size", "4", "--size", "40", module="bench.data",
    )  # fmt: skip
    bench.wait_for_line(first, dst / ".bench-writer.lock", '"pid"')
    second = prepare(bench, tmp_path / "images", dst, "--shard-size", "8", "--size", "40")
    refused = one_error_line(bench, second, 2)
    assert f"{dst} is being written by another run: pid {first.pid} on " in refused, refused
    assert "Two runs must not write one shard destination" in refused
    with open(gate, "wb") as fifo:
        fifo.write(b"not an image")
    out, err = first.communicate(timeout=HANG_GUARD_S)
    assert first.returncode == 0 and "train: 12 images in 4 shards" in out and "1 unreadable skipped" in out, err
    meta = json.loads((dst / "train" / "meta.json").read_text())
    assert meta["writer"]["pid"] == first.pid and meta["writer"]["src"] == str(tmp_path / "images")
    assert sum(shard["count"] for shard in meta["shards"]) == 12
    assert all((dst / shard["key"]).stat().st_size == shard["bytes"] for shard in meta["shards"])
    assert not (dst / ".bench-writer.lock").exists()  # released

    (dst / "train" / "shard-00000.bin").write_bytes((flat_shards / "train" / "shard-00000.bin").read_bytes())
    proc = bench.run(*base, "data=shards", f"data.root={dst}", "data.num_classes=10", f"hydra.run.dir={tmp_path}/run")
    line = one_error_line(bench, proc, 2)
    assert f"{dst}/train/shard-00000.bin holds 10 records and " in line, line
    assert "but its meta.json lists 4 records and " in line
    assert f"pid {first.pid}" in line and not bench.runs()


def _descendants(pid: int) -> list:
    """The pids under `pid`, read from its own tree (/proc/PID/task/TID/children: each thread's
    children): psutil's children(recursive=True) reads every process's /proc/PID/stat on each call
    (~7 ms on a busy machine, 50 times a second here). psutil's walk where the kernel lacks that file."""
    import psutil

    if not os.path.exists(f"/proc/self/task/{threading.get_native_id()}/children"):
        return [child.pid for child in psutil.Process(pid).children(recursive=True)]
    found, stack = [], [pid]
    while stack:
        parent = stack.pop()
        try:
            threads = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue  # it ended
        for thread in threads:
            try:
                with open(f"/proc/{parent}/task/{thread}/children") as listing:
                    children = [int(child) for child in listing.read().split()]
            except OSError:
                continue  # the thread (or the process) ended
            found += children
            stack += children
    return found


def prepare_watching_children(bench, src, dst, *extra, env=None):
    """`prepare` as a real process whose process tree is snapshotted until it exits: (the ended
    process, every descendant seen, their command lines)."""
    import time

    import psutil

    proc = bench.start(
        "prepare", "--src", str(src), "--dst", str(dst), "--no-progress", *extra, module="bench.data", env=env
    )
    seen, commands = {}, []
    deadline = time.monotonic() + HANG_GUARD_S
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            for pid in _descendants(proc.pid):
                if pid not in seen:
                    child = psutil.Process(pid)
                    seen[pid] = child
                    commands.append(" ".join(child.cmdline()))
        except psutil.NoSuchProcess:
            pass
        time.sleep(0.02)
    if proc.poll() is None:
        proc.kill()
        pytest.fail(f"prepare still running after {HANG_GUARD_S} s; its processes: {commands}")
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), list(seen.values()), commands


def test_shards_prepared_to_s3_train_through_storage_s3(bench, base, datasets, tmp_path, s3_server):
    """train/ and val/ to S3 (issue 18: the val pool, forked after the main process had opened
    an S3 client for train/meta.json, froze or crashed, and left a worker behind): both splits
    and their meta.json land, no process of the command outlives it, and a training run with
    validation reads both back through storage=s3."""
    bench.with_store()
    import psutil

    bucket = s3_server.new_bucket()
    datasets.imagenet_layout(tmp_path / "images", train=24, val=12)
    env = s3_server.env()
    prepared, children, commands = prepare_watching_children(
        bench,
        tmp_path / "images",
        f"s3://{bucket}/shards",
        "--workers",
        "2",
        "--size",
        "40",
        "--shard-size",
        "10",
        "--storage",
        f"endpoint={s3_server.endpoint}",
        env=env,
    )
    assert prepared.returncode == 0, prepared.stderr
    assert (
        prepared.stdout.startswith("train: 24 images in 3 shards") and "val: 12 images in 2 shards" in prepared.stdout
    )
    assert any("spawn_main" in command for command in commands), commands  # its pool processes were seen
    _, alive = psutil.wait_procs(children, timeout=60)  # a hang guard: they are gone when it exits
    assert not alive, commands
    keys = sorted(o["Key"] for o in s3_server.admin().list_objects_v2(Bucket=bucket)["Contents"])
    assert keys == [
        f"shards/{split}/{name}"
        for split, count in (("train", 3), ("val", 2))
        for name in ["meta.json", *(f"shard-{n:05d}.bin" for n in range(count))]
    ]
    for split, count in (("train", 24), ("val", 12)):
        meta = json.loads(s3_server.admin().get_object(Bucket=bucket, Key=f"shards/{split}/meta.json")["Body"].read())
        assert meta["count"] == count and len(meta["classes"]) == datasets.CLASSES

    metrics = run_ok(
        bench,
        base,
        tmp_path,
        [
            "data=shards",
            f"data.root=s3://{bucket}/shards",
            "data.num_classes=10",
            "train.eval_every=1",
            *s3_server.overrides(bucket),
        ],
        env=env,
    )
    assert metrics["data"] == "shards" and metrics["dataset_size"] == 24 and metrics["dataset_shards"] == 3
    assert metrics["measured_steps"] == 3 and metrics["val_images"] == 12
    (run,) = bench.runs()
    assert s3_server.secret not in str(run.data.params) + str(run.data.tags)
    assert not any(
        s3_server.secret in p.read_text(errors="ignore") for p in (tmp_path / "run").rglob("*") if p.is_file()
    )

    # the same shard set without its val/ split: validation refused in preflight (issue 21), one line,
    # before any MLflow run (it used to fail when the first epoch ended, ~20 s in)
    s3_server.admin().delete_object(Bucket=bucket, Key="shards/val/meta.json")
    proc = bench.run(
        *base,
        "data=shards",
        f"data.root=s3://{bucket}/shards",
        "data.num_classes=10",
        "train.eval_every=1",
        *s3_server.overrides(bucket),
        f"hydra.run.dir={tmp_path}/noval",
        env=env,
    )
    assert f"s3://{bucket}/shards holds no val/meta.json" in one_error_line(bench, proc, 2)
    assert len(bench.runs()) == 1  # no run for the refused one


def one_error_line(bench, proc, code: int) -> str:
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    errors = bench.error_lines(proc.stderr)
    assert len(errors) == 1, proc.stderr
    return errors[0]


# a data folder's refusals before any run (missing, empty, too many classes, no root, a bad split, negative
# workers, files that are not images) are rows of the bad-input table (tests/reliability/bad_inputs.py)


def test_strict_stops_at_a_corrupt_image_naming_it(bench, base, datasets, tmp_path):
    bench.with_store()
    datasets.image_folder(tmp_path / "flat", images=8)
    bad = tmp_path / "flat" / "class000" / "broken.jpg"
    bad.write_bytes(b"\xff\xd8\xff not a jpeg")
    proc = bench.run(
        *base,
        "data=imagefolder",
        f"data.root={tmp_path / 'flat'}",
        "data.num_classes=10",
        "data.strict=true",
        "data.split=val",
        f"hydra.run.dir={tmp_path}/run",
    )
    assert f"corrupt image {bad}" in one_error_line(bench, proc, 1)
    (run,) = bench.runs()
    assert run.info.status == "FAILED"


def _bad_inputs():
    """tests/reliability/bad_inputs.py (the bad-input table's module): its run_in_process runs a
    command's `__main__` in this process as `python -m` does, with the process state restored."""
    import importlib.util
    import sys
    from pathlib import Path

    if "bad_inputs" not in sys.modules:
        path = Path(__file__).resolve().parents[1] / "reliability" / "bad_inputs.py"
        spec = importlib.util.spec_from_file_location("bad_inputs", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["bad_inputs"] = module
        spec.loader.exec_module(module)
    return sys.modules["bad_inputs"]


def test_prepare_errors_are_one_line(bench, datasets, tmp_path, capfd, monkeypatch):
    """Each refusal of `python -m bench.data prepare` is one line. The bad value given by --storage
    runs as a real process (the command-line path); the other three run the same `__main__` code in
    this process (bad_inputs.run_in_process, as the bad-input table does: its rows "prepare from
    nowhere", "prepare into a file" and "prepare with a misspelt storage key" hold them too)."""

    def prepare_in_process(src, dst, *extra):
        return _bad_inputs().run_in_process(
            "bench.data", ["prepare", "--src", str(src), "--dst", str(dst), "--workers", "1", "--no-progress", *extra],
            capfd,
        )  # fmt: skip

    for variable, value in bench.env().items():
        monkeypatch.setenv(variable, value)
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    monkeypatch.chdir(bench.cwd)
    missing = prepare_in_process(tmp_path / "nope", tmp_path)
    assert f"--src '{tmp_path / 'nope'}' does not exist" in one_error_line(bench, missing, 2)
    datasets.image_folder(tmp_path / "flat", images=4)
    blocker = tmp_path / "a-file"
    blocker.write_text("x")  # the destination cannot be a directory: refused before any work (issue 33)
    refused = one_error_line(bench, prepare_in_process(tmp_path / "flat", blocker), 2)
    assert f"--dst='{blocker}' is not valid: accepted a directory this user can write" in refused
    # --storage goes through the schema like any storage.KEY=VALUE override
    bad_key = prepare_in_process(tmp_path / "flat", "s3://b/p", "--storage", "endpont=http://x:1")
    assert "storage.endpont" in one_error_line(bench, bad_key, 2) and "did you mean storage.endpoint" in bad_key.stderr
    bad_value = prepare(bench, tmp_path / "flat", "s3://b/p", "--storage", "client=s3fs")
    assert "storage.client='s3fs' is not valid" in one_error_line(bench, bad_value, 2)


def test_bench_loader_command_compares_against_the_baseline(bench, tmp_path):
    proc = bench.run(
        "bench-loader",
        "--images",
        "16",
        "--classes",
        "2",
        "--workers",
        "0",
        "--batch-size",
        "4",
        "--rounds",
        "2",
        "--batches",
        "2",
        "--warmup",
        "1",
        "--image-size",
        "32",
        "--shard-image-size",
        "64",
        "--shard-size",
        "5",
        "--dir",
        str(tmp_path),
        module="bench.data",
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    # A-B-C-C-B-A in every round (bench.analysis.rounds): each loader twice a round
    assert lines[0].startswith("round 1: torchvision-baseline") and lines[1].startswith("round 2: torchvision-baseline")
    assert lines[0].count("|") == 2 and len(lines[0].split("imagefolder ")[1].split("|")[0].split(",")) == 2
    table = {line.split()[0]: line.split() for line in lines[3:]}
    assert set(table) == {"torchvision-baseline", "imagefolder", "shards"}
    assert table["torchvision-baseline"][2] == "1.00x" and float(table["shards"][1]) > 0
    assert (tmp_path / "shards-16-2-64-5" / "train" / "meta.json").is_file()
