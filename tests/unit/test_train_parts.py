"""The training scenario's parts in-process: the optimizer registry, the lr schedules, the
precision policy (on the CPU, plus GPU-less tests of the CUDA branches with torch.cuda mocked:
named `__mocked_gpu`) and the model registry. Configs come from the schema (the `compose`
fixture), never from hand-built dicts."""

from __future__ import annotations

import dataclasses
import itertools
import logging
from pathlib import Path

import pytest
import torch
import torchvision

from bench import config_dir
from bench.config import compose
from bench.errors import ConfigError
from bench.runtime.precision import build_precision
from bench.train.optim import build_optimizer, build_scheduler, effective_lr, lr_factor_fn

CONF = Path(config_dir())
CPU = torch.device("cpu")


def _override(value) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(str(v) for v in value) + "]"
    return str(value)


def group_cfg(group: str, option: str, **values):
    """The typed group config `python -m bench <group>=<option> <group>.<key>=<value> ...` runs with."""
    return getattr(compose(f"{group}={option}", *[f"{group}.{k}={_override(v)}" for k, v in values.items()]), group)


def sched(option: str, **values):
    return group_cfg("scheduler", option, **values)


def optim(option: str, **values):
    return group_cfg("optimizer", option, **values)


def precision(option: str, **values):
    return group_cfg("precision", option, **values)


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torchvision.models.resnet18(num_classes=10)


# --- lr_factor_fn ---------------------------------------------------------------------------


def test_warmup_is_linear_from_start_factor_to_one():
    cfg = sched("constant", lr_warmup_steps=10, warmup_start_factor=0.1)
    f = lr_factor_fn(cfg, total_steps=100, base_lr=0.5)
    assert f(0) == pytest.approx(0.1)
    for step in range(10):
        assert f(step) == pytest.approx(0.1 + 0.9 * step / 10)
    assert f(5) == pytest.approx(0.55)
    assert f(10) == pytest.approx(1.0)
    # strictly increasing during warm-up
    assert all(f(s) < f(s + 1) for s in range(10))


def test_constant_stays_one():
    f = lr_factor_fn(sched("constant"), total_steps=50, base_lr=0.1)
    assert [f(s) for s in (0, 1, 25, 50, 500)] == [1.0] * 5


def test_multistep_multiplies_by_gamma_at_each_milestone():
    cfg = sched("multistep", milestones=[10, 20], gamma=0.5)
    f = lr_factor_fn(cfg, total_steps=30, base_lr=0.1)
    assert f(0) == pytest.approx(1.0)
    assert f(9) == pytest.approx(1.0)
    assert f(10) == pytest.approx(0.5)
    assert f(19) == pytest.approx(0.5)
    assert f(20) == pytest.approx(0.25)
    assert f(29) == pytest.approx(0.25)


def test_multistep_yaml_defaults():
    cfg = sched("multistep")
    assert cfg.milestones == [100, 150] and cfg.gamma == pytest.approx(0.1)
    f = lr_factor_fn(cfg, total_steps=200, base_lr=0.1)
    assert (f(99), f(100), f(150)) == pytest.approx((1.0, 0.1, 0.01))


def test_multistep_after_warmup():
    cfg = sched("multistep", lr_warmup_steps=5, warmup_start_factor=0.0, milestones=[10], gamma=0.1)
    f = lr_factor_fn(cfg, total_steps=20, base_lr=1.0)
    assert f(0) == pytest.approx(0.0)
    assert f(5) == pytest.approx(1.0)
    assert f(10) == pytest.approx(0.1)


