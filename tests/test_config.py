"""Config composition: every group option and experiment composes, types and validates.

No torch here: these tests only use Hydra's compose API and bench.validate, and one
subprocess check that `--cfg job` / `--help` stay free of torch and mlflow imports.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from bench import config_dir
from bench.schema import register_configs
from bench.validate import validate

register_configs()

CONF = Path(config_dir())
GROUPS = ("model", "data", "precision", "optimizer", "scheduler", "distributed", "storage")
NOT_RUN_GROUPS = {"experiment", "hydra"}  # selected with +experiment= / Hydra's own


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


GROUP_OPTIONS = [(group, option) for group in GROUPS for option in _options(group)]
EXPERIMENTS = _options("experiment")


def _compose(overrides: list[str] | None = None, conf: Path | str = CONF):
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        return compose(config_name="config", overrides=overrides or [])


def _resolved(cfg) -> dict:
    plain = OmegaConf.to_container(cfg, resolve=True)
    plain.pop("defaults", None)
    return plain


def test_every_config_group_directory_is_covered():
    groups = {p.name for p in CONF.iterdir() if p.is_dir() and not p.name.startswith("_")}
    assert groups - NOT_RUN_GROUPS == set(GROUPS)
    for group in GROUPS:
        assert _options(group), f"conf/{group}/ has no option"
    assert EXPERIMENTS


def test_default_config_composes_and_validates():
    cfg = _compose()
    assert cfg.model.arch == "resnet50"
    assert cfg.precision.name == "fp32"
    assert cfg.optimizer.name == "sgd"
    assert cfg.scheduler.name == "constant"
    assert cfg.allow_cpu is False
    validate(_resolved(cfg))


# data options validate only with data.root pointing at their layout (validation lists, never reads)
DATASET_LAYOUTS = {"imagefolder": "class0/", "cifar100": "train", "shards": "train/meta.json"}


@pytest.mark.parametrize(("group", "option"), GROUP_OPTIONS, ids=[f"{g}={o}" for g, o in GROUP_OPTIONS])
def test_every_group_option_composes_and_validates(group, option, tmp_path):
    overrides = [f"{group}={option}"]
    layout = DATASET_LAYOUTS.get(option) if group == "data" else None
    if layout:
        (tmp_path / layout).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / layout).mkdir() if layout.endswith("/") else (tmp_path / layout).write_text("{}")
        overrides.append(f"data.root={tmp_path}")
    cfg = _compose(overrides)
    node = cfg[group]
    if group == "model":
        assert node.arch == option
    else:
        assert node.name == option
    plain = _resolved(cfg)
    validate(plain)
    # the option's YAML values made it into the composed config, typed by the schema
    raw = OmegaConf.load(CONF / group / f"{option}.yaml")
    for key, value in OmegaConf.to_container(raw, resolve=False).items():
        if isinstance(value, str) and value.startswith("${") or (layout and key == "root"):
            continue
        assert plain[group][key] == value, f"{group}.{key}"


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_composes_and_validates(experiment):
    cfg = _compose([f"+experiment={experiment}"])
    validate(_resolved(cfg))


GPU_PRESETS = {
    # preset: (precision, autocast dtype, grad scaler)
    "a100_bf16": ("bf16", "bfloat16", False),
    "h100_bf16": ("bf16", "bfloat16", False),
    "v100_amp": ("amp_fp16", "float16", True),
    "t4_amp": ("amp_fp16", "float16", True),
}


@pytest.mark.parametrize("experiment", sorted(GPU_PRESETS))
def test_gpu_presets(experiment):
    plain = _resolved(_compose([f"+experiment={experiment}"]))
    name, dtype, scaler = GPU_PRESETS[experiment]
    assert plain["precision"]["name"] == name
    assert plain["precision"]["autocast_dtype"] == dtype
    assert plain["precision"]["grad_scaler"] is scaler
    assert plain["precision"]["channels_last"] is True
    assert plain["model"]["arch"] == "resnet50"
    assert plain["data"]["batch_size"] == 256
    assert plain["allow_cpu"] is False


def test_cpu_smoke_experiment():
    plain = _resolved(_compose(["+experiment=cpu_smoke"]))
    assert plain["allow_cpu"] is True
    assert plain["model"]["arch"] == "resnet18"
    assert plain["data"]["image_size"] == 64
    assert plain["model"]["image_size"] == 64
    assert plain["model"]["num_classes"] == plain["data"]["num_classes"] == 100
    assert plain["precision"]["name"] == "fp32"


def test_command_line_group_choice_beats_experiment_default():
    # test_validation_errors relies on this: precision=amp_fp16 wins over cpu_smoke's fp32
    plain = _resolved(_compose(["precision=amp_fp16", "+experiment=cpu_smoke"]))
    assert plain["precision"]["name"] == "amp_fp16"
    assert plain["model"]["arch"] == "resnet18"


@pytest.mark.parametrize("model", ["resnet50", "cifar_resnet18", "vit_b_16"])
def test_model_shape_follows_data_by_interpolation(model):
    cfg = _compose([f"model={model}", "data.num_classes=10", "data.image_size=32"])
    assert OmegaConf.is_interpolation(cfg.model, "num_classes")
    assert OmegaConf.is_interpolation(cfg.model, "image_size")
    plain = _resolved(cfg)
    assert plain["model"]["num_classes"] == 10
    assert plain["model"]["image_size"] == 32
    assert isinstance(plain["model"]["num_classes"], int)


def test_model_shape_can_still_be_set_explicitly():
    plain = _resolved(_compose(["model.num_classes=7", "data.num_classes=10"]))
    assert plain["model"]["num_classes"] == 7
    assert plain["data"]["num_classes"] == 10


@pytest.mark.parametrize("override, key", [
    ("data.batch_size=abc", "data.batch_size"),
    ("optimizer.lr=fast", "optimizer.lr"),
    ("allow_cpu=maybe", "allow_cpu"),
])
def test_schema_rejects_wrong_type_at_compose_time(override, key):
    with pytest.raises(ConfigCompositionException) as info:
        _compose([override])
    assert key in str(info.value) or key in str(info.value.__cause__)


def test_schema_converts_numeric_strings():
    cfg = _compose(["data.batch_size=64", "optimizer.lr=1"])
    assert cfg.data.batch_size == 64
    assert isinstance(cfg.optimizer.lr, float)


@pytest.mark.parametrize("override", ["data.nope=1", "nope=1", "optimizer.momentun=0.5"])
def test_schema_rejects_unknown_key_override(override):
    with pytest.raises(ConfigCompositionException, match="Could not override"):
        _compose([override])


def test_schema_rejects_unknown_key_in_a_yaml_option(tmp_path):
    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    (conf / "model" / "typo.yaml").write_text("archh: resnet50\n")
    assert _compose(["model=resnet18"], conf=conf).model.arch == "resnet18"  # the copy works
    with pytest.raises(ConfigCompositionException) as info:
        _compose(["model=typo"], conf=conf)
    assert "archh" in str(info.value) or "archh" in str(info.value.__cause__)


def test_schema_rejects_unknown_key_in_an_experiment(tmp_path):
    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    (conf / "experiment" / "typo.yaml").write_text("# @package _global_\ndata:\n  batchsize: 8\n")
    with pytest.raises(ConfigCompositionException) as info:
        _compose(["+experiment=typo"], conf=conf)
    assert "batchsize" in str(info.value) or "batchsize" in str(info.value.__cause__)


# --- the CLI stays import-light ------------------------------------------------------------

HEAVY = ("torch", "mlflow")


def _heavy_imports(importtime_log: str) -> list[str]:
    """Module names from `python -X importtime` lines that are torch/mlflow or inside them."""
    found = []
    for line in importtime_log.splitlines():
        if not line.startswith("import time:") or line.count("|") < 2:
            continue
        module = line.rsplit("|", 1)[1].strip()
        if any(module == top or module.startswith(top + ".") for top in HEAVY):
            found.append(module)
    return found


def test_heavy_import_detector_parses_importtime_lines():
    log = ("import time: self [us] | cumulative | imported package\n"
           "import time:       120 |        120 |   torchvision_like\n"
           "import time:       123 |        456 |     torch._C\n"
           "import time:        12 |         34 | mlflow\n"
           "import time:        12 |         34 |   omegaconf\n")
    assert _heavy_imports(log) == ["torch._C", "mlflow"]


@pytest.mark.parametrize("flags", [["--cfg", "job"], ["--help"]], ids=["cfg-job", "help"])
def test_cli_prints_config_without_importing_torch_or_mlflow(tmp_path, flags):
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "bench", *flags],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "arch: resnet50" in proc.stdout
    assert "import time:" in proc.stderr  # the log is there, so an empty result means something
    assert _heavy_imports(proc.stderr) == []
    if flags == ["--help"]:
        assert "precision: amp_fp16, bf16, fp32, tf32" in proc.stdout
