"""Building blocks of the schema: closed choices as Enums, ranges declared with the field
(`batch_size: int = positive(128)`, checked by `check_ranges`), and the checks that each group's
`__post_init__` runs on its own fields (`registered`: an open set's name, bench.registries).

OmegaConf types a field with an Enum (it refuses `Literal`), so a value outside the choices
fails when it is set, naming the key and the choices. `Choice` members are also strings, so
code compares them with plain names (`cfg.data.name == "synthetic"`) and they print as their
value. Checks raise `ConfigError(key, value, accepted)`; the key is the full dotted path,
taken from the group's `KEY` class attribute.
"""

from __future__ import annotations

import dataclasses
import logging
from enum import Enum
from typing import Any, Iterable, List, NoReturn, Tuple

from bench.errors import ConfigError
from bench.registries import check_name

log = logging.getLogger("bench")


class Choice(str, Enum):
    """A closed set of option names; a member is equal to, and prints as, its name."""

    def __str__(self) -> str:
        return str(self.value)


def changed_keys(group: str, current: Any, default: Any, names: Iterable[str] | None = None) -> List[Tuple[str, Any]]:
    """(dotted key, value) of each field of `current` (or each of `names`) whose value is not
    `default`'s, a choice given as its name: the keys of `group` set away from the schema's defaults."""
    names = [f.name for f in dataclasses.fields(default)] if names is None else names
    return [
        (f"{group}.{name}", value.value if isinstance(value, Choice) else value)
        for name in names
        if (value := getattr(current, name)) != getattr(default, name)
    ]


RANGE = "bench.range"  # a field's metadata key: "positive" or "non_negative"


def positive(default: Any) -> Any:
    """A field whose value must be > 0 (or null, where its type is Optional)."""
    return dataclasses.field(default=default, metadata={RANGE: "positive"})


def non_negative(default: Any) -> Any:
    """A field whose value must be >= 0 (or null, where its type is Optional)."""
    return dataclasses.field(default=default, metadata={RANGE: "non_negative"})


class Checks:
    """Mixin for a group's dataclass: `KEY` is the group's dotted path ("data", "storage.workload")."""

    KEY = ""

    def _key(self, name: str) -> str:
        return f"{self.KEY}.{name}" if self.KEY else name

    def _error(self, name: str, accepted: str, value: Any = ...) -> ConfigError:
        return ConfigError(self._key(name), getattr(self, name) if value is ... else value, accepted)

    def _fail(self, name: str, accepted: str, value: Any = ...) -> NoReturn:
        raise self._error(name, accepted, value)

    def registered(self, name: str) -> None:
        """A key of an open set (bench.registries.KEYS): a registered name, or a user's module:attr."""
        check_name(self._key(name), getattr(self, name))

    def __post_init__(self) -> None:
        """A group's checks when it is built: its fields' declared ranges, then its own rules."""
        self.check_ranges()
        self.rules()

    def rules(self) -> None:
        """The group's checks beyond its fields' ranges (cross-field rules, formats): none by default."""

    def check_ranges(self) -> None:
        """The fields declared positive(...) or non_negative(...), in field order. The sentence says
        what the field's type takes: "a positive integer", "a positive number", "... or null"."""
        for item in dataclasses.fields(self):  # type: ignore[arg-type]  # every Checks is a dataclass
            kind, value, hint = item.metadata.get(RANGE), getattr(self, item.name), str(item.type)
            optional = hint.startswith("Optional")
            if kind is None or isinstance(value, str) or (optional and value is None):  # str: an unresolved ${...}
                continue
            or_null = " or null" if optional else ""
            if kind == "positive" and (value is None or value <= 0):
                self._fail(item.name, ("a positive number" if "float" in hint else "a positive integer") + or_null)
            if kind == "non_negative" and (value is None or value < 0):
                self._fail(item.name, "a number >= 0" + or_null)

    def renamed(self, old: str, new: str, note: str) -> None:
        """`old`, the deprecated spelling of `new` (kept one release), set: its value moves to `new`, said in
        a warning (`note` ends its parenthesis); with `new` set too, which one wins would be a guess: refused."""
        if getattr(self, old) is None:
            return
        if getattr(self, new) != getattr(type(self), new):  # the class attribute: the field's default
            self._fail(
                old,
                f"null when {self._key(new)}={getattr(self, new)} is set too "
                f"({self._key(old)} is the deprecated name of {self._key(new)}: set only that)",
            )
        log.warning(f"{self._key(old)} is deprecated: use {self._key(new)} (same meaning{note})")
        setattr(self, new, getattr(self, old))
        setattr(self, old, None)

    def between(self, name: str, low: float, high: float, accepted: str, ends: str = "()") -> None:
        """`ends`: the interval's brackets, "[" and "]" taking its end in ("[)": low <= value < high)."""
        value = getattr(self, name)
        above = value >= low if ends[0] == "[" else value > low
        below = value <= high if ends[1] == "]" else value < high
        if not (above and below):
            self._fail(name, accepted)
