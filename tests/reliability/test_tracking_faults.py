"""Faults survived: a tracking server that cannot be reached, or that goes away mid-run. A short
probe at start (once per sweep) replaces minutes of MLflow retries; the run goes on without
tracking, says so in one line, keeps its results, and `python -m bench.tools.upload` sends them
later (completing a run the server left RUNNING). Real `mlflow server` processes on 127.0.0.1.
Runs started at once on a new sqlite store all land in it (its schema is made under a file lock)."""

from __future__ import annotations

import json
import shutil
import signal
import time

import pytest
from mlflow import MlflowClient

from bench.rank_context import free_port


@pytest.fixture(scope="module")
def offline_run(bench_at, tiny_args, tmp_path_factory):
    """One tiny run whose tracking server cannot be reached (port 9 on loopback has none): (its
    process, its run dir). The next test reads it; the upload test uploads it later (one run for
    both: the first only reads what the run left)."""
    where = tmp_path_factory.mktemp("offline")
    bench = bench_at(where)
    proc = bench.run(
        *tiny_args,
        f"hydra.run.dir={where}/run",
        env=bench.env("http://127.0.0.1:9", MLFLOW_HTTP_REQUEST_MAX_RETRIES="0", MLFLOW_HTTP_REQUEST_TIMEOUT="2"),
    )
    return proc, where / "run"


def test_unreachable_tracking_server_keeps_results(bench, offline_run):
    """Port 9 on loopback has no server: the run completes, results stay local, the URI is named."""
    proc, run_dir = offline_run
    metrics = bench.metrics(proc)
    assert metrics["total_images"] == 12
    assert "http://127.0.0.1:9" in proc.stderr
    assert (run_dir / "run_summary.json").is_file()


def test_unreachable_server_keeps_ddp_results(bench, tiny, tmp_path):
    """A short probe at start finds nobody at the server's port: one line says so, the run goes
    on without tracking and keeps its results (issue 9: MLflow's retries cost minutes)."""
    uri = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    run_dir = tmp_path / "run"
    proc = bench.run(
        *tiny, "distributed=ddp", "distributed.nproc_per_node=2", f"hydra.run.dir={run_dir}", env=bench.env(uri)
    )
    metrics = bench.metrics(proc)
    assert metrics["world_size"] == 2 and metrics["params_in_sync"] is True
    warnings = [line for line in proc.stderr.splitlines() if "WARNING" in line]
    assert len(warnings) == 1, proc.stderr
    assert f"MLflow server at {uri} cannot be reached" in warnings[0]
    assert f"python -m bench.tools.upload {run_dir}" in warnings[0]
    summary = json.loads((run_dir / "run_summary.json").read_text())
    assert summary["results"]["world_size"] == 2 and summary["mlflow_run_id"] is None
    assert not bench.db.exists()


def test_a_sweep_probes_the_server_once(bench, tiny, tmp_path):
    uri = f"http://127.0.0.1:{free_port()}"
    proc = bench.run("-m", *tiny, "seed=1,2", f"hydra.sweep.dir={tmp_path}/sweep", env=bench.env(uri))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count('{"radix_metrics"') == 2
    assert proc.stderr.count("cannot be reached") == 1, proc.stderr  # at the sweep's start, not per job
    assert all((tmp_path / "sweep" / job / "run_summary.json").is_file() for job in ("0", "1"))


