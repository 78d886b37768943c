"""Issue 11 end to end, in real processes: one training run with the
profiler, the breakdown pass, 3 repeats and MLflow's system metrics; a second run of the same
config and a deliberately slowed one (25x the pixels), which `python -m bench.compare` calls same
and slower (exit 1: the CI gate); `--rerun` of two echo runs, one 50x slower; an inference sweep
over the batch size, compared with itself through its MLflow parent run and its sweep directory."""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path
from types import SimpleNamespace

import pytest
from mlflow import MlflowClient

from bench.analysis.rounds import figure
from bench.tools.compare import main as compare

DEEP = [
    "profile.enabled=true",
    "profile.steps=2",
    "benchmark.breakdown=true",
    "benchmark.breakdown_steps=3",
    "benchmark.repeats=3",
    "tracking.system_metrics=true",
]


def _rows(path: Path) -> list:
    with path.open() as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def runs(tmp_path_factory, bench_at, tiny_args):
    root = tmp_path_factory.mktemp("deep")
    bench = bench_at(root).with_store()
    env = bench.env(MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL="0.5")
    # a torchvision model: its parameters and FLOPs are known figures
    deep = bench.run(*tiny_args, "model=resnet18", *DEEP, f"hydra.run.dir={root}/deep", env=env)
    same = bench.run(*tiny_args, "benchmark.repeats=3", f"hydra.run.dir={root}/same")
    # 25x the pixels: far beyond what a busy 2-core box can blur (a 2.3x slowdown was once called
    # "same" there); every run on one torch thread, as tiny_args says. Its 3 repeats of one step each
    # (not 3): the verdict is on the repeats' median images/s, and a 160-pixel step is most of this
    # fixture's CPU (4.2 -> ~2.4 CPU-s)
    one_step = [a for a in tiny_args if not a.startswith("train.steps_per_epoch=")]
    slowed = bench.run(
        *one_step,
        "train.steps_per_epoch=1",
        "benchmark.repeats=3",
        "data.image_size=160",
        f"hydra.run.dir={root}/slowed",
    )
    return SimpleNamespace(root=root, bench=bench, deep=deep, same=same, slowed=slowed)


def test_one_run_profiles_breaks_down_repeats_and_counts_flops(runs):
    metrics = runs.bench.metrics(runs.deep)
    run_dir = runs.root / "deep"
    # the window: 3 repeats of 3 steps, pooled as ever; the profiled and breakdown steps are not in it
    assert (
        metrics["measured_steps"] == 9 and metrics["total_images"] == 36 and len(_rows(run_dir / "step_times.csv")) == 9
    )
    assert metrics["images_per_second"] == pytest.approx(metrics["total_images"] / metrics["elapsed_seconds"])
    repeats = _rows(run_dir / "repeats.csv")
    assert [int(r["repeat"]) for r in repeats] == [1, 2, 3] and all(int(r["images"]) == 12 for r in repeats)
    assert metrics["repeats"] == 3
    # written at full precision: its median is the record's to the digit (compare reads this file; at 4
    # decimals, 2.5395 became "2.539" on compare's page where the summary's 2.53954... reads "2.540")
    assert statistics.median(float(r["images_per_second"]) for r in repeats) == metrics["images_per_second_median"]
    assert (
        metrics["images_per_second_ci95_low"]
        <= metrics["images_per_second_median"]
        <= metrics["images_per_second_ci95_high"]
    )
    assert metrics["images_per_second_min"] <= metrics["images_per_second"] <= metrics["images_per_second_max"]
    assert isinstance(metrics["stable"], bool)
    # the breakdown: shares of a step
    shares = [metrics[f"breakdown_{p}_share"] for p in ("data", "forward", "backward", "optimizer")]
    assert metrics["breakdown_steps"] == 3 and sum(shares) == pytest.approx(1.0)
    # size and FLOPs in every training result
    assert metrics["parameters"] == 11181642 and metrics["gflops_per_image_forward"] > 0
    assert metrics["gflops_per_image_fwd_bwd"] == pytest.approx(3 * metrics["gflops_per_image_forward"], rel=0.05)
    assert metrics["achieved_tflops"] > 0 and "mfu" not in metrics  # a CPU: no peak, no guess
    # the profiler's files
    trace = json.loads((run_dir / "trace_rank0.json").read_text())
    assert len(trace["traceEvents"]) > 100
    assert "Self CPU" in (run_dir / "profile_top_ops.txt").read_text()

    client = MlflowClient(tracking_uri=runs.bench.uri)
    (run,) = [
        r
        for r in runs.bench.runs()
        if r.info.run_id == json.loads((run_dir / "run_summary.json").read_text())["mlflow_run_id"]
    ]
    assert run.info.status == "FINISHED"
    assert [
        m.value
        for m in sorted(client.get_metric_history(run.info.run_id, "repeat_images_per_second"), key=lambda m: m.step)
    ] == pytest.approx([float(r["images_per_second"]) for r in repeats], rel=1e-4)
    assert run.data.metrics["breakdown_step_ms"] == pytest.approx(metrics["breakdown_step_ms"])
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"trace_rank0.json", "profile_top_ops.txt", "repeats.csv"} <= artifacts
    assert any(key.startswith("system/cpu_utilization_percentage") for key in run.data.metrics), run.data.metrics


