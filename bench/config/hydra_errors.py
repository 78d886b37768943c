"""Hydra's and OmegaConf's composition errors, reworded into bench's one sentence.

Hydra reports a bad override over several lines (the message, then OmegaConf's cause with
`full_key`, `reference_type`, ...). bench says the same in one line, in the form of every
other config error: `<key>=<value> is not valid: accepted <what>.`

And what the schema cannot check on its own, before any run state exists.

Hydra lets `+key=value` add keys the schema does not have (and `OmegaConf.to_object` drops
them without a word), so a typo like `+benchmark.warmup_step=5` would pass silently: this
walks the composed config against the schema first. The checks that need the world outside
the config (the dataset on disk, the device, the model registry) belong to the scenario
that needs them: see `Scenario.preflight` (bench.scenarios).
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import itertools
import math
import os
import re
import sys
import typing
from pathlib import Path
from typing import Any, Callable, Iterator, List, Optional, Sequence

import yaml
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from bench.config.schema import BenchConfig
from bench.errors import BenchError, ConfigError, ConfigProblem, print_error

_MISSING_OPTION = re.compile(r"Could not find '([^']+)/([^']+)'")
# conf/hydra/launcher/slurm*.yaml build on hydra-submitit-launcher's configs: not installed, they cannot load
_NEEDS_SUBMITIT = re.compile(r"In 'hydra/launcher/([^']+)': Could not load 'hydra/launcher/submitit_")
_AVAILABLE = re.compile(r"Available options in '[^']+':\n((?:\t.*\n?)+)")
_FULL_KEY = re.compile(r"full_key: (\S+)")
_ENUM = re.compile(r"Invalid value '(.*)', expected one of \[(.*)\]")
_CONVERT = re.compile(r"Value '(.*?)' (?:of type '\w+' )?could not be converted to (\w+)")
_BOOL = re.compile(r"Value '(.*)' is not a valid bool")
_IN_CONFIG = re.compile(r"^In '([^']+)': ")
_NOT_A_KEY = re.compile(r"Key '([^']+)' not in")
_APPEND_HINT = re.compile(r"use \+(\S+?)=(.*)$", re.MULTILINE)
_NOT_IN_DEFAULTS = re.compile(r"Could not override '([^']+)'\. No match in the defaults list")
# what the override grammar's parser says of an override it cannot read
_UNPARSED = ("LexerNoViableAltException", "no viable alternative", "mismatched input", "extraneous input")
_TYPE_WORDS = {"Integer": "an integer", "Float": "a number", "Boolean": "true or false", "String": "a string"}


def one_line(exc: BaseException) -> str:
    """The sentence to show for a composition or resolution error."""
    return str(as_error(exc))


SWEEP_ON_THE_COMMAND_LINE = "to sweep over it add -m (--multirun)"
# bench.api says this instead: a Python caller has no -m to add
SWEEP_FROM_PYTHON = "a sweep runs from the command line, python -m bench -m <overrides>; from Python, run() each job"


def as_error(exc: BaseException, overrides: Optional[Sequence[str]] = None) -> BenchError:
    """A composition or resolution error as bench's: a ConfigError (key, value, what is accepted)
    when it is about one key's value, else a ConfigProblem holding the sentence. `overrides`: those
    of a composition from Python (bench.config.compose), else the command line's (sys.argv)."""
    text = str(exc)
    cause = str(exc.__cause__) if exc.__cause__ is not None else ""
    if needs_submitit := _NEEDS_SUBMITIT.search(text):
        return ConfigError(
            "hydra/launcher",
            needs_submitit.group(1),
            "where hydra-submitit-launcher is installed (pip install 'bench[slurm]'), and it is not",
        )
    if missing := _MISSING_OPTION.search(text):
        group, option = missing.groups()
        choices = _AVAILABLE.search(text)
        names = [n.strip() for n in choices.group(1).splitlines() if n.strip()] if choices else []
        key = f"+{group}" if group == "experiment" else group
        return ConfigError(key, option, one_of(option, names) if names else f"an option in conf/{group}/")
    # `experiment=x`: a group that is not in the defaults list is added with +
    if not_in_defaults := _NOT_IN_DEFAULTS.search(text):
        group = not_in_defaults.group(1)
        args = sys.argv[1:] if overrides is None else overrides
        value = next((arg.split("=", 1)[1] for arg in reversed(args) if arg.startswith(group + "=")), None)  # the last
        return ConfigError(
            group,
            value,
            f"+{group}={value if value is not None else '<name>'}: {group} is not in "
            "the defaults list, so it is added with a leading +",
        )
    appended = _APPEND_HINT.search(text)  # "Could not override 'data.x'. To append ... use +data.x=8"
    reworded = _value_error(cause or text, *(appended.groups() if appended else (None, None)))
    if reworded:
        return _set_in_a_file(text, reworded) if appended is None else reworded
    if "Interpolation" in text or "Interpolation" in cause:
        where = _FULL_KEY.search(text + cause)
        key = where.group(1) if where else None
        return ConfigProblem(
            f"the config could not be resolved: {_first_line(text)}" + (f" (at {key})" if key else ""), key
        )
    if text.startswith("Ambiguous value"):
        return ConfigProblem(f"{_first_line(text)}: {SWEEP_ON_THE_COMMAND_LINE}; for a list write key=[a,b]")
    if any(said in text for said in _UNPARSED):
        # LexerNoViableAltException: a character the override grammar has no token for
        fix = (
            "quote a value that holds spaces or special characters, e.g. 'tracking.run_name=\"my run!\"'"
            if "LexerNoViableAltException" in text
            else "see https://hydra.cc/docs/advanced/override_grammar/basic"
        )
        return ConfigProblem(f"a command-line override could not be parsed ({_first_line(text)}): {fix}")
    detail = _first_line(text) + (f" ({_first_line(cause)})" if cause else "")
    return ConfigProblem(f"the config could not be composed: {detail}")