def test_results_kept_while_the_server_was_down_upload_later(mlflow_server, bench, offline_run):
    """The run of the server that could not be reached (offline_run), uploaded once one is up."""
    proc, run_dir = offline_run
    metrics = bench.metrics(proc)
    # issue 33 probe: two uploads started together made two runs of it; the second now finds the first's
    both = [bench.start(str(run_dir), "--tracking-uri", mlflow_server, module="bench.tools.upload") for _ in "ab"]
    said = sorted((proc.communicate(timeout=900)[0], proc.returncode) for proc in both)
    assert [code for _, code in said] == [0, 0] and "already in MLflow" in said[0][0], said
    uploaded = said[1][0]
    assert "uploaded as run" in uploaded, said
    run_id = json.loads((run_dir / "run_summary.json").read_text())["mlflow_run_id"]
    client = MlflowClient(tracking_uri=mlflow_server)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.params["model.arch"] == "small_cnn"
    assert run.data.metrics["images_per_second"] == pytest.approx(metrics["images_per_second"])
    assert len(client.get_metric_history(run_id, "step_time_ms")) == metrics["measured_steps"]
    assert {"run_summary.json", "step_times.csv", ".hydra"} <= {a.path for a in client.list_artifacts(run_id)}
    # issue 33.5: every file the run wrote (packages.txt was never sent), under the run's name (not "run")
    assert "packages.txt" in {a.path for a in client.list_artifacts(run_id)}
    assert run.info.run_name == "small_cnn-fp32-bs4" and f"'{run.info.run_name}'" in uploaded
    assert [r.info.run_id for r in client.search_runs([run.info.experiment_id])] == [run_id]  # no second copy


def test_server_that_dies_mid_run_costs_no_results_and_upload_completes_the_run(
    bench, tiny, tmp_path, module_mlflow_server
):
    """The server goes away after the run opened: the run finishes on its own (one warning, its
    final line, its files); the server comes back with the run left RUNNING, and the upload
    completes that same run instead of making another. The module's server (killed here and
    started again on its store; this test's run in an experiment of its own, so the upload test's
    experiment holds only its run), not one of its own: one start of `mlflow server` fewer."""
    server = module_mlflow_server
    run_dir = tmp_path / "run"
    try:
        proc = bench.start(
            *tiny,
            "train.steps_per_epoch=60",
            "benchmark.log_every=1",
            "tracking.experiment=server-died",
            f"hydra.run.dir={run_dir}",
            env=bench.env(server.url),
        )
        log = run_dir / "bench.log"
        deadline = time.monotonic() + 900  # hang guard; the event: the run is open and training
        while (
            proc.poll() is None and time.monotonic() < deadline and not (log.exists() and "step 2/" in log.read_text())
        ):
            time.sleep(0.1)
        server.stop(signal.SIGKILL)
        out, err = proc.communicate(timeout=900)
        assert proc.returncode == 0, err
        metrics = json.loads(out.strip().splitlines()[-1])["radix_metrics"]
        assert "no further tracking for this run; upload the results later" in err
        run_id = json.loads((run_dir / "run_summary.json").read_text())["mlflow_run_id"]

        server.start()
        client = MlflowClient(tracking_uri=server.url)
        assert client.get_run(run_id).info.status == "RUNNING"  # nobody could end it
        uploaded = bench.run(str(run_dir), "--tracking-uri", server.url, module="bench.tools.upload")
        assert uploaded.returncode == 0 and f"completed run {run_id}" in uploaded.stdout, uploaded.stderr
        run = client.get_run(run_id)
        assert run.info.status == "FINISHED"
        assert run.data.metrics["images_per_second"] == pytest.approx(metrics["images_per_second"])
        assert "run_summary.json" in {a.path for a in client.list_artifacts(run_id)}
    finally:
        if server.process is None or server.process.poll() is not None:
            server.start()  # the module's server, up again for whatever test follows


def test_four_runs_started_at_once_on_a_fresh_sqlite_store_are_all_tracked(bench, tiny, tmp_path):
    """Four processes open the same new mlflow.db at the same moment: MLflow's schema creation
    raced (`table ... already exists`) and three runs went untracked, each exiting 0. An empty cache:
    the store is made the long way, by MLflow's migrations (a machine's first store; later ones are copies)."""
    assert not bench.db.exists()
    cold = bench.env(XDG_CACHE_HOME=str(tmp_path / "cache"))
    procs = [bench.start(*tiny, "cpu_threads=1", f"hydra.run.dir={tmp_path}/run{i}", env=cold) for i in range(4)]
    ended = [proc.communicate(timeout=900) for proc in procs]
    for proc, (_out, err) in zip(procs, ended, strict=True):
        assert proc.returncode == 0, err
        assert "not tracked" not in err and "Traceback" not in err, err
    runs = bench.runs()
    assert len(runs) == 4 and {run.info.status for run in runs} == {"FINISHED"}
    assert all(run.data.metrics.get("images_per_second", 0) > 0 for run in runs)
    ids = {json.loads((tmp_path / f"run{i}" / "run_summary.json").read_text())["mlflow_run_id"] for i in range(4)}
    assert ids == {run.info.run_id for run in runs}