def test_compare_calls_the_same_config_same_and_a_slowed_one_slower_with_exit_1(runs, capsys):
    for proc in (runs.same, runs.slowed):
        runs.bench.metrics(proc)
    out = runs.root / "cmp-same"
    # Two processes of one config on a busy 2-core box (this suite, at 3 test files at a time) can
    # differ by 2x (issue 20): "same" is asked within 80%, a 25x heavier config (0.12-0.23 of the
    # throughput when quiet) beyond 30% against its plain twin (the profiled "deep" run, slowed 2.5x
    # by this suite's load, once made the ratio 0.547: not beyond 50%). Such a box
    # also makes the runs unfit to measure (other processes' CPU): --judge-unfit asks for the verdict anyway.
    assert (
        compare(
            [str(runs.root / "deep"), str(runs.root / "same"), "--threshold", "80%", "--out", str(out), "--judge-unfit"]
        )
        == 0
    )
    printed = capsys.readouterr().out
    # The gate holds (exit 0, never "slower"); "same" itself is not asked: in-process repeats miss the
    # spread between processes, and under this suite's load the profiled baseline once ran 2x slower
    # than its twin ("faster"). That spread is what --rerun measures (the next test).
    assert printed.splitlines()[1].split()[-1] in ("same", "faster") and "slower" not in printed, printed
    assert {p.name for p in out.iterdir()} == {"compare.md", "compare.html", "compare.png"}

    gate = runs.bench.run(
        str(runs.root / "same"),
        str(runs.root / "slowed"),
        "--threshold",
        "30%",
        "--out",
        str(runs.root / "cmp-slowed"),
        "--judge-unfit",
        module="bench.compare",
    )
    assert gate.returncode == 1, gate.stdout + gate.stderr
    assert gate.stdout.splitlines()[1].endswith(" slower"), gate.stdout
    assert "verdict: slower: " in gate.stderr and ", beyond the 30% threshold\n" in gate.stderr
    assert "Traceback" not in gate.stderr
    page = (runs.root / "cmp-slowed" / "compare.html").read_text()
    assert "slower" in page and "data:image/png;base64," in page


def test_the_compare_page_opens_in_a_real_browser(runs, browser):
    """Issue 20, part 4: compare.html in headless Chromium: no console error, the plot loads, and
    the table holds both sides' images/s, the ratio and the verdict."""
    assert (runs.root / "cmp-slowed" / "compare.html").is_file()  # written by the test above (same module)
    page = browser.open(runs.root / "cmp-slowed" / "compare.html")
    assert page.console_errors == []
    ((loaded, width, _),) = page.images
    assert loaded and width > 100
    # both sides ran 3 repeats: the figures compared are the repeats' medians, as the table writes a
    # figure (bench.analysis.rounds.figure: one decimal from 10 up, three below)
    base = json.loads((runs.root / "same" / "run_summary.json").read_text())["results"]["images_per_second_median"]
    cand = json.loads((runs.root / "slowed" / "run_summary.json").read_text())["results"]["images_per_second_median"]
    assert figure(base) in page.cells and figure(cand) in page.cells and "slower" in page.cells, page.cells


# the cheapest scenario (echo): 8 fresh processes that each sleep half a second at most. The one training
# case of --rerun is tests/e2e/test_compare_rerun_runs.py
ECHO = ["scenario=echo", "scenario.steps=10"]


def test_compare_rerun_runs_both_configs_again_interleaved_and_calls_the_slowed_one_slower(runs):
    """Issue 20: a verdict that holds between processes. Both configs run again as fresh processes,
    A-B-B-A, 2 rounds; the config whose step sleeps 50x longer is slower beyond the 50% threshold and its
    whole interval beyond the noise floor. This suite's load can make fresh processes unfit to measure
    (other processes' CPU), which --rerun counts as a plain compare does (exit 3, not judged:
    tests/e2e/test_compare_rerun_runs.py): --judge-unfit asks for the verdict anyway, as above.
    Issue 30 item 4: a line before the first process, a line per round, and the plain compare's page."""
    root = runs.root / "echo"
    for name, step_s in (("fast", "0.001"), ("slow", "0.05")):
        runs.bench.metrics(runs.bench.run(*ECHO, f"scenario.step_s={step_s}", f"hydra.run.dir={root}/{name}"))
    out = root / "rerun"
    gate = runs.bench.run(
        str(root / "fast"),
        str(root / "slow"),
        "--rerun",
        "2",
        "--threshold",
        "50%",
        "--out",
        str(out),
        "--judge-unfit",
        module="bench.compare",
    )
    assert gate.returncode == 1, gate.stdout + gate.stderr
    assert gate.stdout.startswith(
        "rerun: 2 rounds of A-B-B-A (A the baseline, B the candidate), 8 fresh python -m bench"
    ), gate.stdout
    rounds = [line for line in gate.stdout.splitlines() if line.startswith("round ")]
    assert len(rounds) == 2 and all(line.count(",") == 2 for line in rounds), gate.stdout  # each side twice a round
    assert all("steps/s" in line for line in rounds), gate.stdout  # echo's own figure, not images/s
    assert "verdict: slower: " in gate.stderr and "% noise floor\n" in gate.stderr, gate.stdout + gate.stderr
    assert "Traceback" not in gate.stderr
    assert {p.name for p in out.iterdir()} == {"compare.md", "compare.html", "compare.png", "rerun"}
    page = (out / "compare.html").read_text()
    assert "<td>slower</td>" in page and "data:image/png;base64," in page and "2 rounds of fresh processes" in page
    assert sorted(p.name for p in (out / "rerun").iterdir()) == [
        "baseline-1",
        "baseline-2",
        "baseline-3",
        "baseline-4",
        "candidate-1",
        "candidate-2",
        "candidate-3",
        "candidate-4",
    ]
    assert (out / "rerun" / "candidate-1" / ".hydra" / "overrides.yaml").read_text().count("scenario.step_s=0.05") == 1


