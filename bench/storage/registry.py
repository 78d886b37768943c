"""The storage backends, by `storage.name`, from the one table (bench.registries.BACKENDS) or a
user's own module:Class.

    backend(cfg).location(run_dir, "dataset")   # where the option keeps things
    open_store("s3://bucket/prefix", cfg)       # a store for any location, by its URL scheme

Adding a backend: a module with a Backend class (bench.storage.base), one line in
bench.registries.BACKENDS (and conf/storage/<name>.yaml to give it defaults of its own).
"""

from __future__ import annotations

from typing import Dict, Optional

from bench.config.storage import StorageLocation
from bench.registries import BACKENDS, load_named
from bench.storage.base import Backend, ObjectStore

# URL schemes of locations that are not local paths (s3://bucket/prefix as data.root, prepare --dst)
SCHEMES: Dict[str, str] = {"s3": "s3"}


def backend(cfg: StorageLocation, name: Optional[str] = None) -> Backend:
    return load_named("storage.name", name or cfg.name, BACKENDS)(cfg)


def open_store(location: str, cfg: StorageLocation) -> ObjectStore:
    """A store for `location`: a local directory, or <scheme>://... of a remote backend (whose
    endpoint, client and retries come from `cfg`, whatever storage option the run uses)."""
    return backend(cfg, SCHEMES.get(location.split("://", 1)[0] if "://" in location else "", "local")).open(location)
