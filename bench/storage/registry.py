"""The storage backends, by `storage.name`: the one place that maps an option to its code.

    backend(cfg).location(run_dir, "dataset")   # where the option keeps things
    open_store("s3://bucket/prefix", cfg)       # a store for any location, by its URL scheme

Adding a backend: a module with a Backend class (bench.storage.base), one line here, a
StorageName member (bench.config.storage) and conf/storage/<name>.yaml.
"""

from __future__ import annotations

import importlib
from typing import Dict

from bench.config.storage import StorageLocation, StorageName
from bench.storage.base import Backend, ObjectStore

BACKENDS: Dict[StorageName, str] = {
    StorageName.local: "bench.storage.local:LocalBackend",
    StorageName.s3: "bench.storage.s3:S3Backend",
}
# URL schemes of locations that are not local paths (s3://bucket/prefix as data.root, prepare --dst)
SCHEMES: Dict[str, StorageName] = {"s3": StorageName.s3}


def backend(cfg: StorageLocation, name: StorageName | None = None) -> Backend:
    module, _, cls = BACKENDS[name or cfg.name].partition(":")
    return getattr(importlib.import_module(module), cls)(cfg)


def open_store(location: str, cfg: StorageLocation) -> ObjectStore:
    """A store for `location`: a local directory, or <scheme>://... of a remote backend (whose
    endpoint, client and retries come from `cfg`, whatever storage option the run uses)."""
    scheme = location.split("://", 1)[0] if "://" in location else ""
    return backend(cfg, SCHEMES.get(scheme, StorageName.local)).open(location)