def test_a_run_that_cannot_be_tracked_says_so_and_keeps_its_results(bench, tiny, tmp_path):
    """A store that cannot be opened (its directory is a file) costs no results, as an unreachable
    server costs none: exit 0, the final line, and one warning on stderr that this run is not tracked."""
    (tmp_path / "a-file").write_text("not a directory\n")
    missing = tmp_path / "a-file" / "mlflow.db"
    proc = bench.run(*tiny, "cpu_threads=1", f"hydra.run.dir={tmp_path}/run", env=bench.env(f"sqlite:///{missing}"))
    bench.metrics(proc)
    (warning,) = [line for line in proc.stderr.splitlines() if "not tracked" in line]
    assert f"sqlite:///{missing}" in warning and (tmp_path / "run" / "run_summary.json").is_file()


# ---- a store on a full disk, a store locked by another writer (issue 28 item 9) ---------------------


def _until_training(proc, log) -> None:
    deadline = time.monotonic() + 900  # a hang guard; the event: the run is open and training
    while proc.poll() is None and time.monotonic() < deadline and not (log.exists() and "step 2/" in log.read_text()):
        time.sleep(0.05)


def test_a_store_that_fills_up_is_one_warning_and_the_next_run_closes_the_run_it_left_running(
    bench_at, tiny, small_disk, fill_disk, tmp_path
):
    """The store's disk fills up mid-run: exit 0, the final line, the run's files, one warning line
    naming the cause (it was 89 lines with two SQLAlchemy tracebacks), the run left RUNNING. Once the
    disk has room again, the next run (tracking.required=true: tracked, so exit 0) closes it KILLED,
    saying where its results are; upload completes it."""
    on_disk = bench_at(small_disk("size=3m")).with_store()
    first = tmp_path / "first"
    proc = on_disk.start(*tiny, "train.steps_per_epoch=60", "benchmark.log_every=1", f"hydra.run.dir={first}")
    _until_training(proc, first / "bench.log")
    fill_disk(on_disk.cwd)
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1])["radix_metrics"]["measured_steps"] == 60
    (warning,) = [line for line in err.splitlines() if "WARNING" in line or "ERROR" in line]
    assert "(OperationalError: database or disk is full); no further tracking for this run" in warning, warning
    assert "Traceback" not in err and "[SQL:" not in err and len(err.splitlines()) < 70, err  # 60 step lines
    assert (first / "run_summary.json").is_file() and "MLflow UI" not in err
    run_id = json.loads((first / "run_summary.json").read_text())["mlflow_run_id"]
    assert MlflowClient(tracking_uri=on_disk.uri).get_run(run_id).info.status == "RUNNING"

    (on_disk.cwd / "filler").unlink(missing_ok=True)
    again = on_disk.run(*tiny, "tracking.required=true", f"hydra.run.dir={tmp_path}/second")
    on_disk.metrics(again)
    assert "closed 1 MLflow run(s) left RUNNING" in again.stderr
    left = MlflowClient(tracking_uri=on_disk.uri).get_run(run_id)
    assert left.info.status == "KILLED" and f"its results stay in {first}" in left.data.tags["error"]
    uploaded = on_disk.run(str(first), "--tracking-uri", on_disk.uri, module="bench.tools.upload")
    assert f"completed run {run_id}" in uploaded.stdout, uploaded.stderr


