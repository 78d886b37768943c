"""The config layer in-process: every group option and experiment composes into the typed
schema; every value check of the schema is one sentence naming the key, the value and what is
accepted; Hydra's own errors are reworded the same way; the CLI stays import-light.

No torch here except where a check needs the device or the model registry.
"""

from __future__ import annotations

import io
import json
import pickle
import shutil
from pathlib import Path

import pytest
from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from omegaconf import OmegaConf

from bench import config_dir
from bench.config import BenchConfig, as_plain, load, register_configs
from bench.config.argv import mode_is_the_command_lines
from bench.config.data import Split
from bench.config.hydra_errors import one_line
from bench.config.schema import AutocastDtype
from bench.errors import ConfigError, ConfigProblem

register_configs()

CONF = Path(config_dir())
GROUPS = ("model", "data", "precision", "optimizer", "scheduler", "distributed", "storage")
NOT_RUN_GROUPS = {"experiment", "hydra", "scenario"}  # +experiment= / Hydra's own / the scenarios' test below


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


GROUP_OPTIONS = [(group, option) for group in GROUPS for option in _options(group)]
EXPERIMENTS = _options("experiment")


def _composed(overrides: list[str] | None = None, conf: Path | str = CONF):
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        return hydra_compose(config_name="config", overrides=overrides or [])


def refused(compose, *overrides: str) -> str:
    """The one sentence a config is refused with (compose raises it before anything runs)."""
    with pytest.raises((ConfigError, ConfigProblem)) as info:
        compose(*overrides)
    message = str(info.value)
    assert "\n" not in message
    return message


# ---- composing -----------------------------------------------------------------------------------


def test_every_config_group_directory_is_covered():
    groups = {p.name for p in CONF.iterdir() if p.is_dir() and not p.name.startswith("_")}
    assert groups - NOT_RUN_GROUPS == set(GROUPS)
    for group in GROUPS:
        assert _options(group), f"conf/{group}/ has no option"
    assert EXPERIMENTS


def test_default_config_is_typed(compose):
    config = compose()
    assert isinstance(config, BenchConfig)
    assert config.model.arch == "resnet50" and config.precision.name == "fp32"
    assert config.optimizer.name == "sgd" and config.scheduler.name == "constant"
    assert config.data.name == "synthetic" and config.data.split is Split.train
    assert config.model.num_classes == 1000 and isinstance(config.model.num_classes, int)  # interpolation resolved
    assert config.allow_cpu is False


# data options load only with data.root set (the schema checks it is there; preflight checks the disk)
NEEDS_ROOT = {"imagefolder", "cifar100", "shards"}


@pytest.mark.slow  # in-process, but composes every option of every group: ~8 CPU-s
@pytest.mark.parametrize(("group", "option"), GROUP_OPTIONS, ids=[f"{g}={o}" for g, o in GROUP_OPTIONS])
def test_every_group_option_composes_and_loads(compose, tmp_path, group, option):
    overrides = [f"{group}={option}"]
    if group == "data" and option in NEEDS_ROOT:
        overrides.append(f"data.root={tmp_path}")
    config = compose(*overrides)
    node = getattr(config, group)
    assert (node.arch if group == "model" else node.name) == option
    # the option's YAML values made it into the typed config
    plain = as_plain(config)
    raw = OmegaConf.to_container(OmegaConf.load(CONF / group / f"{option}.yaml"), resolve=False)
    for key, value in raw.items():
        assert plain[group][key] == value, f"{group}.{key}"


@pytest.mark.parametrize("group, option", GROUP_OPTIONS, ids=[f"{g}={o}" for g, o in GROUP_OPTIONS])
def test_option_yaml_holds_only_what_differs_from_the_schema(group, option):
    """The schema is the one source of defaults: an option file never repeats one (its name aside)."""
    defaults = as_plain(BenchConfig())[group]
    raw = OmegaConf.to_container(OmegaConf.load(CONF / group / f"{option}.yaml"), resolve=False)
    repeated = {k: v for k, v in raw.items() if k not in ("name", "arch") and defaults.get(k) == v}
    assert not repeated, f"conf/{group}/{option}.yaml repeats schema defaults: {repeated}"


@pytest.mark.slow  # in-process, but composes every preset: ~6 CPU-s
@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_composes_and_loads(compose, experiment):
    assert isinstance(compose(f"+experiment={experiment}"), BenchConfig)


