"""Bad inputs, as a table: each row is a real command line (`python -m bench ...` or one of the
tools), what it must exit with, and the words its one `[ERROR]` line must hold. Each row runs
in the test's process through the module's own `__main__` code (what `python -m` runs: the
same argument checks, Hydra composition, schema and preflight), and the rows named in
THROUGH_A_PROCESS also as real processes, so the command-line path itself is proven. Every row is
also checked for: exactly one `[ERROR]` line, no traceback, nothing on stdout, and no MLflow run
left RUNNING (for a refused config: no MLflow store at all). `{tmp}` is the test's directory,
`{empty}` an empty directory there, `{finished}` a run directory (its run_summary.json), `{images}`
an image folder of 4 classes, `{notimages}` a class folder of files named .jpg that are not images.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import runpy
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest

from bench import config_dir
from bench.registries import FORMATS, S3_CLIENTS

CPU = "allow_cpu=true"


def _options(group: str) -> str:
    """A config group's options as a refusal lists them (sorted, as Hydra gives them)."""
    return ", ".join(sorted(path.stem for path in (Path(config_dir()) / group).glob("*.yaml")))


# the names a refusal lists, read from where they are registered (issue 41 §4): adding one edits no row
MODELS, PRESETS = _options("model"), _options("experiment")