@pytest.fixture(scope="module")
def inference_sweep(tmp_path_factory, bench_at, tiny_args):
    root = tmp_path_factory.mktemp("infer")
    bench = bench_at(root).with_store()
    args = [a for a in tiny_args if not a.startswith(("data.batch_size=", "train.steps_per_epoch="))]
    # tiny's own model (small_cnn), not resnet18: nothing below depends on the architecture but the run
    # name that names it, and the sweep's worker server then imports no torchvision (bench.runtime.scenario)
    proc = bench.run(
        "-m", "mode=inference", *args, "data.batch_size=1,4", "train.steps_per_epoch=4", f"hydra.sweep.dir={root}/sweep"
    )
    return SimpleNamespace(root=root, bench=bench, proc=proc, dir=root / "sweep")


def test_an_inference_sweep_reports_latency_percentiles_per_batch_size(inference_sweep):
    proc = inference_sweep.proc
    assert proc.returncode == 0, proc.stdout + proc.stderr
    finals = [json.loads(line)["radix_metrics"] for line in proc.stdout.splitlines() if line.startswith('{"radix')]
    assert [m["batch_size"] for m in finals] == [1, 4] and all(m["mode"] == "inference" for m in finals)
    for m in finals:
        assert m["measured_steps"] == 4 and m["total_images"] == 4 * m["batch_size"]
        assert 0 < m["latency_ms_p50"] <= m["latency_ms_p95"] <= m["latency_ms_p99"]
        assert m["gflops_per_image_forward"] > 0 and "step_time_ms_p50" not in m
    for job in ("0", "1"):
        assert len(_rows(inference_sweep.dir / job / "latency.csv")) == 4
    report = (inference_sweep.dir / "report" / "report.md").read_text()
    assert "latency p99 ms" in report and (inference_sweep.dir / "report" / "latency_distribution.png").is_file()
    client = MlflowClient(tracking_uri=inference_sweep.bench.uri)
    children = [r for r in inference_sweep.bench.runs() if "mlflow.parentRunId" in r.data.tags]
    assert len(children) == 2 and all(r.info.status == "FINISHED" for r in children)
    assert all(r.data.tags["mlflow.runName"].startswith("infer-small_cnn-fp32-bs") for r in children)
    assert all(len(client.get_metric_history(r.info.run_id, "latency_ms")) == 4 for r in children)


def test_a_sweep_compared_through_mlflow_is_matched_by_batch_size_and_logged(inference_sweep, capsys):
    assert inference_sweep.proc.returncode == 0
    bench = inference_sweep.bench
    (parent,) = [r for r in bench.runs() if r.data.tags.get("sweep") == "parent"]
    out = inference_sweep.root / "cmp"
    assert (
        compare(
            [
                str(inference_sweep.dir),
                parent.info.run_id,
                "--tracking-uri",
                bench.uri,
                "--out",
                str(out),
                "--judge-unfit",
            ]
        )
        == 0
    )  # the same runs both sides; on a busy box, unfit
    printed = capsys.readouterr()
    rows = printed.out.splitlines()[1:]
    assert [row.split()[0] for row in rows] == ["data.batch_size=1", "data.batch_size=4"], printed.out
    assert [row.split()[-1] for row in rows] == ["same", "same"], printed.out
    assert f"compare: the same sweep on both sides ({inference_sweep.dir}): " in printed.err  # its MLflow runs
    client = MlflowClient(tracking_uri=bench.uri)
    assert {a.path for a in client.list_artifacts(parent.info.run_id, "compare")} == {
        "compare/compare.md",
        "compare/compare.html",
        "compare/compare.png",
    }
    children = [client.get_run(r.info.run_id) for r in bench.runs() if "mlflow.parentRunId" in r.data.tags]
    assert all(c.data.tags["compare.verdict"] == "same" for c in children)
    assert all(c.data.metrics["throughput_ratio_vs_baseline"] == pytest.approx(1.0, rel=1e-3) for c in children)