GPU_PRESETS = {
    # preset: (precision, autocast dtype, grad scaler)
    "a100_bf16": ("bf16", "bfloat16", False),
    "h100_bf16": ("bf16", "bfloat16", False),
    "v100_amp": ("amp_fp16", "float16", True),
    "t4_amp": ("amp_fp16", "float16", True),
}


@pytest.mark.parametrize("experiment", sorted(GPU_PRESETS))
def test_gpu_presets(compose, experiment):
    config = compose(f"+experiment={experiment}")
    name, dtype, scaler = GPU_PRESETS[experiment]
    assert config.precision.name == name
    assert config.precision.autocast_dtype == dtype
    assert config.precision.grad_scaler is scaler
    assert config.precision.channels_last is True
    assert config.model.arch == "resnet50"
    assert config.data.batch_size == 256
    assert config.allow_cpu is False


def test_cpu_smoke_experiment(compose):
    config = compose("+experiment=cpu_smoke")
    assert config.allow_cpu is True
    assert config.model.arch == "resnet18"
    assert config.data.image_size == config.model.image_size == 64
    assert config.model.num_classes == config.data.num_classes == 100
    assert config.precision.name == "fp32"


def test_storage_presets_name_their_accelerators(compose):
    config = compose("+experiment=storage_resnet50_h100", "storage.accelerators=4")
    assert config.mode == "storage" and config.storage.accelerators == 4
    assert config.tracking.run_name == "storage-resnet50-h100-c4"


def test_storage_is_where_and_the_benchmark_in_one_group(compose):
    """StorageConfig inherits StorageLocation (where: bench.storage, checkpoints, shards) and
    StorageBenchmarkConfig (mode=storage's keys): one group, every key at the path it always had,
    the where first (the order of --cfg job and .hydra/config.yaml)."""
    from dataclasses import fields

    from bench.config.storage import StorageBenchmarkConfig, StorageConfig, StorageLocation

    storage = compose(
        "+experiment=storage_unet3d_h100",
        "storage=s3",
        "storage.bucket=b",
        "storage.runs=3",
        "storage.timeout_s=7",
        "storage.workload.num_files=1000",
    ).storage
    assert isinstance(storage, StorageLocation) and isinstance(storage, StorageBenchmarkConfig)
    assert (storage.bucket, storage.timeout_s, storage.runs, storage.workload.num_files) == ("b", 7.0, 3, 1000)
    location, benchmark = [f.name for f in fields(StorageLocation)], [f.name for f in fields(StorageBenchmarkConfig)]
    assert [f.name for f in fields(StorageConfig)] == location + benchmark and not set(location) & set(benchmark)
    with pytest.raises(ConfigError, match=r"^storage\.runs=0 is not valid"):
        StorageBenchmarkConfig(runs=0)  # each part checks its own keys, under the group's name
    with pytest.raises(ConfigError, match=r"^storage\.max_attempts=0 is not valid"):
        StorageLocation(max_attempts=0)


def test_command_line_group_choice_beats_experiment_default(compose):
    # the errors tests rely on this: precision=amp_fp16 wins over cpu_smoke's fp32
    config = compose("precision=amp_fp16", "+experiment=cpu_smoke")
    assert config.precision.name == "amp_fp16"
    assert config.model.arch == "resnet18"


def test_the_same_overrides_compose_once_and_each_caller_gets_its_own_copy(monkeypatch):
    import hydra

    from bench.config import composed

    made = []
    monkeypatch.setattr(hydra, "compose", lambda *a, **k: made.append(k["overrides"]) or hydra_compose(*a, **k))
    overrides = ("+experiment=cpu_smoke", "data.batch_size=5", "optimizer=adam")
    first = composed(*overrides)
    first.data.batch_size = 999  # the caller's to change
    made.clear()
    again = composed(*overrides)
    assert made == []  # not composed again
    assert again.data.batch_size == 5 and again.optimizer.name == "adam" and again is not first
    again.model.arch = "changed"
    assert composed(*overrides).model.arch == "resnet18"


def test_a_config_file_changed_is_composed_again(monkeypatch, tmp_path):
    import bench
    from bench.config import compose

    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    monkeypatch.setattr(bench, "config_dir", lambda: str(conf))
    assert compose("model=small_cnn").model.image_size == 224
    (conf / "model" / "small_cnn.yaml").write_text("arch: small_cnn\nimage_size: 48\n")
    assert compose("model=small_cnn").model.image_size == 48
    (conf / "model" / "tiny.yaml").write_text("arch: small_cnn\nimage_size: 40\n")  # a new option
    assert compose("model=tiny").model.image_size == 40