@contextlib.contextmanager
def reworded(overrides: Optional[Sequence[str]] = None) -> Iterator[None]:
    """Hydra's and OmegaConf's errors inside as bench's (as_error, `overrides` passed on)."""
    try:
        yield
    except (HydraException, OmegaConfBaseException) as exc:
        raise as_error(exc, overrides) from None


def _value_error(text: str, dotted: Optional[str], given: Optional[str]) -> Optional[ConfigError]:
    """`dotted`, `given`: the key and value Hydra's "use +key=value" hint names (the key in full, where
    OmegaConf's full_key stops at the first unknown part)."""
    if (key_match := _FULL_KEY.search(text)) is None:
        return None
    key = key_match.group(1)
    if enum := _ENUM.search(text):
        value, names = enum.group(1), enum.group(2).split(", ")
        return ConfigError(key, value, one_of(value, names))
    if converted := _CONVERT.search(text):
        return ConfigError(key, converted.group(1), _TYPE_WORDS.get(converted.group(2), converted.group(2)))
    if boolean := _BOOL.search(text):
        return ConfigError(key, boolean.group(1), "true or false")
    if _NOT_A_KEY.search(text):
        return unknown_key(dotted or key, given)
    return None


def _set_in_a_file(text: str, error: ConfigError) -> ConfigError:
    """A key no command line gave, from a config file (`In 'experiment/typo': ...`): the file named,
    and the value it gives. The file is looked for where Hydra looked: each --config-dir, then bench's."""
    from bench import config_dir

    if (named := _IN_CONFIG.search(text)) is None or error.value is not None:
        return error
    args = sys.argv[1:]
    dirs = [a.split("=", 1)[1] for a in args if a.startswith(("--config-dir=", "-cd="))]
    dirs += [after for before, after in itertools.pairwise(args) if before in ("--config-dir", "-cd")]
    candidates = (os.path.abspath(os.path.join(d, named.group(1) + ".yaml")) for d in [*dirs, config_dir()])
    if not (files := [f for f in candidates if os.path.isfile(f)]):
        return error
    try:
        node: Any = yaml.safe_load(Path(files[0]).read_text())
    except (OSError, yaml.YAMLError):
        node = None
    parts = str(error.key).split(".")
    for path in (parts, parts[1:]):  # @package _global_, or the file's own group
        found: Any = node
        for part in path:
            found = found.get(part) if isinstance(found, dict) else None
        if found is not None:
            break
    return ConfigError(str(error.key), found, f"{error.accepted}; {files[0]} sets it")


def one_of(given: str, names: List[str]) -> str:
    """`one of a, b, c`, then ` (did you mean resnet50?)` for a value close to one of `names` (the first name
    that holds it, as amp_fp16 holds fp16, else difflib's closest)."""
    lower = {n.lower(): n for n in names}
    want = given.lower()
    close = [n for n in lower if len(want) >= 3 and want in n] or difflib.get_close_matches(want, list(lower), n=1)
    return "one of " + ", ".join(names) + (f" (did you mean {lower[close[0]]}?)" if close else "")