# (id, module, arguments, exit code, the words the [ERROR] line holds)
BAD_INPUTS = [
    # -- what Hydra rejects while composing, reworded into one line --------------------------------------
    ("unknown model option", "bench", ["model=nope"], 2, f"model='nope' is not valid: accepted one of {MODELS}."),
    (
        "unknown experiment",
        "bench",
        ["+experiment=nope"],
        2,
        f"+experiment='nope' is not valid: accepted one of {PRESETS}.",
    ),
    # issue 34.5: a value close to an option is named, as a misspelt key's is
    ("misspelt model option", "bench", ["model=resnet5"], 2, f"one of {MODELS} (did you mean resnet50?)."),
    ("misspelt preset", "bench", ["+experiment=cpu_smok"], 2, f"one of {PRESETS} (did you mean cpu_smoke?)."),
    # a flag that is neither Hydra's nor a config key: one line, not Hydra's usage text
    (
        "misspelt flag",
        "bench",
        ["--trian.epochs=5", "+experiment=cpu_smoke"],
        2,
        "--trian.epochs=5 is not valid: accepted a config key as a flag (--data.batch_size=8) or one of Hydra's flags "
        "(--help, --cfg job, -m, --config-name, ...: --hydra-help lists them) (did you mean --train.epochs?)",
    ),
    ("unknown data option", "bench", ["data=nope"], 2, "data='nope' is not valid"),
    ("unknown precision option", "bench", ["precision=fp64"], 2, "precision='fp64' is not valid"),
    (
        "integer key given text",
        "bench",
        ["data.batch_size=abc"],
        2,
        "data.batch_size='abc' is not valid: accepted an integer.",
    ),
    (
        "integer key given a fraction",
        "bench",
        ["data.batch_size=1.5"],
        2,
        "data.batch_size='1.5' is not valid: accepted an integer.",
    ),
    (
        "number key given text",
        "bench",
        ["optimizer.lr=fast"],
        2,
        "optimizer.lr='fast' is not valid: accepted a number.",
    ),
    ("bool key given text", "bench", ["allow_cpu=maybe"], 2, "allow_cpu='maybe' is not valid: accepted true or false."),
    (
        "misspelt key",
        "bench",
        ["data.batch_sise=8"],
        2,
        "data.batch_sise='8' is not valid: accepted a key of data (did you mean data.batch_size?).",
    ),
    ("unknown top-level key", "bench", ["nope=1"], 2, "nope='1' is not valid: accepted a key of the config."),
    (
        "misspelt group of a key",  # issue 34.5: the whole key named, and the key meant
        "bench",
        ["trainn.epochs=5"],
        2,
        "trainn.epochs='5' is not valid: accepted a key of the config (did you mean train.epochs?).",
    ),
    (
        "misspelt key, another group",
        "bench",
        ["optimizer.momentun=0.5"],
        2,
        "optimizer.momentun='0.5' is not valid: accepted a key of optimizer (did you mean",
    ),
    (
        "misspelt key added with +",
        "bench",
        ["+benchmark.warmup_step=5"],
        2,
        "benchmark.warmup_step=5 is not valid: accepted a key of benchmark (did you mean benchmark.warmup_steps?).",
    ),
    (
        "choice outside the enum",
        "bench",
        ["precision.name=fp64"],
        2,
        "precision.name='fp64' is not valid: accepted one of fp32, tf32, amp_fp16, bf16.",
    ),
    ("autocast dtype outside the enum", "bench", ["precision.autocast_dtype=float8"], 2, "one of float16, bfloat16"),
    (
        "unknown split",
        "bench",
        ["data=imagefolder", "data.split=test"],
        2,
        "data.split='test' is not valid: accepted one of train, val.",
    ),
    ("unknown decoder", "bench", ["data.decoder=turbo"], 2, "data.decoder='turbo'"),
    ("unknown DDP backend", "bench", ["distributed=ddp", "distributed.backend=mpi"], 2, "distributed.backend='mpi'"),
    ("unknown scaling", "bench", ["distributed.scaling=linear"], 2, "distributed.scaling='linear'"),
    (
        "unknown S3 client",
        "bench",
        ["storage.client=s3fs"],
        2,
        f"storage.client='s3fs' is not valid: accepted one of {', '.join(S3_CLIENTS)}.",
    ),
    ("unknown prepare mode", "bench", ["storage.prepare=sometimes"], 2, "storage.prepare='sometimes'"),
    ("unknown record format", "bench", ["storage.workload.format=parquet"], 2, "storage.workload.format='parquet'"),
    (
        "unknown record format in a sweep",
        "bench",
        ["-m", "storage.workload.format=raw,parquet"],
        2,
        f"storage.workload.format='parquet' is not valid: accepted one of {', '.join(FORMATS)}.",
    ),
    (  # issue 33 probe: job 0 ran (minutes), then job 1 was refused: exit 1, a sweep dir and a store
        "a bad value in a sweep",
        "bench",
        ["-m", "+experiment=cpu_smoke", "data.batch_size=4,0"],
        2,
        "data.batch_size=0 is not valid: accepted a positive integer.",
    ),
    (  # issue 33 probe: Hydra's own refusal came once the sweep's parent run was open (a store left behind)
        "sweep dir is a file",
        "bench",
        ["-m", "+experiment=cpu_smoke", "data.batch_size=4,8", "hydra.sweep.dir={tmp}/a-file"],
        2,
        "hydra.sweep.dir='{tmp}/a-file' is not valid: accepted a directory this user can write (made if missing); ",
    ),
    (  # issue 33 probe: refused by Hydra once the sweep's parent run was open (a store left behind)
        "an unknown option in a sweep",
        "bench",
        ["-m", "+experiment=cpu_smoke", "model=small_cnn,nope"],
        2,
        f"model='nope' is not valid: accepted one of {MODELS}.",
    ),
    (
        "own record format not on the path",
        "bench",
        ["storage.workload.format=nolab.formats:MyFormat"],
        2,
        "storage.workload.format='nolab.formats:MyFormat' is not valid: accepted a module:attr Python can import "
        "(no package 'nolab' on Python's path",
    ),
    (
        "own record format not in its module",
        "bench",
        ["mode=storage", "storage.workload.format=json:NoFormat"],
        2,
        "storage.workload.format='json:NoFormat' is not valid: accepted a module:attr Python can import "
        "(AttributeError: module 'json' has no attribute 'NoFormat').",
    ),
    (  # issue 39 §16: print was called with the run's arguments, after the MLflow run opened
        "own data option that is no builder",
        "bench",
        ["+experiment=cpu_smoke", "data.name=builtins:print"],
        2,
        "data.name='builtins:print' is not valid: accepted a bench.registries.DataOption or a batches builder "
        "taking (data, device, memory_format, seed, rank, world_size, storage).",
    ),
    ("unknown mode", "bench", ["mode=serve"], 2, "mode='serve'"),
    (  # issue 33 probe: mode won unsaid (a storage run)
        "mode and scenario naming two",
        "bench",
        ["mode=storage", "scenario=echo"],
        2,
        "scenario='echo' is not valid: accepted storage with mode=storage (mode=NAME chooses scenario=NAME: give one",
    ),
    (  # issue 33 probe: ignored unsaid (an echo run)
        "storage benchmark key with another mode",
        "bench",
        ["mode=echo", "storage.workload.num_files=4"],
        2,
        "storage.workload.num_files=4 is not valid: accepted its default with mode=echo (read by mode=storage only).",
    ),
    (  # issue 33 probe: the preset's workload ignored unsaid, and a CPU ResNet-50 run of 10 minutes
        "storage preset with mode=train",
        "bench",
        ["+experiment=storage_resnet50_h100", "mode=train", "allow_cpu=true"],
        2,
        "storage.workload.name='resnet50_h100' is not valid: accepted its default with mode=train (read by mode=",
    ),
    (  # issue 33 probe: a key of another scenario
        "scenario key of another scenario",
        "bench",
        ["+experiment=cpu_smoke", "scenario.steps=5"],
        2,
        "scenario.steps=5 is not valid: accepted a key of scenario=train: it has none.",
    ),
    ("override that does not parse", "bench", ["data.batch_size=["], 2, "a command-line override could not be parsed"),
    ("a list given without -m", "bench", ["data=synthetic,imagefolder"], 2, "to sweep over it add -m"),
    (
        "interpolation to nowhere",
        "bench",
        ["data.batch_size=${{oops}}"],
        2,
        "the config could not be resolved: Interpolation key 'oops' not found (at data.batch_size)",
    ),
    # -- values the schema's checks refuse ------------------------------------------------------------
    ("zero batch", "bench", ["data.batch_size=0"], 2, "data.batch_size=0 is not valid: accepted a positive integer."),
    ("negative batch", "bench", ["data.batch_size=-4"], 2, "data.batch_size=-4"),
    ("zero image size", "bench", ["data.image_size=0"], 2, "data.image_size=0"),
    ("zero classes", "bench", ["data.num_classes=0"], 2, "data.num_classes=0"),
    ("zero epochs", "bench", ["train.epochs=0"], 2, "train.epochs=0"),
    # -- issue 28.6 / 30.9 / 30.10: MLPerf's log where no training runs, its division, a key flag without a value
    (
        "mlperf log with inference",
        "bench",
        ["+experiment=cpu_smoke", "mode=inference", "train.mlperf_log=true"],
        2,
        "train.mlperf_log=True is not valid: accepted false with mode=inference "
        "(MLPerf Training's log times a training run).",
    ),
    (
        "mlperf log with a storage preset",
        "bench",
        ["+experiment=storage_resnet50_h100", "train.mlperf_log=true"],
        2,
        "train.mlperf_log=True is not valid: accepted false with mode=storage",
    ),
    (
        "unknown mlperf division",
        "bench",
        ["train.mlperf_division=semi"],
        2,
        "train.mlperf_division='semi' is not valid: accepted one of open, closed.",
    ),
    (
        "config key flag without its value",
        "bench",
        ["--data.batch_size"],
        2,
        "--data.batch_size is not valid: accepted data.batch_size=VALUE (Hydra's spelling; ",
    ),
    (
        "zero steps per epoch",
        "bench",
        ["train.steps_per_epoch=0"],
        2,
        "train.steps_per_epoch=0 is not valid: accepted a positive integer or null.",
    ),
    (
        "negative warm-up",
        "bench",
        ["benchmark.warmup_steps=-1"],
        2,
        "benchmark.warmup_steps=-1 is not valid: accepted a number >= 0.",
    ),
    (
        "zero measured steps",
        "bench",
        ["benchmark.measure_steps=0"],
        2,
        "benchmark.measure_steps=0 is not valid: accepted a positive integer or null.",
    ),
    ("negative measured seconds", "bench", ["benchmark.measure_seconds=-1"], 2, "benchmark.measure_seconds=-1.0"),
    ("zero log interval", "bench", ["benchmark.log_every=0"], 2, "benchmark.log_every=0"),
    # -- training for accuracy (docs/training.md) --------------------------------------------------------
    (
        "progressive that does not parse",
        "bench",
        [CPU, "data.progressive=0,128"],
        2,
        "data.progressive='0,128' is not valid: accepted \"epoch,size,batch;...\"",
    ),
    ("progressive not from epoch 0", "bench", [CPU, "data.progressive=2,64,8"], 2, "data.progressive='2,64,8'"),
    (
        "validation on synthetic data",
        "bench",
        [CPU, "train.eval_every=1"],
        2,
        "train.eval_every=1 is not valid: accepted 0 with data=synthetic",
    ),
    (
        "a target accuracy on synthetic data",
        "bench",
        [CPU, "train.target_accuracy=0.5"],
        2,
        "train.target_accuracy=0.5 is not valid: accepted null with data=synthetic",
    ),
    (
        "a pass over synthetic data",
        "bench",
        [CPU, "train.steps_per_epoch=null"],
        2,
        "train.steps_per_epoch=None is not valid: accepted a positive integer with data=synthetic",
    ),
    (
        "target accuracy above 1",
        "bench",
        [CPU, "data=imagefolder", "data.root={images}", "train.target_accuracy=1.5"],
        2,
        "train.target_accuracy=1.5 is not valid: accepted a top-1 accuracy in (0, 1]",
    ),
    (
        "validation without a val split",
        "bench",
        [CPU, "data=imagefolder", "data.root={images}", "data.num_classes=4", "train.eval_every=1"],
        2,
        "has no val/ folder",
    ),
    ("checkpoints outside the storage root", "bench", [CPU, "checkpoint.dir=../up"], 2, "checkpoint.dir='../up'"),
    (
        "resume from a file that is not there",
        "bench",
        [CPU, "+experiment=cpu_smoke", "train.resume={tmp}/nope.pt"],
        2,
        "train.resume='{tmp}/nope.pt' is not valid: accepted 'auto', a checkpoint file",
    ),
    (
        "resume from a file that is not a checkpoint",
        "bench",
        [CPU, "+experiment=cpu_smoke", "train.resume={tmp}/a-file"],
        2,
        "train.resume: checkpoint {tmp}/a-file is damaged or not bench's (not a torch.save zip file)",
    ),
    ("zero lr", "bench", ["optimizer.lr=0"], 2, "optimizer.lr=0.0 is not valid: accepted a positive number."),
    ("nan lr", "bench", ["optimizer.lr=nan"], 2, "optimizer.lr=nan is not valid: accepted a finite number."),
    ("infinite lr", "bench", ["optimizer.lr=inf"], 2, "optimizer.lr=inf is not valid: accepted a finite number."),
    (
        "negative weight decay",
        "bench",
        ["optimizer.weight_decay=-1"],
        2,
        "optimizer.weight_decay=-1.0 is not valid: accepted a number >= 0.",
    ),
    ("one beta", "bench", ["optimizer.betas=[0.9]"], 2, "optimizer.betas=[0.9] is not valid: accepted a list of two"),
    (
        "no milestones",
        "bench",
        ["scheduler=multistep", "scheduler.milestones=[]"],
        2,
        "scheduler.milestones=[] is not valid: accepted a non-empty increasing list of positive step numbers.",
    ),
    (
        "milestones out of order",
        "bench",
        ["scheduler=multistep", "scheduler.milestones=[20,10]"],
        2,
        "scheduler.milestones=[20, 10] is not valid",
    ),
    (  # issue 33 probe: a repeated milestone was accepted (torch applies gamma twice there)
        "milestone repeated",
        "bench",
        ["scheduler=multistep", "scheduler.milestones=[2,2]"],
        2,
        "scheduler.milestones=[2, 2] is not valid: accepted a non-empty increasing list of positive step numbers.",
    ),
    (
        "one-cycle share over 1",
        "bench",
        ["scheduler=onecycle", "scheduler.pct_start=1.5"],
        2,
        "scheduler.pct_start=1.5 is not valid: accepted a number between 0 and 1.",
    ),
    ("warm-up factor over 1", "bench", ["scheduler.warmup_start_factor=2"], 2, "scheduler.warmup_start_factor=2.0"),
    (
        "loss scaling without float16",
        "bench",
        ["precision.grad_scaler=true"],
        2,
        "precision.grad_scaler=True is not valid: accepted true only with precision.autocast_dtype=float16.",
    ),
    ("zero threads", "bench", ["cpu_threads=0"], 2, "cpu_threads=0 is not valid: accepted a positive integer or null."),
    (
        "several processes with single",
        "bench",
        ["distributed=single", "distributed.nproc_per_node=2"],
        2,
        "distributed.nproc_per_node=2 is not valid: accepted 1 with distributed=single",
    ),
    ("zero processes", "bench", ["distributed=ddp", "distributed.nproc_per_node=0"], 2, "distributed.nproc_per_node=0"),
    (
        "two nodes, no rendezvous",
        "bench",
        ["distributed=ddp", "distributed.nnodes=2"],
        2,
        "distributed.rdzv_endpoint=None is not valid: accepted host:port",
    ),
    (
        "rendezvous without a port",
        "bench",
        ["distributed=ddp", "distributed.rdzv_endpoint=node0"],
        2,
        "distributed.rdzv_endpoint='node0' is not valid: accepted host:port",
    ),
    (
        "node rank past the nodes",
        "bench",
        ["distributed=ddp", "distributed.nnodes=2", "distributed.node_rank=5", "distributed.rdzv_endpoint=h:1"],
        2,
        "distributed.node_rank=5",
    ),
    (
        "strong scaling, batch not divisible",
        "bench",
        ["distributed=ddp", "distributed.nproc_per_node=2", "distributed.scaling=strong", "data.batch_size=5"],
        2,
        "data.batch_size=5 is not valid: accepted a multiple of the process count (2) with distributed.scaling=strong",
    ),
    ("zero DDP timeout", "bench", ["distributed.timeout_s=0"], 2, "distributed.timeout_s=0.0"),
    (
        "real data without a root",
        "bench",
        ["data=imagefolder"],
        2,
        "data.root=None is not valid: accepted a directory holding the imagefolder dataset.",
    ),
    (
        "s3 root for cifar100",
        "bench",
        ["data=cifar100", "data.root=s3://b/x"],
        2,
        "data.root='s3://b/x' is not valid: accepted a local directory for data=cifar100",
    ),
    (
        "negative workers",
        "bench",
        ["data.num_workers=-1"],
        2,
        "data.num_workers=-1 is not valid: accepted a number >= 0 or null.",
    ),
    ("zero prefetch", "bench", ["data.prefetch_factor=0"], 2, "data.prefetch_factor=0"),
    (
        "s3 benchmark without a bucket",
        "bench",
        ["mode=storage", "storage=s3"],
        2,
        "storage.bucket=None is not valid: accepted a bucket name",
    ),
    (
        "bucket with a path",
        "bench",
        ["storage=s3", "storage.save_checkpoint=true", "storage.bucket=b/x"],
        2,
        "storage.bucket='b/x' is not valid: accepted a bucket name (no '/'",
    ),
    (
        "endpoint without a scheme",
        "bench",
        ["storage=s3", "storage.bucket=b", "storage.endpoint=minio:9000"],
        2,
        "storage.endpoint='minio:9000' is not valid",
    ),
    (
        "more accelerators than files",
        "bench",
        ["mode=storage", "storage.workload.num_files=8", "storage.accelerators=9"],
        2,
        "storage.accelerators=9 is not valid: accepted at most storage.workload.num_files=8 (each simulated",
    ),
    (
        "AU threshold in percent",
        "bench",
        ["storage.workload.au_threshold=90"],
        2,
        "storage.workload.au_threshold=90.0 is not valid: accepted a fraction in (0, 1]",
    ),
    (
        "zero record size",
        "bench",
        ["storage.workload.record_size=0"],
        2,
        "storage.workload.record_size=0 is not valid: accepted a positive integer.",
    ),
    (
        "batch larger than an accelerator reads",
        "bench",
        ["mode=storage", "storage.workload.batch_size=1000"],
        2,
        "storage.workload.batch_size=1000",
    ),
    (
        "dataset dir outside the root",
        "bench",
        ["storage.dataset_dir=/abs/elsewhere"],
        2,
        "storage.dataset_dir='/abs/elsewhere' is not valid: accepted a relative path",
    ),
    ("dataset dir climbing out", "bench", ["storage.dataset_dir=a/../../b"], 2, "without '..'"),
    ("checkpoint name with a path", "bench", ["storage.checkpoint_name=../../x.pt"], 2, "accepted a file name"),
    ("zero S3 attempts", "bench", ["storage.max_attempts=0"], 2, "storage.max_attempts=0"),
    ("zero S3 timeout", "bench", ["storage.timeout_s=0"], 2, "storage.timeout_s=0.0"),
    ("zero tracking probe", "bench", ["tracking.probe_timeout_s=0"], 2, "tracking.probe_timeout_s=0.0"),
    (
        "tracking required but off",
        "bench",
        ["tracking.enabled=false", "tracking.required=true"],
        2,
        "tracking.required=True is not valid: accepted false with tracking.enabled=false",
    ),
    # -- credentials typed on the command line: refused before Hydra saves them ------------------------
    (
        "S3 endpoint with a password",
        "bench",
        ["storage=s3", "storage.endpoint=http://u:CANARY@h:9000"],
        2,
        "storage.endpoint=<hidden: it carries credentials>",
    ),
    ("tracking URI with a password", "bench", ["tracking.uri=http://u:CANARY@h:5000"], 2, "tracking.uri=<hidden"),
    ("password key", "bench", ["+tracking.password=CANARY"], 2, "tracking.password=<hidden>"),
    ("secret key", "bench", ["+storage.secret_access_key=CANARY"], 2, "storage.secret_access_key=<hidden>"),
    (
        "password in a sweep",
        "bench",
        ["-m", "storage=s3", "storage.endpoint=http://u:CANARY@h:1,http://h:2"],
        2,
        "storage.endpoint=<hidden",
    ),
    ("a password key by a short name", "bench", ["+tracking.pwd=CANARY"], 2, "tracking.pwd=<hidden> is not valid"),
    (
        "rendezvous endpoint with a password",
        "bench",
        ["distributed.rdzv_endpoint=u:CANARY@node0:29400"],
        2,
        "distributed.rdzv_endpoint=<hidden: it carries credentials>",
    ),
    (
        "signed query in an endpoint",
        "bench",
        ["storage.endpoint=http://h:9000/?sig=CANARY"],
        2,
        "storage.endpoint=<hidden: it carries credentials> is not valid: accepted a URL without user:password or "
        "credentials in its query",
    ),
    (
        "secret variable read into the run name",
        "bench",
        ["tracking.run_name=${{oc.env:AWS_SECRET_ACCESS_KEY}}"],
        2,
        "tracking.run_name='${{oc.env:AWS_SECRET_ACCESS_KEY}}' is not valid: accepted no secret-looking",
    ),
    # -- what only the machine, the device and the disk can tell (preflight) ------------------------------
    (
        "GPU preset on a CPU machine",
        "bench",
        ["+experiment=a100_bf16"],
        2,
        "CUDA not available and allow_cpu=false: pass allow_cpu=true (or use +experiment=cpu_smoke) to run on the CPU.",
    ),
    (
        "fp16 on a CPU",
        "bench",
        ["precision=amp_fp16", CPU],
        2,
        "precision='amp_fp16' is not valid: accepted fp32, tf32 or bf16 on a CPU (amp_fp16 needs a CUDA GPU).",
    ),
    (
        "float16 autocast on a CPU",
        "bench",
        ["precision.autocast_dtype=float16", CPU],
        2,
        "precision.autocast_dtype='float16' is not valid",
    ),
    ("no such model", "bench", ["model.arch=resnet51", CPU], 2, "did you mean resnet50?"),
    (
        "ViT input not a multiple of its patch",
        "bench",
        ["model=vit_b_16", "data.image_size=40", CPU],
        2,
        "data.image_size=40 is not valid: accepted a multiple of 16",
    ),
    (
        "more threads than cores",
        "bench",
        ["cpu_threads=1000", CPU],
        2,
        "cpu_threads=1000 is not valid: accepted at most",
    ),
    (
        "largest-batch search on a CPU",
        "bench",
        ["benchmark.find_max_batch=true", CPU],
        2,
        "benchmark.find_max_batch=True is not valid: accepted false on a CPU",
    ),
    ("more loader workers than cores", "bench", ["data.num_workers=1000", CPU], 2, "data.num_workers=1000"),
    (
        "more CPU ranks than cores",
        "bench",
        ["distributed=ddp", "distributed.nproc_per_node=1000", CPU],
        2,
        "distributed.nproc_per_node=1000",
    ),
    (
        "a batch larger than memory",
        "bench",
        ["data.batch_size=1000000000", CPU],
        2,
        "accepted a batch that fits in memory",
    ),
    ("an image larger than memory", "bench", ["data.image_size=100000", CPU], 2, "data.image_size=100000"),
    (
        "a record larger than memory",
        "bench",
        ["mode=storage", "storage.workload.record_size=1000000000000"],
        2,
        "storage.workload.record_size=1000000000000",
    ),
    (
        "dataset root missing",
        "bench",
        ["data=imagefolder", "data.root={tmp}/nope", CPU],
        2,
        "data.root='{tmp}/nope' does not exist",
    ),
    ("dataset root empty", "bench", ["data=imagefolder", "data.root={empty}", CPU], 2, "is empty"),
    (
        "image folder of non-images",
        "bench",
        ["data=imagefolder", "data.root={notimages}", CPU],
        2,
        "none of its first 3 images can be decoded",
    ),
    (
        "more classes than the head",
        "bench",
        ["data=imagefolder", "data.root={images}", "data.num_classes=3", CPU],
        2,
        "has 4 classes but data.num_classes=3",
    ),
    (
        "no CIFAR files",
        "bench",
        ["data=cifar100", "data.root={empty}", CPU],
        2,
        "meta in {empty} (data.download=true fetches them there)",
    ),
    ("no shards", "bench", ["data=shards", "data.root={empty}", CPU], 2, "holds no train/meta.json"),
    (
        "run dir under a file",
        "bench",
        ["hydra.run.dir={tmp}/a-file/run"],
        2,
        "hydra.run.dir='{tmp}/a-file/run' is not valid: accepted a directory this user can write",
    ),
    # -- issue 18, items 6 and 12 (the schema's new rules: tests/unit/test_config.py::test_seams_*) ----
    (
        "group without +",
        "bench",
        ["experiment=cpu_smoke"],
        2,
        "experiment='cpu_smoke' is not valid: accepted +experiment=cpu_smoke",
    ),
    (
        "unquoted value with a space",
        "bench",
        ["tracking.run_name=my", "run", CPU],
        2,
        "'run' is not an override (key=value): it follows 'tracking.run_name=my'. A value with a space must be quoted",
    ),
    (
        "value the override lexer cannot read",
        "bench",
        ["tracking.run_name=my run!", CPU],
        2,
        "quote a value that holds spaces or special characters",
    ),
    (
        "an empty MLflow experiment",
        "bench",
        ["tracking.experiment=''", CPU],
        2,
        "tracking.experiment='' is not valid: accepted a non-empty MLflow experiment name",
    ),
    (
        "single with two nodes",
        "bench",
        ["distributed=single", "distributed.nnodes=2"],
        2,
        "distributed.nnodes=2 is not valid: accepted 1 with distributed=single "
        "(more than one node needs distributed=ddp)",
    ),
    (
        "a million profiled steps",
        "bench",
        ["profile.enabled=true", "profile.steps=1000000", CPU],
        2,
        "profile.steps=1000000 is not valid: accepted 1 to 100",
    ),
    (
        "a million breakdown steps",
        "bench",
        ["benchmark.breakdown=true", "benchmark.breakdown_steps=1000000", CPU],
        2,
        "benchmark.breakdown_steps=1000000 is not valid: accepted 1 to 1000",
    ),
    (
        "BatchNorm training on one image",
        "bench",
        ["model=resnet18", "data.batch_size=1", CPU],
        2,
        "data.batch_size=1 is not valid: accepted at least 2 images per process to train model=resnet18",
    ),
    (
        "prefetch beyond memory",
        "bench",
        [
            "data=imagefolder",
            "data.root={images}",
            "data.num_classes=4",
            "data.num_workers=1",
            "data.prefetch_factor=100000000",
            CPU,
        ],
        2,
        "data.prefetch_factor=100000000 is not valid: accepted at most",
    ),
    (
        "shard label outside the classes",
        "bench",
        ["data=shards", "data.root={badshards}", "data.num_classes=2", CPU],
        2,
        "shard-00000.bin record 1 has label -1, outside [0, 2)",
    ),
    # -- issue 18, item 6: caps on the storage benchmark's keys, and a dataset larger than the disk ---------
    (
        "reader threads over the cap",
        "bench",
        ["storage.workload.read_threads=5000"],
        2,
        "storage.workload.read_threads=5000 is not valid: accepted an integer in [1, 1024]",
    ),
    (
        "reader processes on S3",
        "bench",
        ["mode=storage", "storage=s3", "storage.bucket=b", "storage.workload.readers=processes"],
        2,
        "storage.workload.readers='processes' is not valid: accepted threads or auto unless the files are in a local "
        "directory (not s3, not direct_io)",
    ),
    (
        "reader processes with direct I/O",
        "bench",
        ["mode=storage", "storage.direct_io=true", "storage.workload.readers=processes"],
        2,
        "storage.workload.readers='processes' is not valid: accepted threads or auto unless",
    ),
    (
        "prepare workers over the cap",
        "bench",
        ["storage.prepare_workers=5000"],
        2,
        "storage.prepare_workers=5000 is not valid: accepted an integer in [1, 1024]",
    ),
    (
        "record size spread over the record size",
        "bench",
        ["storage.workload.record_size_stdev=100000"],
        2,
        "storage.workload.record_size_stdev=100000 is not valid: accepted an integer in [0, record_size=65536]",
    ),
    (
        "transfer size over what a read returns",
        "bench",
        ["storage.workload.transfer_size=1000000000000"],
        2,
        "storage.workload.transfer_size=1000000000000 is not valid: accepted an integer in [1, 2147479552] or null",
    ),
    (
        "more files than memory can plan",
        "bench",
        ["mode=storage", "storage.workload.num_files=1000000000"],
        2,
        "storage.workload.num_files=1000000000 is not valid: accepted an integer in [1, ",
    ),
    (
        "more accelerator processes than memory",
        "bench",
        ["mode=storage", "storage.workload.num_files=1000000", "storage.accelerators=1000000"],
        2,
        "storage.accelerators=1000000 is not valid: accepted an integer in [1, ",
    ),
    (
        "a dataset larger than the disk",
        "bench",
        [
            "mode=storage",
            "storage.root={tmp}/data",
            "storage.workload.num_files=100000",
            "storage.workload.samples_per_file=1000",
            "storage.workload.record_size=100000000",
            "storage.workload.read_mode=sample",
            "storage.workload.read_threads=1",
            "storage.workload.checkpoint_size_mb=0",
        ],
        2,
        "storage.workload.num_files=100000 x samples_per_file=1000 x record_size=100000000 needs 10000",
    ),
    # -- moved from tests/unit/test_config.py (each input tested once, here, through the entry code) ----
    (
        "infinite measured seconds",
        "bench",
        ["benchmark.measure_seconds=inf"],
        2,
        "benchmark.measure_seconds=inf is not valid: accepted a finite number.",
    ),
    (
        "a nan beta",
        "bench",
        ["optimizer.betas=[0.9,nan]"],
        2,
        "optimizer.betas=[0.9, nan] is not valid: accepted finite numbers.",
    ),
    (
        "dataset dir at the filesystem root",
        "bench",
        ["storage.dataset_dir=/"],
        2,
        "storage.dataset_dir='/' is not valid: accepted a relative path inside storage.root",
    ),
    (
        "storage batch larger than one epoch reads",
        "bench",
        ["mode=storage", "storage.workload.batch_size=128", "storage.workload.epochs=1"],
        2,
        "storage.workload.batch_size=128 is not valid",
    ),
    ("negative eps", "bench", ["optimizer.eps=-1"], 2, "optimizer.eps=-1.0 is not valid: accepted a positive number."),
    (
        "beta of 1",
        "bench",
        ["optimizer.betas=[0.9,1.0]"],
        2,
        "optimizer.betas=[0.9, 1.0] is not valid: accepted two numbers in [0, 1)",
    ),
    (
        "negative beta",
        "bench",
        ["optimizer.betas=[-0.1,0.999]"],
        2,
        "optimizer.betas=[-0.1, 0.999] is not valid: accepted two numbers in [0, 1)",
    ),
    (
        "three billion classes",
        "bench",
        ["data.num_classes=3000000000"],
        2,
        "data.num_classes=3000000000 is not valid: accepted at most 1,000,000",
    ),
    (
        "zero gamma",
        "bench",
        ["scheduler=multistep", "scheduler.gamma=0"],
        2,
        "scheduler.gamma=0.0 is not valid: accepted a positive number.",
    ),
    (
        "negative gamma",
        "bench",
        ["scheduler.gamma=-0.5"],
        2,
        "scheduler.gamma=-0.5 is not valid: accepted a positive number.",
    ),
    (
        "cosine floor above the lr",
        "bench",
        ["scheduler=cosine", "scheduler.min_lr=0.5"],
        2,
        "scheduler.min_lr=0.5 is not valid: accepted a floor at most optimizer.lr=0.1",
    ),
    (
        "a lr with mode=inference",
        "bench",
        ["mode=inference", "optimizer.lr=0.5"],
        2,
        "optimizer.lr=0.5 is not valid: accepted its default with mode=inference",
    ),
    (
        "a schedule with mode=inference",
        "bench",
        ["mode=inference", "scheduler=cosine"],
        2,
        "scheduler.name='cosine' is not valid: accepted its default with mode=inference",
    ),
    (
        "checkpoints with mode=inference",
        "bench",
        ["mode=inference", "checkpoint.keep_last=5"],
        2,
        "checkpoint.keep_last=5 is not valid: accepted its default with mode=inference",
    ),
    (
        "label smoothing with mode=inference",
        "bench",
        ["mode=inference", "train.label_smoothing=0.1"],
        2,
        "train.label_smoothing=0.1 is not valid: accepted its default",
    ),
    (
        "a renamed key and its new name",
        "bench",
        ["+scheduler.warmup_steps=5", "scheduler.lr_warmup_steps=3"],
        2,
        "scheduler.warmup_steps=5 is not valid: accepted null when scheduler.lr_warmup_steps=3 is set too",
    ),
    (
        "clients and accelerators both",
        "bench",
        ["storage.clients=2", "storage.accelerators=3"],
        2,
        "storage.clients=2 is not valid: accepted null when storage.accelerators=3 is set too",
    ),
    (
        "download of synthetic data",
        "bench",
        ["data.download=true"],
        2,
        "data.download=True is not valid: accepted false with data=synthetic (only data=cifar100 can be downloaded)",
    ),
    # -- issue 33.3: a directory bench writes into that cannot be one: refused before any run (a
    # NotADirectoryError or FileExistsError after the measurement, a FAILED run) -----------------------
    (
        "storage root is a file",
        "bench",
        ["mode=storage", "storage.root={tmp}/a-file"],
        2,
        "storage.root='{tmp}/a-file' is not valid: accepted a directory this user can write (made if missing); "
        "{tmp}/a-file is a file.",
    ),
    (
        "storage root under a file, epoch checkpoints",
        "bench",
        ["+experiment=cpu_smoke", "checkpoint.every_epochs=1", "storage.root={tmp}/a-file/ckpt"],
        2,
        "storage.root='{tmp}/a-file/ckpt' is not valid: accepted a directory this user can write (made if "
        "missing); {tmp}/a-file is a file.",
    ),
    (
        "end-of-run checkpoint into a file",
        "bench",
        ["+experiment=cpu_smoke", "storage.save_checkpoint=true", "storage.root={tmp}/a-file"],
        2,
        "storage.root='{tmp}/a-file' is not valid",
    ),
    (
        "resume into a file",
        "bench",
        ["+experiment=cpu_smoke", "train.resume=auto", "storage.root={tmp}/a-file"],
        2,
        "storage.root='{tmp}/a-file' is not valid",
    ),
    (
        "checkpoint dir is a file",
        "bench",
        ["+experiment=cpu_smoke", "checkpoint.every_epochs=1", "storage.root={tmp}", "checkpoint.dir=a-file"],
        2,
        "checkpoint.dir='a-file' is not valid: accepted a directory this user can write (made if missing); "
        "{tmp}/a-file is a file.",
    ),
    (
        "storage dataset dir is a file",
        "bench",
        ["mode=storage", "storage.root={tmp}", "storage.dataset_dir=a-file"],
        2,
        "storage.dataset_dir='a-file' is not valid: accepted a directory this user can write (made if missing); "
        "{tmp}/a-file is a file.",
    ),
    (
        "CIFAR download into a file",
        "bench",
        ["data=cifar100", "data.root={tmp}/a-file", "data.download=true", CPU],
        2,
        "data.root='{tmp}/a-file' is not valid: accepted a directory this user can write",
    ),
    # -- the other commands ---------------------------------------------------------------------------
    ("radix flag misspelt", "bench.radix", ["--batchsize", "3"], 2, "unrecognized arguments: --batchsize"),
    ("radix bad override", "bench.radix", ["--allow-cpu", "data.batch_size=0"], 2, "data.batch_size=0"),
    ("radix flag without a number", "bench.radix", ["--lr", "fast"], 2, "argument --lr: invalid float value: 'fast'"),
    (
        "report of no sweep",
        "bench.report",
        ["--sweep", "{tmp}/nope"],
        2,
        "is neither a directory nor a run in the MLflow store",
    ),
    (
        "prepare from nowhere",
        "bench.data",
        ["prepare", "--src", "{tmp}/nope", "--dst", "{tmp}/out"],
        2,
        "does not exist",
    ),
    (
        "prepare with a misspelt storage key",
        "bench.data",
        ["prepare", "--src", "{images}", "--dst", "s3://b/p", "--storage", "endpont=http://x:1"],
        2,
        "did you mean storage.endpoint",
    ),
    ("upload of no run", "bench.tools.upload", ["{tmp}/nope"], 2, "holds no run_summary.json"),
    # a store that does not answer: one line after a 5 s probe (MLflow's own back-off took minutes),
    # the password in its URI never shown
    (
        "report from an MLflow server that is down",
        "bench.report",
        ["--sweep", "0123456789abcdef0123456789abcdef", "--tracking-uri", "http://u:CANARY@127.0.0.1:9"],
        2,
        "the MLflow server at http://***@127.0.0.1:9 cannot be reached",
    ),
    (
        "compare against an MLflow server that is down",
        "bench.compare",
        [
            "0123456789abcdef0123456789abcdef",
            "0123456789abcdef0123456789abcdee",
            "--tracking-uri",
            "http://u:CANARY@127.0.0.1:9",
        ],
        2,
        "the MLflow server at http://***@127.0.0.1:9 cannot be reached",
    ),
    # issue 28 item 4: 1000 rounds were 4,000 fresh processes; refused before the first
    (
        "compare rerun of too many rounds",
        "bench.compare",
        ["{empty}", "{empty}", "--rerun", "1000"],
        2,
        "--rerun=1000 is not valid: accepted 2 to 20 rounds",
    ),
    (  # issue 33: accepted, then MLflow's KeyError at the first call
        "report from a store MLflow has no scheme for",
        "bench.report",
        ["--sweep", "0123456789abcdef0123456789abcdef", "--tracking-uri", "foo://bar"],
        2,
        "MLflow has no tracking store for foo://bar: accepted a URI of a store MLflow can track to: ",
    ),
    (
        "stale runs on an MLflow server that is down",
        "bench.tools.stale",
        ["--tracking-uri", "http://u:CANARY@127.0.0.1:9"],
        2,
        "the MLflow server at http://***@127.0.0.1:9 cannot be reached",
    ),
    (  # issue 39.7: only a half-made sqlite store (no runs) is ever moved
        "stale --move-aside of a store that is not a half-made sqlite file",
        "bench.tools.stale",
        ["--move-aside", "--tracking-uri", "http://u:CANARY@127.0.0.1:9"],
        2,
        "http://***@127.0.0.1:9 is not a half-made sqlite store: nothing moved",
    ),
    (  # issue 33 probe: MLflow's own back-off (a silent server: 7 tries of 120 s)
        "upload to an MLflow server that is down",
        "bench.tools.upload",
        ["{finished}", "--tracking-uri", "http://u:CANARY@127.0.0.1:9"],
        2,
        "the MLflow server at http://***@127.0.0.1:9 cannot be reached",
    ),
    # -- the doctor: its own keys, and the training config it diagnoses ------------------------------------
    (
        "doctor budget not a number",
        "bench.doctor",
        ["doctor.budget_s=soon", CPU],
        2,
        "doctor.budget_s='soon' is not valid: accepted a number of seconds above 0 and at most 3600, e.g. 180.",
    ),
    (
        "doctor key misspelt",
        "bench.doctor",
        ["doctor.budget=60", CPU],
        2,
        "doctor.budget='60' is not valid: accepted one of the doctor's keys "
        "(doctor.budget_s, doctor.what_ifs, doctor.out).",
    ),
    (
        "doctor what-ifs not a flag",
        "bench.doctor",
        ["doctor.what_ifs=some", CPU],
        2,
        "doctor.what_ifs='some' is not valid: accepted true or false.",
    ),
    (
        "doctor of a storage run",
        "bench.doctor",
        ["mode=storage", CPU],
        2,
        "mode='storage' is not valid: accepted train: the doctor diagnoses training runs.",
    ),
    ("doctor of an unknown model", "bench.doctor", ["model=nope", CPU], 2, "model='nope' is not valid"),
    (
        "doctor of a dataset that is not there",
        "bench.doctor",
        ["data=imagefolder", "data.root={tmp}/nope", CPU],
        2,
        "does not exist",
    ),
    # issue 28: caps and places refused before any work (they cost 48 s, or hours, and a traceback)
    (
        "doctor budget beyond the cap",
        "bench.doctor",
        ["doctor.budget_s=1e9", CPU],
        2,
        "doctor.budget_s='1e9' is not valid: accepted a number of seconds above 0 and at most 3600, e.g. 180.",
    ),
    (
        "doctor out is a file",
        "bench.doctor",
        ["doctor.out={tmp}/a-file", CPU],
        2,
        "doctor.out='{tmp}/a-file' is not valid: accepted a directory this user can write (made if missing); "
        "{tmp}/a-file is a file.",
    ),
    ("doctor out under a file", "bench.doctor", ["doctor.out={tmp}/a-file/doctor", CPU], 2, "{tmp}/a-file is a file"),
    (
        "storage ceiling of no files",
        "bench.tools.storage_ceiling",
        ["--files", "0"],
        2,
        "--files=0 is not valid: accepted an integer of 1 or more.",
    ),
    (
        "storage ceiling with no threads",
        "bench.tools.storage_ceiling",
        ["--threads", "0"],
        2,
        "--threads=0 is not valid: accepted an integer of 1 or more.",
    ),
    (
        "storage ceiling with negative threads",
        "bench.tools.storage_ceiling",
        ["--threads", "-3"],
        2,
        "--threads=-3 is not valid: accepted an integer of 1 or more.",
    ),
    # issue 33 held-out probe: a floor of nan was accepted (it fails no comparison: ~20 s of work, no check)
    (
        "storage ceiling floor of nan",
        "bench.tools.storage_ceiling",
        ["--min-fio", "nan"],
        2,
        "--min-fio=nan is not valid: accepted a finite ratio above 0 (bench/fio, e.g. 0.9).",
    ),
    ("storage ceiling floor infinite", "bench.tools.storage_ceiling", ["--min-plain", "inf"], 2, "--min-plain=inf"),
    ("storage ceiling floor negative", "bench.tools.storage_ceiling", ["--min-fio", "-0.5"], 2, "--min-fio=-0.5"),
    (
        "storage ceiling root under a file",
        "bench.tools.storage_ceiling",
        ["--root", "{tmp}/a-file/data"],
        2,
        "--root='{tmp}/a-file/data' is not valid: accepted a directory this user can write",
    ),
    # -- issue 33: a directory a tool writes into, and the tools' own arguments ----------------------------
    (
        "prepare into a file",
        "bench.data",
        ["prepare", "--src", "{images}", "--dst", "{tmp}/a-file"],
        2,
        "--dst='{tmp}/a-file' is not valid: accepted a directory this user can write (made if missing); "
        "{tmp}/a-file is a file.",
    ),
    (
        "prepare with negative workers",
        "bench.data",
        ["prepare", "--src", "{images}", "--dst", "{tmp}/out", "--workers", "-1"],
        2,
        "--workers=-1 is not valid: accepted an integer of 1 or more (0, or none: the CPU count).",
    ),
    ("digits under a file", "bench.data", ["digits", "--dst", "{tmp}/a-file/d"], 2, "{tmp}/a-file is a file"),
    # digits' own flags: refused before anything is written (not even a temporary folder: the check below)
    (
        "digits of size zero",
        "bench.data",
        ["digits", "--dst", "{tmp}/out", "--size", "0"],
        2,
        "[ERROR] --size=0 is not valid",
    ),
    (
        "digits of a size in words",
        "bench.data",
        ["digits", "--dst", "{tmp}/out", "--size", "big"],
        2,
        "[ERROR] --size='big' is not valid",
    ),
    (
        "digits val beyond 1",
        "bench.data",
        ["digits", "--dst", "{tmp}/out", "--val-fraction", "1.5"],
        2,
        "[ERROR] --val-fraction=1.5 is not valid",
    ),
    (
        "digits val of zero",
        "bench.data",
        ["digits", "--dst", "{tmp}/out", "--val-fraction", "0"],
        2,
        "[ERROR] --val-fraction=0.0 is not valid",
    ),
    (
        "digits as gif",
        "bench.data",
        ["digits", "--dst", "{tmp}/out", "--format", "gif"],
        2,
        "[ERROR] --format='gif' is not valid: accepted png or jpeg",
    ),
    (
        "digits negative seed",
        "bench.data",
        ["digits", "--dst", "{tmp}/out", "--seed", "-1"],
        2,
        "[ERROR] --seed=-1 is not valid",
    ),
    (
        "loader benchmark dir is a file",
        "bench.data",
        ["bench-loader", "--dir", "{tmp}/a-file"],
        2,
        "--dir='{tmp}/a-file' is not valid",
    ),
    (  # issue 41: its sizing flags are spellings of the loaders' config keys, checked before any image is written
        "loader benchmark batch of zero",
        "bench.data",
        ["bench-loader", "--batch-size", "0", "--dir", "{tmp}/loader"],
        2,
        "data.batch_size=0 is not valid: accepted a positive integer.",
    ),
    (
        "report out is a file",
        "bench.report",
        ["--sweep", "{empty}", "--out", "{tmp}/a-file"],
        2,
        "--out='{tmp}/a-file' is not valid: accepted a directory this user can write (made if missing); "
        "{tmp}/a-file is a file.",
    ),
    (
        "report of a run id in a store that is not there",
        "bench.report",
        ["--sweep", "0123456789abcdef0123456789abcdef", "--tracking-uri", "sqlite:///{tmp}/none.db"],
        2,
        "is neither a directory nor a run in the MLflow store at sqlite:///{tmp}/none.db: {tmp}/none.db does not exist",
    ),
    (
        "compare out is a file",
        "bench.compare",
        ["{empty}", "{empty}", "--out", "{tmp}/a-file"],
        2,
        "--out='{tmp}/a-file' is not valid",
    ),
    ("train costs dir is a file", "bench.tools.train_costs", ["--dir", "{tmp}/a-file"], 2, "{tmp}/a-file is a file"),
    (
        "train costs of no rounds",
        "bench.tools.train_costs",
        ["--rounds", "0"],
        2,
        "--rounds=0 is not valid: accepted an integer of 1 or more.",
    ),
    # the other A/B tools refused no rounds with bench.analysis.rounds' ValueError traceback (one flag
    # declared once: bench.tools.ab.below_one); their other counts alike
    ("overhead of no rounds", "bench.overhead", ["--rounds", "0"], 2, "--rounds=0 is not valid: accepted an integer"),
    ("sweep overhead of no rounds", "bench.sweep_overhead", ["--rounds", "0"], 2, "--rounds=0 is not valid"),
    ("sweep overhead of no steps", "bench.sweep_overhead", ["--steps", "0"], 2, "--steps=0 is not valid"),
    ("iobench compare of no rounds", "bench.iobench.compare", ["local", "--rounds", "0"], 2, "--rounds=0 is not valid"),
    (
        "iobench compare of empty files",
        "bench.iobench.compare",
        ["local", "--file-kb", "0"],
        2,
        "--file-kb=0 is not valid",
    ),
    ("bench-loader of no rounds", "bench.data", ["bench-loader", "--rounds", "0"], 2, "--rounds=0 is not valid"),
    ("bench-loader of no batches", "bench.data", ["bench-loader", "--batches", "0"], 2, "--batches=0 is not valid"),
    # issue 41: the A/B tools' sizing flags are spellings of config keys, refused as the config refuses them
    (
        "overhead batch of zero",
        "bench.overhead",
        ["--batch-size", "0", "--rounds", "1"],
        2,
        "data.batch_size=0 is not valid: accepted a positive integer.",
    ),
    ("overhead config key as a flag", "bench.overhead", ["--data.num_classes=0"], 2, "data.num_classes=0 is not valid"),
    (
        "train costs of an unknown model",
        "bench.tools.train_costs",
        ["--model", "resnet51"],
        2,
        "--model='resnet51' is not valid: accepted a torchvision classification model",
    ),
    (
        "storage size of no hosts",
        "bench.tools.storage_size",
        ["--hosts", "0"],
        2,
        "--hosts=0 is not valid: accepted an integer of 1 or more.",
    ),
    (
        "storage size of nan memory",
        "bench.tools.storage_size",
        ["--host-memory-gb", "nan"],
        2,
        "--host-memory-gb=nan is not valid: accepted a number of GB above 0.",
    ),
    (
        "storage size of negative memory",
        "bench.tools.storage_size",
        ["--host-memory-gb", "-1"],
        2,
        "--host-memory-gb=-1.0 is not valid: accepted a number of GB above 0.",
    ),
    ("storage size flag misspelt", "bench.tools.storage_size", ["--hots", "4"], 2, "unrecognized arguments: --hots"),
    (  # issue 41: its --threads spells storage.workload.read_threads, refused as the storage benchmark refuses it
        "storage compare with no threads",
        "bench.iobench.compare",
        ["local", "--threads", "0"],
        2,
        "storage.workload.read_threads=0 is not valid: accepted a positive integer.",
    ),
    (
        "storage compare root is a file",
        "bench.iobench.compare",
        ["local", "--root", "{tmp}/a-file"],
        2,
        "--root='{tmp}/a-file' is not valid",
    ),
    # issue 33 held-out probe: each check ran and failed with the config's refusal in its row; a kit was
    # built without the extra asked for (pip only warns), and --out a file was a traceback
    (
        "gpu check override the config refuses",
        "bench.tools.gpu_check",
        ["--rehearse", "--only", "fp32", "--set", "nokey=1"],
        2,
        "--set nokey=1: nokey='1' is not valid: accepted a key of the config.",
    ),
    ("gpu check of an unknown model", "bench.tools.gpu_check", ["--model", "nosuch"], 2, "--model nosuch: model.arch="),
    (
        "kit out is a file",
        "bench.tools.kit",
        ["--have", "{tmp}/a-file", "--out", "{tmp}/a-file"],
        2,
        "--out='{tmp}/a-file' is not valid: accepted a directory this user can write (made if missing); "
        "{tmp}/a-file is a file.",
    ),
    (
        "kit of an extra bench has not",
        "bench.tools.kit",
        ["--have", "{tmp}/a-file", "--extras", "s3,nosuch", "--out", "{tmp}/kit"],
        2,
        "--extras='nosuch' is not valid: accepted bench's extras (mlperf, s3, ",
    ),
    (
        "kit for a Python not here",
        "bench.tools.kit",
        ["--have", "{tmp}/a-file", "--python", "3.99", "--out", "{tmp}/kit"],
        2,
        "--python 3.99: no such Python here (pip judges a package's markers by the Python it runs on)",
    ),
    (
        "gpu check keep is a file",
        "bench.tools.gpu_check",
        ["--rehearse", "--keep", "{tmp}/a-file"],
        2,
        "--keep='{tmp}/a-file' is not valid",
    ),
]