def test_a_folder_on_hydras_search_path_is_composed_every_time(tmp_path):
    from bench.config import compose

    (tmp_path / "model").mkdir()
    extra = ("hydra.searchpath=[file://" + str(tmp_path) + "]", "model=extra")
    for size in (40, 44):
        (tmp_path / "model" / "extra.yaml").write_text(f"arch: small_cnn\nimage_size: {size}\n")
        assert compose(*extra).model.image_size == size


# ---- scenarios: an option of conf/scenario/ each, `mode=<name>` choosing it too (issue 35) ----------

SCENARIOS = _options("scenario")


@pytest.mark.slow  # in-process, but composes and pickles every scenario: ~1.7 CPU-s
@pytest.mark.parametrize("name", SCENARIOS)
def test_every_scenario_is_chosen_by_group_or_by_mode_and_its_config_pickles(compose, name):
    """A launcher's workers and a Slurm job get the config pickled: it pickles for every scenario (its
    class is defined in source, never built at run time), and `mode=<name>` chooses what `scenario=<name>`
    does. Its `_target_` is in no file's or MLflow param's config, nor in `--cfg job`."""
    from bench.launch.preview import job_config

    config = compose(f"scenario={name}")
    assert config.mode == name and compose(f"mode={name}") == config
    assert pickle.loads(pickle.dumps(config)) == config
    shown = io.StringIO()
    assert job_config([f"mode={name}", "--cfg", "job"], shown) is None
    assert "_target_" not in json.dumps(as_plain(config)) + shown.getvalue()
    assert f"\nmode: {name}\n" in shown.getvalue()


def test_a_preset_that_still_sets_mode_gets_that_scenario(compose, tmp_path):
    """A user's YAML of an earlier release says `mode: storage` (the shipped presets now say `override
    /scenario: storage`): mode, set after the group chose, wins. A class no option names is refused: the
    group is the one list (an old run is read back through it)."""
    assert refused(compose, "scenario._target_=mine.Mine") == (
        "scenario._target_='mine.Mine' is not valid: accepted the class an option of conf/scenario/ names."
    )
    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    (conf / "experiment" / "old.yaml").write_text("# @package _global_\nmode: storage\nstorage:\n  accelerators: 2\n")
    config = load(_composed(["+experiment=old"], conf=conf))
    assert config.mode == "storage" and type(config.scenario).__name__ == "StorageScenario"
    assert load(_composed(["+experiment=storage_hosts1", "mode=storage"])).mode == "storage"  # both spellings


def test_no_file_of_conf_sets_hydra_mode():
    """`python -m bench` skips Hydra's compose that reads hydra.mode where only -m can set it
    (bench.config.argv.mode_is_the_command_lines): that holds while no file of conf/ sets it."""
    setting = []
    for path in CONF.rglob("*.yaml"):
        raw = OmegaConf.to_container(OmegaConf.load(path), resolve=False) or {}
        hydra_node = raw if path.relative_to(CONF).parts[0] == "hydra" else raw.get("hydra") or {}
        if "mode" in hydra_node:
            setting.append(str(path.relative_to(CONF)))
    assert not setting


@pytest.mark.parametrize(
    ("argv", "only_dash_m"),
    [
        (["-m", "+experiment=cpu_smoke", "seed=1,2", "hydra.sweep.dir=x", "hydra/launcher=slurm_local"], True),
        (["--config-dir", "mine", "+experiment=mine"], False),
        (["--config-dir=mine", "+experiment=mine"], False),
        (["-cd", "mine"], False),
        (["--config-name", "other"], False),
        (["-cp", "elsewhere"], False),
        (["hydra.mode=MULTIRUN"], False),
        (["+hydra.mode=RUN", "-m"], False),
        (["hydra.searchpath=[file:///mine]"], False),
    ],
)
def test_only_the_command_line_can_set_the_mode_unless_it_brings_configs_or_names_the_mode(argv, only_dash_m):
    assert mode_is_the_command_lines(argv) is only_dash_m


@pytest.mark.parametrize("model", ["resnet50", "cifar_resnet18", "vit_b_16"])
def test_model_shape_follows_data_by_interpolation(compose, model):
    cfg = _composed([f"model={model}", "data.num_classes=10", "data.image_size=32"])
    assert OmegaConf.is_interpolation(cfg.model, "num_classes")
    assert OmegaConf.is_interpolation(cfg.model, "image_size")
    config = load(cfg)
    assert config.model.num_classes == 10 and config.model.image_size == 32


