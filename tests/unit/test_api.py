"""bench.api (issue 30.11, seed 004's Python API; issue 33.4, its contract): the docs' example runs
as written, a real tiny CPU run in this process on the command's own path, and gives back the typed
records; each epoch splits its seconds into data wait and compute (issue 30.12). Called as a user's
script calls it: twice in one process, the second time from a thread (no signal handlers there, and
its MLflow run still ends FINISHED); nothing on stdout unless asked; what the command refuses with
exit 2 raises a BenchError naming the key, the value and what is accepted, and leaves nothing behind."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from bench.api import RunResult, TrainMetrics, compose_config, default_config, run
from bench.errors import BenchError, ConfigError, DeviceError

DOC = Path(__file__).resolve().parents[2] / "docs" / "training.md"


def docs_example() -> str:
    section = DOC.read_text().split("## From Python (`bench.api`)")[1]
    return re.search(r"```python\n(.+?)```", section, re.S).group(1)


def in_a_thread(call):
    """call() in a threading.Thread of its own: what it returned, or what it raised."""
    outcome: dict = {}

    def body():
        try:
            outcome["returned"] = call()
        except BaseException as exc:  # handed to the test, which fails on it
            outcome["raised"] = exc

    thread = threading.Thread(target=body)
    thread.start()
    thread.join(timeout=600)  # a hang guard only
    assert not thread.is_alive() and "raised" not in outcome, outcome.get("raised")
    return outcome["returned"]


def test_the_docs_example_then_a_tracked_run_from_a_thread_in_the_same_process(
    tmp_path, monkeypatch, capsys, bench, tiny
):
    monkeypatch.chdir(tmp_path)
    bench.with_store()  # tmp_path/mlflow.db: the default store of a run launched here
    scope: dict = {}
    exec(compile(docs_example(), "docs/training.md", "exec"), scope)
    result = scope["result"]
    assert isinstance(result, RunResult) and result.ok and result.exit_code == 0 and result.error is None
    assert result.out_dir == Path("runs/api") and result.config.data.batch_size == 8
    metrics = result.metrics
    assert isinstance(metrics, TrainMetrics) and metrics.batch_size == 8 and metrics.images_per_second > 0
    assert "radix_metrics" not in capsys.readouterr().out  # nothing on stdout unless asked
    # issue 30.12: per epoch, data wait + compute = the epoch's seconds, in the file and the records
    lines = [json.loads(text) for text in (tmp_path / "runs/api/metrics_epoch.jsonl").read_text().splitlines()]
    assert [e.epoch for e in result.epochs] == [e["epoch"] for e in lines] == [1, 2]
    for epoch in lines:
        assert epoch["data_wait_seconds"] >= 0 and epoch["compute_seconds"] > 0
        assert epoch["data_wait_seconds"] + epoch["compute_seconds"] == pytest.approx(epoch["seconds"])

    # the same process again, from a thread (signal handlers cannot be set there), tracked, echoed
    second = in_a_thread(lambda: run(tiny, echo=True))
    assert second.ok and second.error is None and second.out_dir.parent.parent == tmp_path / "outputs"
    assert second.metrics.batch_size == 4 and result.metrics.batch_size == 8  # each its own records
    (line,) = [text for text in capsys.readouterr().out.splitlines() if text.startswith('{"radix_metrics"')]
    assert json.loads(line)["radix_metrics"]["images_per_second"] == second.metrics.images_per_second
    (tracked,) = bench.runs()  # the docs example's run is not tracked
    summary = json.loads((second.out_dir / "run_summary.json").read_text())
    assert tracked.info.status == "FINISHED" and tracked.info.run_id == summary["mlflow_run_id"]
    assert tracked.data.metrics["images_per_second"] == pytest.approx(second.metrics.images_per_second)


def edited(tiny, key, value):
    config = compose_config(*tiny)
    group, name = key.split(".")
    setattr(getattr(config, group), name, value)  # after the checks: run() checks again
    return config


REFUSALS = [
    pytest.param(
        lambda tiny, where: compose_config(*tiny, "model.arch=resnet51"),  # torch-free, before any run
        ConfigError,
        ("model.arch", "resnet51", "did you mean resnet50?"),
        id="model-name-at-compose",
    ),
    pytest.param(
        lambda tiny, where: compose_config("mode=storage", "scenario=echo"),  # issue 33 probe: mode won unsaid
        ConfigError,
        ("scenario", "echo", "storage with mode=storage"),
        id="mode-and-scenario-naming-two",
    ),
    pytest.param(
        lambda tiny, where: run(compose_config(*tiny, "precision=amp_fp16"), launch_dir=where),  # preflight's
        ConfigError,
        ("precision", "amp_fp16", "fp32, tf32 or bf16 on a CPU"),
        id="precision-on-this-device",
    ),
    pytest.param(
        lambda tiny, where: run([*tiny, "allow_cpu=false"], launch_dir=where),
        DeviceError,
        ("allow_cpu", False, "true where no CUDA GPU is visible"),
        id="no-gpu",
        marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without CUDA"),
    ),
    pytest.param(
        lambda tiny, where: run(edited(tiny, "data.batch_size", "abc"), launch_dir=where),
        ConfigError,
        ("data.batch_size", "abc", "an integer"),
        id="edited-to-a-wrong-type",
    ),
    pytest.param(
        lambda tiny, where: run(edited(tiny, "data.batch_size", 0), launch_dir=where),
        ConfigError,
        ("data.batch_size", 0, "a positive integer"),
        id="edited-out-of-range",
    ),
    pytest.param(
        lambda tiny, where: run(edited(tiny, "data.batch_sise", 8), launch_dir=where),
        ConfigError,
        ("data.batch_sise", 8, "a key of data (did you mean data.batch_size?)"),
        id="edited-a-key-the-schema-has-not",
    ),
]


@pytest.mark.parametrize("call, kind, named", REFUSALS)
def test_what_the_command_refuses_raises_naming_the_key_and_leaves_nothing(tmp_path, tiny, call, kind, named):
    with pytest.raises(BenchError) as raised:
        call(tiny, tmp_path)
    exc = raised.value
    key, value, accepted = named
    assert type(exc) is kind and exc.exit_code == 2  # the command's exit code for it
    assert (exc.key, exc.value) == (key, value) and accepted in exc.accepted
    if kind is ConfigError:  # the command's one line, as it prints it after "[ERROR] "
        assert str(exc) == f"{key}={value!r} is not valid: accepted {exc.accepted}."
    assert list(tmp_path.iterdir()) == []  # no outputs/<date>/<time>, no MLflow store


@pytest.mark.slow  # starts git (the environment record's commit), as a run does before it opens its tracker
def test_a_run_that_cannot_be_tracked_with_tracking_required_raises_before_any_work(tmp_path, tiny):
    """The command's exit 1 for it ("this run cannot be tracked and tracking.required=true"), raised
    by bench.api.run: a tracking server that refuses connections (nothing listens on its port)."""
    from bench.errors import EXIT_FAILED
    from bench.rank_context import free_port

    nowhere = f"http://127.0.0.1:{free_port()}"
    overrides = [*tiny, f"tracking.uri={nowhere}", "tracking.required=true", "tracking.probe_timeout_s=2"]
    with pytest.raises(BenchError) as raised:
        run(overrides, out_dir=tmp_path / "run", launch_dir=tmp_path)
    assert raised.value.exit_code == EXIT_FAILED
    assert str(raised.value).startswith(
        f"this run cannot be tracked and tracking.required=true: MLflow server at {nowhere} cannot be reached"
    )
    assert not (tmp_path / "run" / "run_summary.json").exists()  # refused before the work


def test_the_defaults_are_the_schemas():
    assert default_config().model.arch == "resnet50"  # as `python -m bench` with no override


# ---- issue 39 items 17 and 18: the caller's process as it was; sweeps, groups and strings refused clearly ----


def process_state() -> tuple:
    environ = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}  # pytest's: setup, then call
    return environ, torch.get_num_threads(), torch.random.get_rng_state(), torch.backends.cudnn.benchmark


def assert_as_it_was(before: tuple) -> None:
    assert not [t.name for t in threading.enumerate() if t.name in ("fit-watch", "gpu-monitor")]
    environ, threads, rng, benchmark = process_state()
    assert environ == before[0]  # MLFLOW_HTTP_REQUEST_TIMEOUT, ..._MAX_RETRIES, ..._SUPPRESS_PRINTING_URL_TO_STDOUT
    assert (threads, benchmark) == (before[1], before[3]) and torch.equal(rng, before[2])


def fit_watches(seen: list, stop: threading.Event, on_first=None) -> threading.Thread:
    """A thread recording how many fit-watch threads run at once (`seen`), calling on_first() when one does."""

    def body():
        while not stop.is_set():
            seen.append(sum(t.name == "fit-watch" for t in threading.enumerate()))
            if seen[-1] and on_first is not None:
                on_first()
                return
            time.sleep(0.002)

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread


@pytest.fixture
def callers_state(tmp_path, monkeypatch, bench):
    """A tracked caller (MLflow's settings go through os.environ) with 1 torch thread and a seeded RNG."""
    monkeypatch.chdir(tmp_path)
    bench.with_store()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(1234)
    yield process_state()
    torch.set_num_threads(threads)


def a_run_then_a_ctrl_c_in_this_process(tiny: list) -> None:
    """The test below, in the caller's process (a child of pytest's worker: see there)."""
    torch.set_num_threads(1)
    torch.manual_seed(1234)
    before = process_state()
    assert run(" ".join(tiny)).ok  # split as a shell splits it
    assert_as_it_was(before)
    stop = threading.Event()
    fit_watches([], stop, on_first=lambda: os.kill(os.getpid(), signal.SIGINT))  # Ctrl-C inside the window
    with pytest.raises(KeyboardInterrupt):
        run([*tiny, "train.steps_per_epoch=400"])
    stop.set()
    assert_as_it_was(before)
    print("as it was after a run and after a Ctrl-C")


def test_a_run_and_a_ctrl_c_leave_the_callers_process_as_they_found_it(tmp_path, bench, tiny):
    """One run left three MLFLOW_* variables set, torch at 2 threads, its RNG reseeded and cuDNN's
    autotuner on; after Ctrl-C its fit-watch thread kept sampling. The run is given as one string.
    The caller is a Python process of its own, not pytest's worker: a Ctrl-C is raised wherever the
    main thread is, and once it landed inside logging's lock or a half-done import there, and the
    worker's later threads (moto's server, the reaper) waited on that lock for good."""
    bench.with_store()
    here = Path(__file__).parent
    child = subprocess.run(
        [sys.executable, "-c", f"import test_api; test_api.a_run_then_a_ctrl_c_in_this_process({tiny!r})"],
        cwd=tmp_path,
        env=bench.env(PYTHONPATH=os.pathsep.join([str(here), *sys.path])),
        capture_output=True,
        text=True,
        timeout=600,  # a hang guard
    )
    assert child.returncode == 0, child.stderr[-3000:]
    assert child.stdout.splitlines()[-1] == "as it was after a run and after a Ctrl-C"
    assert sorted(r.info.status for r in bench.runs()) == ["FINISHED", "KILLED"]


def test_runs_from_two_threads_take_turns_and_restore_the_callers_state(callers_state, tiny):
    """What a run sets is the process's: a second thread's run waits for the first's (a lock); each
    restores what it changed, so the caller finds its own state after both."""
    seen, stop, results, started = [], threading.Event(), [], threading.Event()
    first = threading.Thread(target=lambda: results.append(run([*tiny, "train.steps_per_epoch=100"])))
    second = threading.Thread(target=lambda: results.append(run(tiny)))
    fit_watches([], stop, on_first=lambda: (second.start(), started.set()))  # while the first measures
    watching = fit_watches(seen, stop)
    first.start()
    first.join(timeout=600)  # hang guards, these timeouts
    assert started.wait(timeout=600)
    second.join(timeout=600)
    stop.set()
    watching.join()
    assert len(results) == 2 and all(result.ok for result in results)
    assert max(seen) == 1  # never two measured windows at once
    assert_as_it_was(callers_state)


SWEEPS_AND_MISTAKES = [
    pytest.param(
        lambda tiny, where: run(["-m", *tiny, "seed=1,2"], launch_dir=where),
        "a sweep runs from the command line, python -m bench -m <overrides>; from Python, run() each job",
        id="sweep-flag",
    ),
    pytest.param(
        lambda tiny, where: compose_config(*tiny, "seed=1,2"),
        "Ambiguous value for argument 'seed=1,2': a sweep runs from the command line, python -m bench -m <overrides>; "
        "from Python, run() each job; for a list write key=[a,b]",
        id="sweep-values",
    ),
    pytest.param(
        lambda tiny, where: compose_config("experiment=cpu_smoke"),
        "experiment='cpu_smoke' is not valid: accepted +experiment=cpu_smoke: experiment is not in the defaults "
        "list, so it is added with a leading +.",
        id="group-without-plus",
    ),
    pytest.param(
        lambda tiny, where: run("+experiment=cpu_smoke 'model=small_cnn", launch_dir=where),
        'the overrides "+experiment=cpu_smoke \'model=small_cnn" cannot be split as a shell splits them: '
        "No closing quotation",
        id="unclosed-quote-in-a-string",
    ),
]


@pytest.mark.parametrize("call, says", SWEEPS_AND_MISTAKES)
def test_a_sweep_a_group_without_plus_and_a_bad_string_are_one_clear_refusal(tmp_path, tiny, call, says):
    with pytest.raises(BenchError) as raised:
        call(tiny, tmp_path)
    assert raised.value.exit_code == 2 and str(raised.value).startswith(says) and "\n" not in str(raised.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow  # bench.api.run_child starts a `python -m bench` (the fast tier's check found it)
def test_run_child_gives_back_what_run_gives_from_a_child_process_or_its_one_error_line(tmp_path):
    """Issue 41 §2: one child-process runner. bench.api.run_child runs `python -m bench` in a child
    (compare --rerun, gpu_check's DDP check, sweep_overhead) and returns run()'s RunResult: the typed
    record read back from the same files; a run that fails, the child's [ERROR] line; a refusal of the
    overrides, the BenchError run() raises, before any child or folder."""
    from bench.api import run_child
    from bench.echo import EchoMetrics

    echo = ["scenario=echo", "scenario.steps=3", "scenario.step_s=0.001", "tracking.enabled=false"]
    child, here = run_child(echo, tmp_path / "child"), run(echo, tmp_path / "here")
    assert child.ok and here.ok and child.error is None and child.seconds > 0
    assert isinstance(child.metrics, EchoMetrics) and isinstance(here.metrics, EchoMetrics)
    assert (child.metrics.steps, child.config.mode) == (here.metrics.steps, here.config.mode) == (3, "echo")
    failed = run_child(
        ["+experiment=digits_tta", f"data.root={tmp_path}/none", "tracking.enabled=false"], tmp_path / "f"
    )
    assert failed.exit_code == 2 and not failed.ok and failed.metrics is None
    assert failed.error.startswith("[ERROR] ") and f"{tmp_path}/none" in failed.error and "\n" not in failed.error
    with pytest.raises(ConfigError, match=r"^scenario.steps=-3 is not valid"):
        run_child(["scenario=echo", "scenario.steps=-3"], tmp_path / "refused")
    assert not (tmp_path / "refused").exists()