def unquoted_space(args: List[str]) -> Optional[str]:
    """`tracking.run_name=my run` unquoted reaches bench as two arguments, and Hydra fails on the
    second (no '='): the sentence that says to quote the value."""
    for before, arg in itertools.pairwise(args):
        if "=" in arg or arg.startswith("-") or "=" not in before or before.startswith("-"):
            continue
        key, value = before.split("=", 1)
        return (
            f"{arg!r} is not an override (key=value): it follows {before!r}. A value with a space must be "
            f"quoted, e.g. '{key}=\"{value} {arg}\"' (quotes for the shell and for Hydra)"
        )
    return None


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def reporting_one_line(hydra_main: Callable[[], Any]) -> Any:
    """Run a @hydra.main function; a composition error (bad override, unknown option, wrong
    type) becomes one `[ERROR]` line and exit 2 instead of Hydra's multi-line report.

    Hydra raises such errors instead of printing them when HYDRA_FULL_ERROR=1; a user who
    sets it gets Hydra's own full report, as documented."""
    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        return hydra_main()
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        return hydra_main()
    except (HydraException, OmegaConfBaseException) as exc:
        sys.exit(print_error(one_line(exc)))
    except yaml.YAMLError as exc:  # a config file (a --config-dir experiment) that is not YAML
        sys.exit(print_error(yaml_problem(exc)))
    except BrokenPipeError:  # `--help | head`: the reader is gone, not the run directory
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush at exit
        sys.exit(1)
    except OSError as exc:  # Hydra could not make the run's directory or write .hydra/ there
        # the output directory the command line asks for (a write error does not name its file)
        sweep = any(arg in ("-m", "--multirun") for arg in sys.argv[1:])
        key = "hydra.sweep.dir=" if sweep else "hydra.run.dir="
        named = [arg[len(key) :] for arg in sys.argv[1:] if arg.startswith(key)]
        run_dir = named[-1] if named else ("multirun/<date>/<time>" if sweep else "outputs/<date>/<time>")
        where = exc.filename or run_dir
        # the run directory, one of its parents or a file in it (what Hydra makes); else bench's own check missed it
        path, run = os.path.abspath(str(where)), os.path.abspath(run_dir)
        if os.path.commonpath([path, run]) not in (path, run) and "<" not in run:
            sys.exit(print_error(f"cannot use {where}: {exc.strerror or exc}"))
        sys.exit(
            print_error(
                f"cannot write the run directory: {where}: {exc.strerror or exc} (set hydra.run.dir, "
                "or hydra.sweep.dir for -m, to a writable directory with free space)"
            )
        )
    finally:
        os.environ.pop("HYDRA_FULL_ERROR", None)


def yaml_problem(exc: "yaml.YAMLError") -> str:
    """`<file>, line 3: not valid YAML (while parsing a flow sequence: expected ',' or ']', ...)`."""
    mark = getattr(exc, "context_mark", None) or getattr(exc, "problem_mark", None)
    where = f"{mark.name}, line {mark.line + 1}" if mark is not None else "a config file"
    said = ": ".join(str(part) for part in (getattr(exc, "context", None), getattr(exc, "problem", None)) if part)
    return f"{where}: not valid YAML ({said or exc})"


def reject_unknown_keys(cfg: DictConfig, schema: type = BenchConfig, prefix: str = "") -> None:
    hints = typing.get_type_hints(schema)
    names = [f.name for f in dataclasses.fields(schema)]
    for key in map(str, cfg):
        if key != "defaults" and key not in names:
            container = OmegaConf.to_container(cfg, resolve=False)
            assert isinstance(container, dict)  # a DictConfig's container is a dict
            raise unknown_key(prefix + key, container.get(key))
        child: Any = cfg._get_node(key)
        if dataclasses.is_dataclass(hints.get(key)) and isinstance(child, DictConfig):
            reject_unknown_keys(child, hints[key], f"{prefix}{key}.")


def reject_unknown_attributes(node: Any, prefix: str = "") -> None:
    """A dataclass takes any attribute (`config.data.batch_sise = 8` in Python), and asdict drops
    it without a word: the same typo as `+data.batch_sise=8`, refused the same way."""
    names = [field.name for field in dataclasses.fields(node)]
    for name, value in vars(node).items():
        if name not in names:
            raise unknown_key(prefix + name, value)
        if dataclasses.is_dataclass(value):
            reject_unknown_attributes(value, f"{prefix}{name}.")


def unknown_key(dotted: str, value: Any = None) -> ConfigError:
    """`data.batch_sise` (or `trainn.epochs`) -> the ConfigError naming the group whose key is unknown
    and the closest key (`data.batch_size`, `train.epochs`)."""
    parts = dotted.split(".")
    schema: Any = BenchConfig
    depth = 0
    for depth, part in enumerate(parts[:-1]):  # down to the first part that is not a group of the schema
        hint = typing.get_type_hints(schema).get(part)
        if not dataclasses.is_dataclass(hint):
            break
        schema, depth = hint, depth + 1
    close = difflib.get_close_matches(parts[depth], [f.name for f in dataclasses.fields(schema)], n=1)
    group = ".".join(parts[:depth]) or "the config"
    fix = ".".join(parts[:depth] + close + parts[depth + 1 :])
    return ConfigError(dotted, value, f"a key of {group}" + (f" (did you mean {fix}?)" if close else ""))


def reject_non_finite(node: Any, prefix: str = "") -> None:
    """nan and inf parse as floats (`optimizer.lr=nan`), pass every range check and end as NaN in
    the results, which is not JSON: no config number may be non-finite."""
    for field in dataclasses.fields(node):
        value = getattr(node, field.name)
        key = f"{prefix}{field.name}"
        if dataclasses.is_dataclass(value):
            reject_non_finite(value, key + ".")
        elif isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(key, value, "a finite number")
        elif isinstance(value, list) and any(isinstance(v, float) and not math.isfinite(v) for v in value):
            raise ConfigError(key, list(value), "finite numbers")