def test_cosine_goes_from_one_to_min_lr_ratio():
    base_lr, min_lr, total = 0.2, 0.002, 100
    f = lr_factor_fn(sched("cosine", min_lr=min_lr), total_steps=total, base_lr=base_lr)
    floor = min_lr / base_lr
    assert f(0) == pytest.approx(1.0)
    assert f(total // 2) == pytest.approx(floor + (1 - floor) * 0.5)
    assert f(total) == pytest.approx(floor)
    assert f(total + 10) == pytest.approx(floor)  # clamped past the end
    values = [f(s) for s in range(total + 1)]
    assert all(a >= b for a, b in itertools.pairwise(values))


def test_cosine_with_warmup_starts_decay_after_warmup():
    f = lr_factor_fn(sched("cosine", lr_warmup_steps=10, min_lr=0.0), total_steps=110, base_lr=1.0)
    assert f(0) == pytest.approx(0.01)  # schema default warmup_start_factor
    assert f(10) == pytest.approx(1.0)
    assert f(60) == pytest.approx(0.5)
    assert f(110) == pytest.approx(0.0, abs=1e-12)


def test_lambda_scheduler_applies_factor_to_optimizer_lr(model):
    opt = build_optimizer(model, optim("sgd"), lr=0.1, device=CPU)
    scheduler = build_scheduler(opt, sched("multistep", milestones=[2], gamma=0.1), total_steps=4, base_lr=0.1)
    lrs = []
    for _ in range(4):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        scheduler.step()
    assert lrs == pytest.approx([0.1, 0.1, 0.01, 0.01])


# --- build_optimizer ------------------------------------------------------------------------

OPTIMIZER_CLASSES = {
    "sgd": torch.optim.SGD,
    "adam": torch.optim.Adam,
    "adamw": torch.optim.AdamW,
    "adagrad": torch.optim.Adagrad,
    "adadelta": torch.optim.Adadelta,
}


def test_every_optimizer_option_is_tested():
    assert {p.stem for p in (CONF / "optimizer").glob("*.yaml")} == set(OPTIMIZER_CLASSES)


@pytest.mark.parametrize("name", sorted(OPTIMIZER_CLASSES))
def test_build_optimizer_class_and_lr(model, name):
    cfg = optim(name)
    opt = build_optimizer(model, cfg, lr=0.037, device=CPU)
    assert type(opt) is OPTIMIZER_CLASSES[name]
    assert opt.defaults["lr"] == pytest.approx(0.037)
    assert all(g["lr"] == pytest.approx(0.037) for g in opt.param_groups)
    if name != "sgd":
        assert opt.defaults["eps"] == pytest.approx(cfg.eps)
    n_params = sum(len(g["params"]) for g in opt.param_groups)
    assert n_params == len(list(model.parameters()))
    assert not opt.defaults.get("fused")  # never fused on the CPU


@pytest.mark.parametrize("name", sorted(OPTIMIZER_CLASSES))
def test_exclude_bn_bias_from_weight_decay(model, name):
    cfg = optim(name, weight_decay=0.01, exclude_bn_bias_from_wd=True)
    opt = build_optimizer(model, cfg, lr=0.01, device=CPU)
    assert len(opt.param_groups) == 2
    by_decay = {g["weight_decay"]: g["params"] for g in opt.param_groups}
    assert set(by_decay) == {0.0, 0.01}
    one_d = {id(p) for p in model.parameters() if p.ndim == 1}
    multi_d = {id(p) for p in model.parameters() if p.ndim > 1}
    assert one_d and multi_d
    assert {id(p) for p in by_decay[0.0]} == one_d
    assert {id(p) for p in by_decay[0.01]} == multi_d


@pytest.mark.parametrize("name", sorted(OPTIMIZER_CLASSES))
def test_without_exclusion_one_group_with_the_decay(model, name):
    opt = build_optimizer(model, optim(name, weight_decay=0.01, exclude_bn_bias_from_wd=False), lr=0.01, device=CPU)
    assert len(opt.param_groups) == 1
    assert opt.param_groups[0]["weight_decay"] == pytest.approx(0.01)


def test_adamw_yaml_excludes_bn_and_bias(model):
    cfg = optim("adamw")
    assert cfg.exclude_bn_bias_from_wd is True and cfg.weight_decay == pytest.approx(0.05)
    opt = build_optimizer(model, cfg, lr=1e-3, device=CPU)
    assert sorted(g["weight_decay"] for g in opt.param_groups) == pytest.approx([0.0, 0.05])


def test_sgd_momentum_and_nesterov_passed_through(model):
    opt = build_optimizer(model, optim("sgd", momentum=0.8, nesterov=True), lr=0.1, device=CPU)
    assert opt.defaults["momentum"] == pytest.approx(0.8)
    assert opt.defaults["nesterov"] is True


def test_adam_betas_passed_through(model):
    opt = build_optimizer(model, optim("adam", betas=[0.8, 0.99]), lr=1e-3, device=CPU)
    assert tuple(opt.defaults["betas"]) == pytest.approx((0.8, 0.99))


def test_optimizer_step_decays_weights_but_not_bn_or_bias():
    # zero gradients: AdamW then changes a parameter only through its decoupled weight decay
    torch.manual_seed(0)
    local = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    with torch.no_grad():
        local[1].weight.fill_(2.0)
        local[1].bias.fill_(1.0)
    opt = build_optimizer(local, optim("adamw", weight_decay=0.5), lr=0.1, device=CPU)
    before = {name: p.detach().clone() for name, p in local.named_parameters()}
    for p in local.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    after = dict(local.named_parameters())
    assert torch.allclose(after["0.weight"], before["0.weight"] * (1 - 0.1 * 0.5))
    for name in ("0.bias", "1.weight", "1.bias"):
        assert torch.equal(after[name], before[name]), name


# --- effective_lr ---------------------------------------------------------------------------


def test_effective_lr_linear_scaling_rule():
    sgd = optim("sgd", lr=0.1)
    assert effective_lr(sgd, sched("constant", scale_lr=True), global_batch=1024) == pytest.approx(0.4)
    assert effective_lr(sgd, sched("constant", scale_lr=True), global_batch=128) == pytest.approx(0.05)
    assert effective_lr(sgd, sched("constant", scale_lr=False), global_batch=1024) == pytest.approx(0.1)


# --- onecycle ---------------------------------------------------------------------------------


@pytest.mark.slow  # in-process, but composes an optimizer and a schedule for each of 4 optimizers: ~3 CPU-s
@pytest.mark.parametrize("name", ["sgd", "adagrad", "adam", "adadelta"])
def test_onecycle_runs_total_steps(model, name):
    total = 20
    opt = build_optimizer(model, optim(name), lr=0.05, device=CPU)
    scheduler = build_scheduler(opt, sched("onecycle"), total_steps=total, base_lr=0.05)
    assert isinstance(scheduler, torch.optim.lr_scheduler.OneCycleLR)
    lrs = []
    for _ in range(total):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        scheduler.step()
    assert max(lrs) == pytest.approx(0.05, rel=0.05)  # peaks at base_lr
    assert lrs[0] < 0.05 / 10 and lrs[-1] < 0.05 / 10  # rises from and falls back to small values
    peak = lrs.index(max(lrs))
    assert peak == pytest.approx(0.3 * total, abs=1.5)  # pct_start=0.3


def test_onecycle_leaves_zero_momentum_alone(model):
    opt = build_optimizer(model, optim("sgd", momentum=0.0), lr=0.1, device=CPU)
    scheduler = build_scheduler(opt, sched("onecycle"), total_steps=10, base_lr=0.1)
    opt.step()
    scheduler.step()
    assert opt.param_groups[0]["momentum"] == 0.0


def test_onecycle_warmup_steps_sets_the_rising_phase(model):
    total = 40
    opt = build_optimizer(model, optim("sgd"), lr=0.1, device=CPU)
    scheduler = build_scheduler(opt, sched("onecycle", lr_warmup_steps=10), total_steps=total, base_lr=0.1)
    lrs = []
    for _ in range(total):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        scheduler.step()
    assert lrs.index(max(lrs)) == 10


def test_a_onecycle_rise_longer_than_the_run_is_not_squeezed_into_it(model):
    """Issue 33.3: lr_warmup_steps past the end was clamped to 99.9% of the run (the peak reached
    anyway); the rise keeps its length, so the lr climbs as slowly as asked and never peaks."""
    opt = build_optimizer(model, optim("sgd"), lr=0.1, device=CPU)
    scheduler = build_scheduler(opt, sched("onecycle", lr_warmup_steps=100), total_steps=10, base_lr=0.1)
    lrs = []
    for _ in range(10):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        scheduler.step()
    assert all(a < b for a, b in itertools.pairwise(lrs)) and max(lrs) < 0.1 * 0.1  # 10 of its 100 rising steps


def test_what_of_the_schedule_a_run_does_not_reach_is_named_never_clamped():
    """Issue 33.3: the lines bench.train.build logs (rank 0) for a schedule the run does not reach."""
    from bench.train.optim import unreached

    asked = sched("multistep", milestones=[1, 100], milestone_unit="epochs")
    placed = dataclasses.replace(asked, milestones=[4, 301], milestone_unit="steps")  # 3 steps an epoch, 1 warm-up
    (line,) = unreached(asked, placed, trained=7, span=7)
    assert line.startswith("scheduler.milestones [100] of [1, 100] (in epochs) fall past this run's end (7 optimizer")
    in_steps = sched("multistep", milestones=[6, 7])
    assert "[7] of [6, 7] (in steps)" in unreached(in_steps, in_steps, trained=7, span=7)[0]  # step 7 is the 8th
    assert unreached(in_steps, in_steps, trained=8, span=8) == []
    warm = sched("constant", lr_warmup_steps=12)
    assert "scheduler.lr_warmup_steps=12 is past this run's end (12 optimizer steps" in unreached(warm, warm, 12, 12)[0]
    assert unreached(warm, warm, trained=13, span=13) == []  # the 13th step trains at optimizer.lr
    cosine = sched("cosine")
    assert "this run stops after 4" in unreached(cosine, cosine, trained=4, span=9)[0]  # benchmark.measure_steps
    assert unreached(cosine, cosine, trained=9, span=9) == []


# --- build_precision on the CPU -------------------------------------------------------------


def test_fp32_on_cpu_has_no_autocast():
    policy = build_precision(precision("fp32"), CPU)
    assert policy.autocast_dtype is None
    assert policy.scaler is None
    assert policy.memory_format == torch.contiguous_format
    assert policy.tf32 is False
    with policy.autocast():
        assert not torch.is_autocast_enabled("cpu")
        out = torch.nn.Conv2d(3, 4, 3)(torch.randn(1, 3, 8, 8))
    assert out.dtype == torch.float32
    assert policy.describe() == {
        "precision": "fp32",
        "autocast_dtype": "none",
        "grad_scaler": False,
        "tf32": False,
        "channels_last": False,
    }


def test_bf16_on_cpu_autocasts_conv_to_bfloat16():
    policy = build_precision(precision("bf16"), CPU)
    assert policy.autocast_dtype == torch.bfloat16
    assert policy.scaler is None
    assert policy.tf32 is False  # no TF32 on a CPU
    conv = torch.nn.Conv2d(3, 4, 3)
    x = torch.randn(1, 3, 8, 8)
    with policy.autocast():
        assert torch.is_autocast_enabled("cpu")
        out = conv(x)
    assert out.dtype == torch.bfloat16
    assert conv(x).dtype == torch.float32  # autocast ends with the context
    assert policy.describe()["autocast_dtype"] == "bfloat16"


def test_amp_fp16_on_cpu_raises_config_error():
    with pytest.raises(ConfigError) as info:
        build_precision(precision("amp_fp16"), CPU)
    assert info.value.key == "precision"
    assert "amp_fp16" in str(info.value)
    assert "CUDA" in str(info.value)


def test_tf32_on_cpu_warns_and_computes_fp32(caplog):
    with caplog.at_level(logging.WARNING, logger="bench.runtime.precision"):
        policy = build_precision(precision("tf32"), CPU)
    assert policy.tf32 is False
    assert policy.autocast_dtype is None
    assert "no effect on a CPU" in caplog.text


@pytest.mark.parametrize("option", ["fp32", "bf16"])
def test_channels_last_memory_format(option):
    policy = build_precision(precision(option, channels_last=True), CPU)
    assert policy.memory_format == torch.channels_last
    assert policy.describe()["channels_last"] is True
    x = torch.randn(2, 3, 8, 8).to(memory_format=policy.memory_format)
    assert x.is_contiguous(memory_format=torch.channels_last)


# --- CUDA branches with torch.cuda mocked (no GPU needed) -----------------------------------


def test_bf16_refused_on_gpu_without_bf16__mocked_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: False)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args, **kwargs: "Tesla V100-SXM2-16GB")
    with pytest.raises(ConfigError) as info:
        build_precision(precision("bf16"), torch.device("cuda", 0))
    assert info.value.key == "precision"
    assert "Tesla V100-SXM2-16GB" in str(info.value)
    assert "bfloat16" in str(info.value)