def rows(first: str, until: Optional[str] = None) -> list:
    """The table's rows from the one named `first` up to (not including) the one named `until`:
    the table is one list, run as three test files so they spread over the test workers."""
    names = [row[0] for row in BAD_INPUTS]
    return BAD_INPUTS[names.index(first) : names.index(until) if until else None]


def ids(table: list) -> list:
    return [row[0] for row in table]


NEEDS_NO_GPU = {
    "GPU preset on a CPU machine",
    "fp16 on a CPU",
    "float16 autocast on a CPU",
    "more CPU ranks than cores",
    "largest-batch search on a CPU",
}

# The rows that also run as real `python -m` processes, proving the command-line path itself: a
# refusal while Hydra composes, one by the schema, one before Hydra sees the arguments (a
# credential), one by the preflight, and two other commands' argument parsers.
THROUGH_A_PROCESS = (
    "unknown model option",
    "zero batch",
    "S3 endpoint with a password",
    "dataset root missing",
    "radix flag misspelt",
    "upload of no run",
)


@dataclass
class Outcome:
    returncode: int
    stdout: str
    stderr: str


@contextlib.contextmanager
def process_state_kept():
    """What a process would start afresh and one in-process run may change: the arguments, the
    root logger (Hydra's job logging adds handlers), signal handlers, torch's thread count, and
    the redacting wrappers bench puts around sys.stdout/sys.stderr and log records."""
    import torch

    root = logging.getLogger()
    saved = (
        list(sys.argv),
        list(root.handlers),
        root.level,
        logging.raiseExceptions,
        {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)},
        torch.get_num_threads(),
    )
    streams, record_factory = (sys.stdout, sys.stderr), logging.getLogRecordFactory()
    try:
        yield
    finally:
        sys.stdout, sys.stderr = streams
        logging.setLogRecordFactory(record_factory)
        sys.argv[:] = saved[0]
        for handler in [h for h in root.handlers if h not in saved[1]]:
            root.removeHandler(handler)
            handler.close()
        root.setLevel(saved[2])
        logging.raiseExceptions = saved[3]
        for sig, handler in saved[4].items():
            signal.signal(sig, handler)
        torch.set_num_threads(saved[5])