def test_model_shape_can_still_be_set_explicitly(compose):
    config = compose("model.num_classes=7", "data.num_classes=10")
    assert config.model.num_classes == 7 and config.data.num_classes == 10


def test_choices_are_enums_that_read_as_plain_strings(compose):
    config = compose("precision=bf16")
    assert config.precision.autocast_dtype is AutocastDtype.bfloat16
    assert f"{config.precision.name}" == "bf16" and str(config.precision.autocast_dtype) == "bfloat16"
    plain = as_plain(config)
    assert plain["precision"]["autocast_dtype"] == "bfloat16" and type(plain["precision"]["autocast_dtype"]) is str
    assert "defaults" not in plain


def test_deprecated_spellings_still_work(compose, caplog):
    config = compose("mode=storage", "scheduler.warmup_steps=7", "storage.clients=3")
    assert config.scheduler.lr_warmup_steps == 7 and config.scheduler.warmup_steps is None
    assert config.storage.accelerators == 3 and config.storage.clients is None
    assert "scheduler.warmup_steps is deprecated: use scheduler.lr_warmup_steps" in caplog.text
    assert "storage.clients is deprecated: use storage.accelerators" in caplog.text


# ---- refused by the schema, in one sentence ----------------------------------------------------------


def test_secret_looking_key_is_never_echoed(compose):
    line = refused(compose, "+storage.secret_access_key=s3cr3t-canary")
    assert line.startswith("storage.secret_access_key=<hidden> is not valid: accepted a key of storage")
    assert "s3cr3t-canary" not in line


def test_endpoint_with_credentials_is_refused_without_echoing_them(compose):
    line = refused(compose, "storage=s3", "storage.bucket=b", "storage.endpoint=http://user:canary-pw@minio:9000")
    assert "canary-pw" not in line and "AWS_ACCESS_KEY_ID" in line


# ---- Hydra's errors, reworded (each bad override's sentence: tests/reliability/bad_inputs.py) ----------


def test_unknown_key_in_a_yaml_option_is_refused(tmp_path):
    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    (conf / "model" / "typo.yaml").write_text("archh: resnet50\n")
    assert load(_composed(["model=resnet18"], conf=conf)).model.arch == "resnet18"  # the copy works
    with pytest.raises(Exception) as info:
        _composed(["model=typo"], conf=conf)
    assert "model.archh" in one_line(info.value) and "did you mean model.arch?" in one_line(info.value)


def test_unknown_key_in_an_experiment_is_refused(tmp_path):
    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    (conf / "experiment" / "typo.yaml").write_text("# @package _global_\ndata:\n  batchsize: 8\n")
    with pytest.raises(Exception) as info:
        _composed(["+experiment=typo"], conf=conf)
    assert "data.batchsize" in one_line(info.value)


# ---- checks that need the world outside the config (the training scenario's preflight) -----------------


@pytest.mark.slow  # in-process, but composes four configs and builds their models: ~2 CPU-s
def test_preflight_checks_the_dataset_then_the_device_then_the_model(compose, tmp_path):
    from bench.train.scenario import TrainScenario

    scenario = TrainScenario()
    with pytest.raises(ConfigProblem, match="does not exist or is not a directory"):
        scenario.preflight(compose("data=imagefolder", f"data.root={tmp_path}/nope", "allow_cpu=true"))
    with pytest.raises(ConfigError, match=r"model.arch='resnet51' is not valid: .*did you mean resnet50\?"):
        scenario.preflight(compose("model.arch=resnet51", "allow_cpu=true"))
    with pytest.raises(
        ConfigError, match=r"data.image_size=40 is not valid: accepted a multiple of 16 for model=vit_b_16"
    ):
        scenario.preflight(compose("model=vit_b_16", "data.image_size=40", "allow_cpu=true"))
    scenario.preflight(compose("model.arch=convnext_tiny", "allow_cpu=true"))  # any torchvision model


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the CPU-only path")
def test_preflight_refuses_the_cpu_unless_allowed(compose):
    from bench.errors import DeviceError
    from bench.train.scenario import TrainScenario

    with pytest.raises(DeviceError, match="CUDA not available and allow_cpu=false"):
        TrainScenario().preflight(compose())


# ---- issue 18, item 12: values that failed late (a traceback, or silently) and are refused now ----------


