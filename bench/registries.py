"""The open sets: storage record formats, storage backends, S3 clients and data options, each a
table of name -> "module:attr" of its code (imported only when a run uses it).

One line in a table registers an option: the config accepts its name (bench.config checks the key
against the table here, naming the accepted ones when a value is not one of them), and the code
that runs it (bench.iobench.formats.base, bench.storage.base, bench.storage.s3,
bench.data.registry) loads it from here. A value of the form "module:attr" names a user's own
class or function instead, imported from wherever Python finds it (PYTHONPATH, an installed
package): `storage.workload.format=mypkg.formats:MyFormat`, no line here.

Light on purpose (bench.errors only): bench.config reads it.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional

from bench.errors import ConfigError

FORMATS: Dict[str, str] = {  # storage.workload.format: a bench.iobench.formats.base.Format
    "raw": "bench.iobench.formats.raw:RawFormat",  # records back to back
    "npz": "bench.iobench.formats.npz:NpzFormat",  # a numpy archive of a (samples, record_size) uint8 array
    # real TFRecord framing (length, masked CRC-32C of it, data, masked CRC-32C of data)
    "tfrecord": "bench.iobench.formats.tfrecord:TFRecordFormat",
    "hdf5": "bench.iobench.formats.hdf5:HDF5Format",  # an h5py dataset chunked one sample per chunk
    "jpeg": "bench.iobench.formats.jpeg:JPEGFormat",  # one real JPEG image per file (samples_per_file=1)
}

BACKENDS: Dict[str, str] = {  # storage.name (conf/storage/<name>.yaml): a bench.storage.base.Backend
    "local": "bench.storage.local:LocalBackend",  # a local directory
    "s3": "bench.storage.s3:S3Backend",  # an S3 bucket (AWS, MinIO, Ceph, ...)
}

S3_CLIENTS: Dict[str, str] = {  # storage.client, with storage=s3: a bench.storage.s3.S3Store
    "obstore": "bench.storage.s3.obstore_store:ObstoreStore",  # Rust object_store: the fastest and leanest here
    # the AWS CRT client (pip install 'bench[s3torch]')
    "s3torchconnector": "bench.storage.s3.torchconnector_store:S3TorchConnectorStore",
    "boto3": "bench.storage.s3.boto3_store:Boto3Store",
}


@dataclass(frozen=True)
class DataOption:
    batches: str  # "module:function" building the batch iterator (bench.data.registry.build_batches)
    check: Optional[str] = None  # "module:function(data)": data.root holds this dataset (lists, never reads)
    val: Optional[str] = None  # "module:function" building one rank's validation pass (train.eval_every)


DATA: Dict[str, DataOption] = {  # data.name (conf/data/<name>.yaml); a user's own: its batches builder
    "synthetic": DataOption("bench.data.device_batches:synthetic_batches"),  # one batch made once on the device
    "imagefolder": DataOption(  # JPEG/PNG files, one folder per class
        "bench.data.imagefolder:imagefolder_batches",
        "bench.data.layout:check_imagefolder",
        "bench.data.imagefolder:imagefolder_val_batches",
    ),
    "cifar100": DataOption(  # the official CIFAR-100 python files
        "bench.data.cifar100:cifar100_batches",
        "bench.data.layout:check_cifar100",
        "bench.data.cifar100:cifar100_val_batches",
    ),
    "shards": DataOption(  # pre-resized JPEG shards (python -m bench.data prepare)
        "bench.data.shards:shard_batches",
        "bench.data.shardformat:check_shard_dataset",
        "bench.data.shards:shard_val_batches",
    ),
}

# the config keys whose values are one of these tables' names (or a user's module:attr)
KEYS: Dict[str, Mapping[str, Any]] = {
    "storage.workload.format": FORMATS,
    "storage.name": BACKENDS,
    "storage.client": S3_CLIENTS,
    "data.name": DATA,
}

_OWN = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")  # package.module:Attr


def check_name(key: str, value: str) -> None:
    """At composition: `value` of `key` is a registered name, or a user's own module:attr (a value
    with a colon) whose top-level package Python can find (none of the user's code runs here;
    preflight imports it). The refusal names the accepted names, as an Enum's did."""
    table = KEYS[key]
    if value in table:
        return
    names = "one of " + ", ".join(table)
    if ":" not in value:
        raise ConfigError(key, value, names)
    if not _OWN.match(value):
        raise ConfigError(key, value, f"{names}, or a module:attr of your own such as mypkg.module:MyClass")
    package = value.split(".", 1)[0].split(":", 1)[0]
    if importlib.util.find_spec(package) is None:
        where = "on Python's path: add its folder to PYTHONPATH, or pip install it"
        raise ConfigError(key, value, f"a module:attr Python can import (no package {package!r} {where})")


def load(target: str) -> Any:
    """The class or function "module:attr" names, its module imported now."""
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def load_named(key: str, value: str, table: Mapping[str, str]) -> Any:
    """The code `value` of `key` names: a registered option's, or a user's own module:attr."""
    return load(table[value]) if value in table else load_own(key, value)


def load_own(key: str, value: str) -> Any:
    """A user's own module:attr given as `key`; one that does not import (whatever its module
    raises) is a ConfigError naming the key."""
    try:
        return load(value)
    except Exception as exc:  # the user's module: what went wrong in it, in one line
        raise ConfigError(key, value, f"a module:attr Python can import ({type(exc).__name__}: {exc})") from None


def import_own(values: Mapping[str, str]) -> None:
    """Preflight: each of `values` ({key: value}) that is a user's own module:attr imported now, so
    one that does not import is one line naming its key before any work."""
    for key, value in values.items():
        if ":" in value:
            load_own(key, value)