@pytest.fixture
def tf32_flags_on():
    """build_precision writes torch's global TF32 flags: start from True, restore afterwards.
    (Not monkeypatch: cuBLAS's flag is a computed attribute that newer pytest cannot undo.)"""
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def test_tf32_off_on_pre_ampere_gpu__mocked_gpu(monkeypatch, caplog, tf32_flags_on):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *args, **kwargs: (7, 0))
    with caplog.at_level(logging.WARNING, logger="bench.runtime.precision"):
        policy = build_precision(precision("tf32"), torch.device("cuda", 0))
    assert policy.tf32 is False
    assert torch.backends.cuda.matmul.allow_tf32 is False
    assert torch.backends.cudnn.allow_tf32 is False
    assert "Ampere" in caplog.text


def test_fp32_switches_tf32_off_on_gpu__mocked_gpu(tf32_flags_on):
    policy = build_precision(precision("fp32"), torch.device("cuda", 0))
    assert policy.tf32 is False
    assert torch.backends.cuda.matmul.allow_tf32 is False
    assert torch.backends.cudnn.allow_tf32 is False  # PyTorch's default is True for cuDNN


# --- the model registry -----------------------------------------------------------------------


@pytest.mark.slow  # in-process, but builds models: ~3 s
def test_models_come_from_torchvision_by_name_and_bench_adds_its_own():
    from bench.runtime.models import OWN, build_model, check_model, count_parameters

    resnet = compose("model=resnet18", "data.num_classes=7").model
    check_model(resnet)
    model = build_model(resnet)
    assert model.fc.out_features == 7 and count_parameters(model) > 0
    cifar = build_model(compose("model=cifar_resnet18", "data.num_classes=10").model)
    assert "cifar_resnet18" in OWN and cifar.conv1.stride == (1, 1) and isinstance(cifar.maxpool, torch.nn.Identity)
    vit = compose("model=vit_b_16", "data.image_size=32", "data.num_classes=5").model
    check_model(vit)
    out = build_model(vit)(torch.randn(1, 3, 32, 32))  # built for the configured input size
    assert out.shape == (1, 5)
    squeeze = compose("model.arch=squeezenet1_1", "data.num_classes=3").model  # no YAML, no code: just the name
    check_model(squeeze)
    assert build_model(squeeze)(torch.randn(1, 3, 64, 64)).shape == (1, 3)


