"""The config rules the model scenarios share (training and inference), run when the config loads,
before any MLflow run; torch-free: which `model.arch` names exist, known before torch loads (an
unknown name is refused, so `bench.api.compose_config` and `python -m bench` both refuse it before any
import of torch), a real dataset for accuracy, what happens once per run cannot sit inside
benchmark.repeats' windows, the batch search is for training.

torchvision's registry fills as its model modules are imported (with torch, ~1.5 CPU-s), so its
names are read from its source instead: the functions decorated `@register_model()` in
torchvision/models/*.py are what `torchvision.models.list_models(module=torchvision.models)` gives
(classification models; detection, segmentation and video live in its subpackages).
tests/unit/test_train_parts.py holds the two lists equal; bench.runtime.models checks against
torchvision's own list again when the model is built.
"""

from __future__ import annotations

import difflib
import functools
import importlib.util
import re
from pathlib import Path
from typing import Any, Collection, Dict, FrozenSet, List, Optional

from bench.config.schema import BenchConfig, ModelConfig
from bench.errors import ConfigError


def registered(source: Path, decorator: str) -> List[str]:
    """The functions in the Python file `source` decorated `@decorator`, `@decorator()` or
    `@decorator(name="x")` (then named x), in source order."""
    text = source.read_text(encoding="utf-8", errors="replace")
    found = re.findall(rf"^@{decorator}(?:\((?:name\s*=\s*)?[\"']?(\w*)[\"']?\s*\))?$.*?^def (\w+)", text, re.M | re.S)
    return [given or name for given, name in found]


# bench's own: the builders decorated @own in bench/runtime/models.py (its OWN), read from its source
OWN_MODELS = tuple(registered(Path(__file__).with_name("models.py"), "own"))


@functools.lru_cache(maxsize=1)
def torchvision_names() -> FrozenSet[str]:
    """torchvision's classification models, read from its source (empty when torchvision is not
    installed or its source does not read this way: then only the check with torch refuses)."""
    try:
        spec = importlib.util.find_spec("torchvision")
    except (ImportError, ValueError):
        return frozenset()
    if spec is None or not spec.submodule_search_locations:
        return frozenset()
    models = Path(next(iter(spec.submodule_search_locations))) / "models"
    return frozenset(name for path in models.glob("*.py") for name in registered(path, "register_model"))


def check_arch(model: ModelConfig, known: Optional[Collection[str]] = None) -> None:
    """model.arch is bench's own or one of `known` (torchvision's; read from its source when not
    given, and not checked when that finds none), and the input size suits it."""
    known = torchvision_names() if known is None else known
    if known and model.arch not in OWN_MODELS and model.arch not in known:
        close = difflib.get_close_matches(model.arch, [*OWN_MODELS, *known], n=1)
        raise ConfigError(
            "model.arch",
            model.arch,
            "a torchvision classification model (e.g. resnet50, resnet18, vit_b_16, efficientnet_b0, "
            "convnext_tiny; all: torchvision.models.list_models()) or bench's own "
            + ", ".join(OWN_MODELS)
            + (f" (did you mean {close[0]}?)" if close else ""),
        )
    if (patch := vit_patch(model.arch)) and model.image_size % patch:
        raise ConfigError(
            "data.image_size", model.image_size, f"a multiple of {patch} for model={model.arch} (its patch size)"
        )


def vit_patch(arch: str) -> Optional[int]:
    """torchvision's ViTs are built for one input size, a multiple of the patch (vit_b_16: 16)."""
    tail = arch.rsplit("_", 1)[-1]
    return int(tail) if arch.startswith("vit_") and tail.isdigit() else None


# ---- the rules of a model run's config (training and inference)


def refuse_find_max_batch(config: BenchConfig) -> None:
    """A mode other than training: the batch search is for training."""
    if config.benchmark.find_max_batch:
        raise ConfigError(
            "benchmark.find_max_batch", True, f"false with mode={config.mode} (the search is for training)"
        )


def once_per_run(config: BenchConfig) -> Dict[str, Any]:
    """The keys of what happens once per training run (validation, checkpoints, resume, progressive
    phases), with their values: benchmark.repeats refuses them, inference refuses them all."""
    return {
        "train.eval_every": config.train.eval_every,
        "checkpoint.every_epochs": config.checkpoint.every_epochs,
        "train.resume": config.train.resume,
        "data.progressive": config.data.progressive,
    }


def check_once_per_run(config: BenchConfig) -> None:
    """N windows of the same run: nothing that happens once per run may sit inside them."""
    if config.benchmark.repeats == 1:
        return
    for key, value in once_per_run(config).items():
        if value:
            raise ConfigError(
                "benchmark.repeats",
                config.benchmark.repeats,
                f"1 with {key}={value!r} (repeats re-measure one window; validation, checkpoints, "
                "resume and progressive phases happen once per run)",
            )


def check_training_for_accuracy(config: BenchConfig) -> None:
    """What needs a real dataset: epochs as passes over it, and validation."""
    if not config.data.synthetic:
        return
    if config.train.steps_per_epoch is None:
        raise config.train._error(
            "steps_per_epoch", "a positive integer with data=synthetic (null means one pass over a real dataset)"
        )
    if config.train.eval_every:
        target = config.train.target_accuracy is not None  # eval_every is an int: 0, never null
        what, off = ("train.target_accuracy", "null") if target else ("train.eval_every", "0")
        raise ConfigError(
            what,
            getattr(config.train, what.split(".")[1]),
            f"{off} with data=synthetic (random labels: nothing to learn); validation needs "
            "a real dataset: data=imagefolder or data=cifar100 (python -m bench.data digits "
            "--dst DIR writes one)",
        )