def test_seams_defaults_and_what_inference_may_set_still_load(compose):
    """The refusals above leave the defaults, an inference run's own keys and the caps' edges alone."""
    compose("mode=inference", "train.steps_per_epoch=5", "train.epochs=2", "profile.enabled=true", "profile.steps=100")
    compose("benchmark.breakdown=true", "benchmark.breakdown_steps=1000", "data.num_classes=1000000")
    compose("scheduler=cosine", "scheduler.min_lr=0.1", "optimizer.betas=[0,0.5]", "scheduler.gamma=2")
    compose("scheduler=cosine", "scheduler.min_lr=0.5", "scheduler.scale_lr=true")  # lr scaled: compared at run time


def test_gpu_presets_point_to_the_published_figures_and_differ_where_the_card_does(compose):
    """Issue 21: the preset comments pointed to a README table that moved to docs/performance.md,
    and a100_bf16 and h100_bf16 were the same file."""
    for preset in ("a100_bf16", "h100_bf16"):
        text = (CONF / "experiment" / f"{preset}.yaml").read_text()
        assert "docs/performance.md" in text and "README" not in text
    assert "## Expected performance" in (CONF.parent / "docs" / "performance.md").read_text()
    a100, h100 = compose("+experiment=a100_bf16"), compose("+experiment=h100_bf16")
    assert h100.train.steps_per_epoch > a100.train.steps_per_epoch  # the faster card gets a window as long
    assert h100.data.batch_size == a100.data.batch_size == 256  # both 80 GB cards hold it


# ---- issue 40.3: a preset's optimizer values belong to the optimizer it names ------------------------


@pytest.mark.parametrize(
    "optimizer, lr, weight_decay, eps",
    [("sgd", 0.2, 5e-4, 1e-8), ("adagrad", 1e-2, 0.0, 1e-10), ("adadelta", 1.0, 0.0, 1e-6), ("adam", 1e-3, 0.0, 1e-8)],
)
def test_an_optimizer_chosen_over_a_preset_brings_its_own_values(compose, caplog, optimizer, lr, weight_decay, eps):
    """digits_tta names sgd (lr 0.2, weight decay 5e-4, Nesterov): sgd keeps them, each other
    optimizer of an optimizer sweep gets its own, with one line; the recipe's keys stay."""
    with caplog.at_level("INFO", logger="bench"):
        config = compose("+experiment=digits_tta", f"optimizer={optimizer}")
    own = config.optimizer
    assert (own.lr, own.weight_decay, own.eps, own.nesterov) == (lr, weight_decay, eps, optimizer == "sgd")
    assert str(config.scheduler.name) == "onecycle" and config.data.augment is False  # the recipe's
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("optimizer=")]
    if optimizer == "sgd":  # the preset's own optimizer: its values are for it
        assert said == []
    else:
        assert said == [
            f"optimizer={optimizer}: lr {lr}, nesterov False, weight_decay 0.0, its own (the preset's lr 0.2, "
            "nesterov True, weight_decay 0.0005 were for sgd); the recipe's grad_clip_norm, "
            "exclude_bn_bias_from_wd and lr scaling stay the preset's"
        ]


def test_the_users_optimizer_values_and_the_recipes_keys_stay(compose):
    fast = compose("+experiment=imagenet_fast_ddp2", "optimizer=adamw", "optimizer.lr=0.002")  # a preset on a preset
    assert (fast.optimizer.lr, fast.optimizer.weight_decay, fast.optimizer.nesterov) == (0.002, 0.05, False)
    assert fast.optimizer.grad_clip_norm == 1.0 and fast.optimizer.exclude_bn_bias_from_wd and fast.scheduler.scale_lr
    again = compose("+experiment=imagenet_fast", "optimizer=sgd")  # the optimizer it names: its values
    assert (again.optimizer.lr, again.optimizer.nesterov, again.optimizer.weight_decay) == (0.1, True, 5e-5)
    assert compose("optimizer=adam").optimizer.lr == 1e-3  # no preset: the group's own, as always


def test_cfg_job_shows_the_chosen_optimizers_values(bench):
    proc = bench.run("+experiment=cifar100_resnet18", "optimizer=adam", "--cfg", "job")
    assert proc.returncode == 0, proc.stderr
    shown = proc.stdout.split("\noptimizer:\n", 1)[1]
    assert "  name: adam\n  lr: 0.001\n  weight_decay: 0.0\n" in shown and "  nesterov: false\n" in shown