def test_the_model_names_read_from_torchvisions_source_are_its_list():
    """The config check refuses an unknown model.arch before torch loads (compose_config too), from the
    names in torchvision's source: they must be exactly what torchvision itself lists."""
    import torchvision

    from bench.runtime.model_names import torchvision_names

    assert torchvision_names() == set(torchvision.models.list_models(module=torchvision.models))


def test_unknown_model_is_one_sentence_with_a_suggestion():
    from bench.runtime.models import check_model

    with pytest.raises(ConfigError) as info:
        check_model(compose("model.arch=resnet51").model)
    assert info.value.key == "model.arch" and "did you mean resnet50?" in str(info.value)


# --- what preflight refuses about the machine and the precision (issue 9) -----------------------------


def test_float16_autocast_on_cpu_blames_the_key_that_is_wrong():
    """precision=fp32 with precision.autocast_dtype=float16: the option is fine, the key is not."""
    with pytest.raises(ConfigError) as info:
        build_precision(precision("fp32", autocast_dtype="float16"), CPU)
    assert info.value.key == "precision.autocast_dtype" and "float16" in str(info.value)
    assert "precision='fp32'" not in str(info.value)


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["cpu_threads=1000"], "cpu_threads"),
        (["data.num_workers=1000"], "data.num_workers"),
        (["distributed=ddp", "distributed.nproc_per_node=1000"], "distributed.nproc_per_node"),
        (["data.batch_size=1000000000"], "data.batch_size"),
        (["data.image_size=100000"], "data.image_size"),
    ],
    ids=lambda v: v[-1] if isinstance(v, list) else v,
)
def test_what_cannot_fit_the_machine_is_refused_naming_the_key(overrides, key):
    from bench.train.scenario import TrainScenario

    with pytest.raises(ConfigError) as info:
        TrainScenario().preflight(compose("allow_cpu=true", *overrides))
    assert info.value.key == key and "\n" not in str(info.value)