def test_a_store_on_a_full_disk_is_one_line_and_tracking_required_makes_it_a_failure(
    bench_at, tiny, small_disk, fill_disk, tmp_path
):
    """Full before the run: one warning, exit 0, results kept; with tracking.required=true: one
    [ERROR] line and exit 1 before any work."""
    on_disk = bench_at(small_disk("size=3m")).with_store()
    fill_disk(on_disk.cwd)
    proc = on_disk.run(*tiny, f"hydra.run.dir={tmp_path}/run")
    on_disk.metrics(proc)
    (warning,) = [line for line in proc.stderr.splitlines() if "WARNING" in line]
    assert "failed (OperationalError: database or disk is full); this run is not tracked" in warning
    assert "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) == 3, proc.stderr
    assert (tmp_path / "run" / "run_summary.json").is_file()
    required = on_disk.run(*tiny, "tracking.required=true", f"hydra.run.dir={tmp_path}/required")
    line = on_disk.single_error(required)
    assert required.returncode == 1 and "WARNING" not in required.stderr
    assert line.startswith("[ERROR] this run cannot be tracked and tracking.required=true: MLflow tracking at")
    assert "database or disk is full" in line
    assert not (tmp_path / "required" / "run_summary.json").exists()  # refused before the work


def test_a_store_locked_by_another_writer_is_one_line(bench, tiny, tmp_path):
    """Another process holds the sqlite store's write lock for the whole run: with
    tracking.required=true, one [ERROR] line naming the lock and exit 1 (no work done)."""
    import sqlite3

    bench.with_store()
    holder = sqlite3.connect(bench.db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        proc = bench.run(*tiny, "tracking.required=true", f"hydra.run.dir={tmp_path}/run")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    line = bench.single_error(proc)
    assert proc.returncode == 1 and "database is locked" in line, line
    assert [run.info.status for run in bench.runs()] == []


# ---- a store whose creation was interrupted (issue 39 item 7) --------------------------------------


def _killed_mid_migration(proc, folder) -> None:
    """SIGKILL `proc` once a sqlite file in `folder` (mlflow.db or bench's temporary one) shows one of
    MLflow's `_alembic_tmp_` tables in sqlite_master: mid-migration, the event, not a time."""
    import sqlite3

    deadline = time.monotonic() + 900  # a hang guard
    while proc.poll() is None and time.monotonic() < deadline:
        for db in folder.glob("mlflow.db*"):
            if db.suffix in (".lock",) or db.name.endswith("-journal"):
                continue
            try:
                with sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True, timeout=0.01) as reader:
                    names = [row[0] for row in reader.execute("SELECT name FROM sqlite_master")]
            except sqlite3.Error:
                continue
            if any(name.startswith("_alembic_tmp_") for name in names):
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=60)
                return
        time.sleep(0.002)
    pytest.fail(f"no _alembic_tmp_ table was seen before the process ended ({proc.poll()})")


@pytest.fixture(scope="module")
def killed_store_creation(bench_at, tiny_args, tmp_path_factory):
    """The first run in a folder SIGKILLed mid-migration, then the next run there: (its Bench, the
    folder, the next run's process, a folder holding a copy of what the kill left). The first store
    this MLflow makes is the one that migrates (later ones are a copy of it): an empty cache.

    Shared (one run and one `python -c` of MLflow's import fewer): the first test reads the next run;
    the second-store upload test uploads it (the one tracked run of a store of its own, as it needs);
    the half-made store test takes the copy, made before the next run removes the leftover: the
    store bench was making under its temporary name, killed mid-migration, with its journal if it had
    one - the store MLflow's own first touch leaves when killed so (MLflow's SqlAlchemyStore and
    bench.tracking.store.create_whole both make it with mlflow.store.db.utils._initialize_tables)."""
    where, left = tmp_path_factory.mktemp("killed-store"), tmp_path_factory.mktemp("half-made-store")
    bench = bench_at(where)
    first = bench.start(*tiny_args, f"hydra.run.dir={where}/first", env=bench.env(XDG_CACHE_HOME=str(where / "cache")))
    try:
        _killed_mid_migration(first, where)
    finally:
        bench.kill_leftovers()
    for made, kept in (("mlflow.db.new", "mlflow.db"), ("mlflow.db.new-journal", "mlflow.db-journal")):
        if (where / made).exists():  # bench's temporary name (and its journal) -> the name MLflow makes
            shutil.copyfile(where / made, left / kept)
    assert (left / "mlflow.db").is_file(), sorted(p.name for p in where.iterdir())
    return bench, where, bench.run(*tiny_args, f"hydra.run.dir={where}/again"), left