def run_in_process(module: str, args: list, capfd) -> Outcome:
    """`python -m <module> <args>` in this process: the same module code run as __main__ (runpy, as
    `-m` does), its exit code from SystemExit, its output captured at the file descriptors."""
    capfd.readouterr()
    code = 0
    # run afresh, as `python -m` does: a copy another test imported of the module run (a package's
    # __main__: bench.__main__; bench.tools.kit) is set aside, and put back after (runpy warns that
    # running beside it "may result in unpredictable behaviour")
    is_package = importlib.util.find_spec(module).submodule_search_locations is not None
    executed = f"{module}.__main__" if is_package else module
    imported = sys.modules.pop(executed, None)
    with process_state_kept():
        sys.argv[:] = [module, *args]
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        finally:
            if imported is not None:
                sys.modules[executed] = imported
    out, err = capfd.readouterr()
    return Outcome(code, out, err)


def check_bad_input(bench, places, name, module, args, code, words, *, capfd=None, monkeypatch=None) -> None:
    """One row: one line, its exit code, no traceback, nothing on stdout, no run left RUNNING.
    With `capfd` and `monkeypatch` the command runs in this process (the fast path, the same entry
    code as the command line); without them, as a real `python -m` process."""
    if name in NEEDS_NO_GPU and __import__("torch").cuda.is_available():
        pytest.skip("a refusal of the CPU-only path; this machine has a CUDA GPU")
    args = [arg.format(**places) for arg in args]
    if module == "bench" and not any(arg.startswith("hydra.run.dir=") for arg in args):
        args.append(f"hydra.run.dir={places['tmp']}/run")
    if capfd is None:
        # fresh: these rows are the proof that the real command line (a new interpreter's
        # `python -m`) refuses in one line; the rest of the table runs in this process
        proc = bench.run(*args, module=module, env=bench.env(bench.uri), fresh=True)
    else:
        for variable, value in bench.env(bench.uri).items():
            monkeypatch.setenv(variable, value)
        monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
        monkeypatch.chdir(bench.cwd)
        proc = run_in_process(module, args, capfd)
    assert proc.returncode == code, f"{proc.stdout}\n{proc.stderr}"
    # bench's lines start with [ERROR]; argparse's (a tool's misspelt flag) hold ": error: " after a usage line
    errors = [line for line in proc.stderr.splitlines() if line.startswith("[ERROR]") or ": error: " in line]
    assert len(errors) == 1, proc.stderr
    assert words.format(**places) in errors[0], errors[0]
    assert "Traceback" not in proc.stderr and proc.stdout.strip() == ""
    if module in ("bench", "bench.radix"):  # their refusals print that line and nothing else (issue 40 §10)
        assert [line for line in proc.stderr.splitlines() if line.strip()] == errors, proc.stderr
    assert "CANARY" not in proc.stderr + proc.stdout
    assert not bench.db.exists() or all(run.info.status != "RUNNING" for run in bench.runs())
    if module == "bench" and "-m" in args:  # a refused sweep opens no parent run: no store is made for it
        assert not bench.db.exists()
    if module == "bench":  # nothing this command made stays: not the run dir it named, no outputs/ or multirun/
        left = [path for path in ("run", "outputs", "multirun") if (bench.cwd / path).exists()]
        assert left == [], f"left behind: {left}"
    if module == "bench" and code == 2:  # a refused config: refused before any MLflow store is made
        assert not bench.db.exists()
    # nothing written where the command was pointed: not its output, not a temporary folder
    made = sorted(path.name for path in places["tmp"].iterdir() if path.name != "a-file")
    assert made in ([], ["mlflow.db"]) if code != 2 else made == [], f"the refused command left {made}"