def test_a_record_that_cannot_fit_in_memory_is_refused():
    from bench.iobench.scenario import StorageScenario

    with pytest.raises(ConfigError) as info:
        StorageScenario().preflight(compose("mode=storage", "storage.workload.record_size=1000000000000"))
    assert info.value.key == "storage.workload.record_size" and "GiB" in str(info.value)
    StorageScenario().preflight(compose("+experiment=storage_unet3d_h100"))  # the real workload fits


def test_a_folder_of_non_images_is_a_dataset_problem_before_the_run(tmp_path):
    from bench.errors import ConfigProblem
    from bench.train.scenario import TrainScenario

    for index in range(3):
        (tmp_path / "class0").mkdir(exist_ok=True)
        (tmp_path / "class0" / f"note{index}.jpg").write_text("not an image")
    with pytest.raises(ConfigProblem, match="none of its first 3 images can be decoded"):
        TrainScenario().preflight(compose("data=imagefolder", f"data.root={tmp_path}", "allow_cpu=true"))
    (tmp_path / "class1").mkdir()
    (tmp_path / "class1" / "readme.txt").write_text("x")
    for note in (tmp_path / "class0").iterdir():
        note.unlink()
    with pytest.raises(ConfigProblem, match="holds no images"):
        TrainScenario().preflight(compose("data=imagefolder", f"data.root={tmp_path}", "allow_cpu=true"))


