"""storage.workload.format -> its Format, from the one table (bench.registries.FORMATS) or the
user's own module:Class.

Adding a format: a module with a Format subclass (bench.iobench.formats.base), one line in
bench.registries.FORMATS."""

from __future__ import annotations

from functools import lru_cache

from bench.iobench.formats.base import Format
from bench.registries import FORMATS, load_named


@lru_cache(maxsize=None)
def format_for(name: str) -> Format:
    """The format's instance; a user's module:Class that does not import, or is no Format, is a
    ConfigError naming storage.workload.format."""
    cls = load_named("storage.workload.format", name, FORMATS)
    if not (isinstance(cls, type) and issubclass(cls, Format)):
        from bench.errors import ConfigError

        raise ConfigError("storage.workload.format", name, "a subclass of bench.iobench.formats.base.Format")
    return cls()
