"""Semantic checks on a composed config, run before any model, process or MLflow run exists.

Hydra and the schema already reject unknown groups, unknown keys and wrong types; this
module rejects keys added past the schema with `+key=...`, and values of the right type
that cannot work (a zero batch size, an unknown architecture). Each failure is one sentence: the key, the value, what is accepted.
No torch import here: errors must come back fast.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from typing import Any, Iterable, Mapping
from urllib.parse import urlparse

from bench import schema as schema_module
from bench.schema import BenchConfig

MODEL_ARCHS = (
    "resnet18",
    "resnet34",
    "resnet50",
    "resnet101",
    "efficientnet_b0",
    "vit_b_16",
    "cifar_resnet18",
)
DATA_NAMES = ("synthetic", "imagefolder", "cifar100", "shards")
PRECISIONS = ("fp32", "tf32", "amp_fp16", "bf16")
AUTOCAST_DTYPES = (None, "float16", "bfloat16")
OPTIMIZERS = ("sgd", "adam", "adamw", "adagrad", "adadelta")
SCHEDULERS = ("constant", "multistep", "cosine", "onecycle")
DISTRIBUTED = ("single", "ddp")
BACKENDS = ("auto", "nccl", "gloo")
SCALING = ("weak", "strong")
STORAGES = ("local", "s3")
MODES = ("train", "storage")
VIT_PATCH = 16


class ConfigError(ValueError):
    """A config value that cannot work; str() is the one sentence shown to the user."""

    def __init__(self, key: str, value: Any, accepted: str):
        self.key, self.value, self.accepted = key, value, accepted
        super().__init__(f"{key}={value!r} is not valid: accepted {accepted}.")


def _get(cfg: Mapping[str, Any], dotted: str) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        node = node[part]
    return node


def _one_of(cfg: Mapping[str, Any], key: str, options: Iterable[Any]) -> None:
    options = tuple(options)
    value = _get(cfg, key)
    if value not in options:
        shown = ", ".join("null" if o is None else str(o) for o in options)
        raise ConfigError(key, value, f"one of {shown}")


def _positive(cfg: Mapping[str, Any], key: str, *, optional: bool = False, integer: bool = True) -> None:
    value = _get(cfg, key)
    if optional and value is None:
        return
    if value is None or value <= 0:
        kind = "a positive integer" if integer else "a positive number"
        raise ConfigError(key, value, kind + (" or null" if optional else ""))


def _non_negative(cfg: Mapping[str, Any], key: str) -> None:
    value = _get(cfg, key)
    if value < 0:
        raise ConfigError(key, value, "an integer >= 0")


def _unknown_keys(cfg: Mapping[str, Any], schema: type, prefix: str = "") -> None:
    """Hydra lets `+key=value` add keys the schema does not know: a typo would pass silently."""
    fields = {f.name: _dataclass_of(f.type) for f in dataclasses.fields(schema)}
    for key, value in cfg.items():
        if key == "defaults":
            continue
        if key not in fields:
            close = difflib.get_close_matches(key, list(fields), n=1)
            hint = f"a key of {prefix.rstrip('.') or 'the config'}"
            raise ConfigError(prefix + key, value, hint + (f" (did you mean {prefix}{close[0]}?)" if close else ""))
        if fields[key] is not None and isinstance(value, Mapping):
            _unknown_keys(value, fields[key], prefix + key + ".")


def _dataclass_of(annotation: Any) -> Any:
    """The schema dataclass a field holds, or None (schema.py's annotations are strings)."""
    found = getattr(schema_module, annotation, None) if isinstance(annotation, str) else annotation
    return found if dataclasses.is_dataclass(found) else None


def validate(cfg: Mapping[str, Any]) -> None:
    """Raise ConfigError for the first value that cannot work. `cfg` is the resolved plain dict."""
    _unknown_keys(cfg, BenchConfig)
    _one_of(cfg, "mode", MODES)
    _one_of(cfg, "model.arch", MODEL_ARCHS)
    _one_of(cfg, "data.name", DATA_NAMES)
    _one_of(cfg, "precision.name", PRECISIONS)
    _one_of(cfg, "precision.autocast_dtype", AUTOCAST_DTYPES)
    _one_of(cfg, "optimizer.name", OPTIMIZERS)
    _one_of(cfg, "scheduler.name", SCHEDULERS)
    _one_of(cfg, "distributed.name", DISTRIBUTED)
    _one_of(cfg, "storage.name", STORAGES)

    for key in ("data.batch_size", "data.image_size", "data.num_classes",
                "train.epochs", "train.steps_per_epoch", "benchmark.log_every",
                "distributed.nproc_per_node", "distributed.nnodes"):
        _positive(cfg, key)
    _positive(cfg, "benchmark.measure_steps", optional=True)
    _positive(cfg, "benchmark.measure_seconds", optional=True, integer=False)
    _positive(cfg, "cpu_threads", optional=True)
    _positive(cfg, "optimizer.lr", integer=False)
    _non_negative(cfg, "benchmark.warmup_steps")
    _non_negative(cfg, "scheduler.warmup_steps")
    if cfg["optimizer"]["weight_decay"] < 0:
        raise ConfigError("optimizer.weight_decay", cfg["optimizer"]["weight_decay"], "a number >= 0")

    _validate_distributed(cfg)
    _validate_data(cfg)
    _validate_storage(cfg)

    if cfg["model"]["arch"] == "vit_b_16" and cfg["data"]["image_size"] % VIT_PATCH:
        raise ConfigError("data.image_size", cfg["data"]["image_size"],
                          f"a multiple of {VIT_PATCH} for model=vit_b_16 (its patch size)")

    precision = cfg["precision"]
    if precision["grad_scaler"] and precision["autocast_dtype"] != "float16":
        raise ConfigError("precision.grad_scaler", True, "true only with precision.autocast_dtype=float16")

    scheduler = cfg["scheduler"]
    milestones = scheduler["milestones"]
    if scheduler["name"] == "multistep" and (not milestones or any(m <= 0 for m in milestones)
                                              or list(milestones) != sorted(milestones)):
        raise ConfigError("scheduler.milestones", list(milestones), "a non-empty increasing list of positive step numbers")
    if scheduler["name"] == "onecycle" and not 0 < scheduler["pct_start"] < 1:
        raise ConfigError("scheduler.pct_start", scheduler["pct_start"], "a number between 0 and 1")


def _validate_distributed(cfg: Mapping[str, Any]) -> None:
    dist = cfg["distributed"]
    _one_of(cfg, "distributed.backend", BACKENDS)
    _one_of(cfg, "distributed.scaling", SCALING)
    _positive(cfg, "distributed.timeout_s", integer=False)
    _positive(cfg, "distributed.bucket_cap_mb")
    world = dist["nproc_per_node"] * dist["nnodes"]
    if dist["name"] == "single" and world != 1:
        raise ConfigError("distributed.nproc_per_node", dist["nproc_per_node"],
                          "1 with distributed=single (multi-process runs need distributed=ddp)")
    if not 0 <= dist["node_rank"] < dist["nnodes"]:
        raise ConfigError("distributed.node_rank", dist["node_rank"], f"0 to {dist['nnodes'] - 1} (distributed.nnodes - 1)")
    if dist["nnodes"] > 1 and not dist["rdzv_endpoint"]:
        raise ConfigError("distributed.rdzv_endpoint", None,
                          "host:port of the rendezvous (node 0's address) when distributed.nnodes > 1")
    endpoint = dist["rdzv_endpoint"]
    if endpoint and (":" not in endpoint or not endpoint.rsplit(":", 1)[1].isdigit()):
        raise ConfigError("distributed.rdzv_endpoint", endpoint, "host:port, e.g. node0:29500")
    batch = cfg["data"]["batch_size"]
    if dist["scaling"] == "strong" and batch % world:
        raise ConfigError("data.batch_size", batch,
                          f"a multiple of the process count ({world}) with distributed.scaling=strong "
                          f"(it is the global batch, split evenly over the processes)")


# ---- data options (bench/data/) ------------------------------------------------------------


DATA_SPLITS = ("train", "val")
DECODERS = ("simplejpeg", "pil")


class DatasetLocationError(ConfigError):
    """data.root does not hold the dataset the option expects; str() says what was expected there."""

    def __init__(self, key: str, value: Any, message: str):
        self.key, self.value, self.accepted = key, value, message
        ValueError.__init__(self, message)


def _validate_data(cfg: Mapping[str, Any]) -> None:
    data = cfg["data"]
    if data["name"] == "synthetic":
        return
    root = data["root"]
    if not root:
        where = "a directory or s3://bucket/prefix" if data["name"] == "shards" else "a directory"
        raise ConfigError("data.root", root, f"{where} holding the {data['name']} dataset")
    if root.startswith("s3://") and data["name"] != "shards":
        raise ConfigError("data.root", root, "a local directory for data=" + data["name"] + " (s3:// is read by data=shards)")
    _one_of(cfg, "data.split", DATA_SPLITS)
    _one_of(cfg, "data.decoder", DECODERS)
    if data["num_workers"] is not None:
        _non_negative(cfg, "data.num_workers")
    _positive(cfg, "data.prefetch_factor")

    from bench.data.layout import (  # torch-free: listings only
        DataError,
        check_dataset_location,
    )

    try:
        check_dataset_location(data)
    except DataError as exc:
        raise DatasetLocationError("data.root", root, str(exc)) from None


# ---- storage options and the storage benchmark (bench/storage/, bench/iobench/) ------------


S3_CLIENTS = ("obstore", "s3torchconnector", "boto3")
PREPARE = ("auto", "always", "never")
RECORD_FORMATS = ("raw", "npz")
# Loose on purpose: AWS wants 3-63 lowercase characters, but some S3-compatible stores take
# other names; the server has the last word (and its refusal is one clear line too).
BUCKET_NAME = re.compile(r"^[^/\s]+$")


def _validate_storage(cfg: Mapping[str, Any]) -> None:
    storage = cfg["storage"]
    _one_of(cfg, "storage.client", S3_CLIENTS)
    _one_of(cfg, "storage.prepare", PREPARE)
    _one_of(cfg, "storage.workload.format", RECORD_FORMATS)
    for key in ("clients", "prepare_workers", "max_attempts", "workload.num_files", "workload.samples_per_file",
                "workload.record_size", "workload.batch_size", "workload.read_threads", "workload.epochs"):
        _positive(cfg, "storage." + key)
    _positive(cfg, "storage.workload.max_steps", optional=True)
    for key in ("timeout_s", "connect_timeout_s"):
        _positive(cfg, "storage." + key, integer=False)
    for key in ("record_size_stdev", "prefetch", "computation_time", "checkpoint_size_mb"):
        if _get(cfg, "storage.workload." + key) < 0:
            raise ConfigError("storage.workload." + key, _get(cfg, "storage.workload." + key), "a number >= 0")
    threshold = storage["workload"]["au_threshold"]
    if not 0 < threshold <= 1:
        raise ConfigError("storage.workload.au_threshold", threshold, "a fraction in (0, 1], e.g. 0.9 for 90%")
    if storage["clients"] > storage["workload"]["num_files"]:
        raise ConfigError("storage.clients", storage["clients"],
                          f"at most storage.workload.num_files={storage['workload']['num_files']} "
                          "(each client reads its own files)")
    if not storage["dataset_dir"].strip("/"):
        raise ConfigError("storage.dataset_dir", storage["dataset_dir"], "a non-empty relative path")
    if storage["name"] != "s3":
        return
    _validate_endpoint(storage["endpoint"])
    # storage=s3 with nothing to store (a training run without checkpoints) needs no bucket
    bucket = storage["bucket"]
    if (cfg["mode"] == "storage" or storage["save_checkpoint"]) and not BUCKET_NAME.match(bucket or ""):
        raise ConfigError("storage.bucket", bucket, "a bucket name (no '/': put paths in storage.prefix) "
                          "with storage=s3 (mode=storage or storage.save_checkpoint=true)")


def _validate_endpoint(endpoint: Any) -> None:
    if endpoint is None:
        return
    parsed = urlparse(endpoint)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ConfigError("storage.endpoint", endpoint, "an http:// or https:// URL such as http://minio:9000, "
                          "or null for AWS")
    if parsed.username or parsed.password:
        # the config is logged to MLflow and saved in .hydra/: credentials come from AWS_* / the profile
        raise ConfigError("storage.endpoint", "<hidden: it carries credentials>",
                          "a URL without user:password (set AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY "
                          "or AWS_PROFILE instead)")