def test_a_failed_checkpoint_write_is_read_back_typed_and_makes_the_run_a_problem():
    """The end-of-run checkpoint's failure is a typed CheckpointWrite; read back from the record's
    figures (run_summary.json: the key lands in the record's last spread group) it is found by the
    typed read, and the run reports it as a problem; a run that wrote its checkpoint has none."""
    from bench.train.report import TrainReport
    from bench.train.result import CheckpointWrite, RunExtras, TrainMetrics, TrainResult

    failed = CheckpointWrite(checkpoint_error="OSError: No space left on device (/runs/c.pt)")
    assert list(RunExtras(written=failed).figures()) == ["checkpoint_error"]
    written = CheckpointWrite("/runs/c.pt", 10, 0.5, 2e-8)
    assert list(RunExtras(written=written).figures(path=False)) == [
        "checkpoint_bytes",
        "checkpoint_write_seconds",
        "checkpoint_write_gbps",
    ]
    result = TrainResult(batch_size=8, measured_steps=3, window_seconds=1.0, precision={"precision": "fp32"})
    for figures, problem in ((failed.figures(), True), (written.figures(path=False), False)):
        record = TrainMetrics.from_metrics({"images_per_second": 1.0, **figures})
        assert CheckpointWrite.read(record.figure) == CheckpointWrite(**figures)
        problems = TrainReport(result=result, record=record).problems
        assert problems == (["the checkpoint could not be written: " + str(failed.checkpoint_error)] if problem else [])