def test_a_run_killed_while_it_makes_a_new_store_leaves_no_half_made_one(killed_store_creation):
    """SIGKILL mid-migration of the first run in a folder: every later run there went untracked
    (`table _alembic_tmp_... already exists`) and stale was a 117-line traceback. The store is made
    under a temporary name and linked into place: the next run is tracked and the leftover removed."""
    bench, where, again, _ = killed_store_creation
    bench.metrics(again)
    assert "not tracked" not in again.stderr and "WARNING" not in again.stderr, again.stderr
    assert [run.info.status for run in bench.runs()] == ["FINISHED"]
    assert sorted(p.name for p in where.glob("mlflow.db*")) == ["mlflow.db"]  # the killed one's file removed
    stale = bench.run(module="bench.tools.stale")
    assert stale.returncode == 0 and stale.stderr.strip() == "0 RUNNING, 0 stale", stale.stderr


def test_upload_to_a_second_store_and_back_keeps_one_run_per_store(bench, killed_store_creation, tmp_path):
    """Issue 39.8: an upload to a second store rewrote run_summary.json's `mlflow_run_id`, so
    uploading back to the first store made a second copy there. Each store keeps its own run. The
    run: the one tracked run of killed_store_creation's store (the first store here)."""
    first_store, where, again, _ = killed_store_creation
    run_dir, second = where / "again", f"sqlite:///{tmp_path}/second.db"
    bench.metrics(again)
    (first_id,) = [run.info.run_id for run in first_store.runs()]
    said = []
    for uri in (second, first_store.uri, second):
        upload = bench.run(str(run_dir), "--tracking-uri", uri, module="bench.tools.upload")
        assert upload.returncode == 0, upload.stderr
        said.append(upload.stdout)
    (second_id,) = [run.info.run_id for run in bench.runs(second)]
    assert "uploaded as run " + second_id in said[0]
    assert f"already in MLflow: run {first_id} (FINISHED)" in said[1], said
    assert f"already in MLflow: run {second_id} (FINISHED)" in said[2], said
    assert [run.info.run_id for run in first_store.runs()] == [first_id]  # no duplicate in the first store
    summary = json.loads((run_dir / "run_summary.json").read_text())
    assert summary["mlflow_run_id"] == first_id and summary["mlflow_run_ids"] == {second: second_id}


def test_a_half_made_store_is_one_line_naming_the_command_that_moves_it_aside(
    bench, tiny, tmp_path, killed_store_creation
):
    """A store left half-made as MLflow itself makes one (the first touch, killed mid-migration: how
    bench made its store before issue 39) is named in one line by a run and by stale, with the
    command that moves it aside; `mlflow db upgrade` cannot repair it. The store: killed_store_creation's
    copy of what its kill left (as MLflow's first touch leaves it), as this test's mlflow.db."""
    for kept in killed_store_creation[3].iterdir():
        shutil.copyfile(kept, tmp_path / kept.name)
    move = f"python -m bench.tools.stale --move-aside --tracking-uri {bench.uri}"
    proc = bench.run(*tiny, f"hydra.run.dir={tmp_path}/run")
    bench.metrics(proc)
    (warning,) = [line for line in proc.stderr.splitlines() if "WARNING" in line]
    assert f"the MLflow store {bench.db} was left half-made" in warning and move in warning, proc.stderr
    assert "this run is not tracked" in warning and "Traceback" not in proc.stderr
    stale = bench.run(module="bench.tools.stale")
    said = warning.split("failed (HalfMadeStore: ")[1].split("); this run")[0]  # the store's line in the run's
    assert stale.returncode == 2 and stale.stdout == "" and stale.stderr.splitlines() == [f"[ERROR] {said}"], stale
    moved = bench.run("--move-aside", module="bench.tools.stale")
    assert moved.returncode == 0 and f"moved the half-made MLflow store {bench.db} aside" in moved.stderr, moved
    assert not bench.db.exists() and len(list(tmp_path.glob("mlflow.db.half-made-*"))) == 1
    again = bench.run("--move-aside", module="bench.tools.stale")  # nothing there to move: said, exit 0
    assert again.returncode == 0 and "no MLflow store" in again.stderr, again.stderr
