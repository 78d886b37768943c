"""What a training checkpoint file holds, how it is read without running code, and how a failed
write is said.

Checkpoints are read from shared directories and S3 prefixes, so a file is data, never code:
it holds only tensors, dicts, lists, tuples, numbers, strings and None, and is read with
`torch.load(weights_only=True)`, whose unpickler refuses every other type. A file that needs
anything else (a crafted pickle whose `__reduce__` would call os.system) is refused, naming the
file and what it asked for.

Format 2 (issue 18) stores numpy's RNG state as a tensor and a dict, and `meta`: the keys a
checkpoint must share with the run that continues it (model, optimizer, schedule), checked
before anything is built. Format 1 (earlier bench) held numpy's RNG state as an ndarray: for it
alone the three numpy globals an ndarray needs are let through; it has no `meta`, so its fit is
checked on the model's tensors before the warm-up and on the optimizer's state when restored.
"""

from __future__ import annotations

import errno
import io
import re
import warnings
import zipfile
from pathlib import Path
from typing import Any, Dict, Optional, Union

import numpy as np
import torch

from bench.config import BenchConfig
from bench.errors import CheckpointError

FORMAT = 2
READABLE = (1, 2)
# what an ndarray in a format-1 file needs (numpy 2 pickles numpy._core, numpy 1 numpy.core)
_RECONSTRUCT = np._core.multiarray._reconstruct  # type: ignore[attr-defined]
NUMPY_ARRAY_GLOBALS = [
    _RECONSTRUCT,
    (_RECONSTRUCT, "numpy.core.multiarray._reconstruct"),
    np.ndarray,
    np.dtype,
    type(np.dtype(np.uint32)),
]
_GLOBAL = re.compile(r"GLOBAL ([\w.]+)")


def run_meta(config: BenchConfig) -> Dict[str, Any]:
    """What must be the same for a checkpoint to load into this run's model, optimizer and schedule."""
    c = config
    return {
        "model.arch": c.model.arch,
        "model.num_classes": int(c.model.num_classes),
        "model.norm": str(c.model.norm),
        "optimizer.name": str(c.optimizer.name),
        "optimizer.exclude_bn_bias_from_wd": bool(c.optimizer.exclude_bn_bias_from_wd),
        "scheduler.name": str(c.scheduler.name),
    }


def check_meta(state: Dict[str, Any], config: BenchConfig, where: str) -> None:
    """One line naming what differs between the checkpoint's run and this one (format 2)."""
    saved, mine = state.get("meta") or {}, run_meta(config)
    if differ := [
        f"{key} {saved[key]!r} there, {mine[key]!r} here" for key in mine if key in saved and saved[key] != mine[key]
    ]:
        raise CheckpointError(
            f"checkpoint {where} was written by another run: {'; '.join(differ)} (a checkpoint "
            "continues the model, optimizer and schedule it was written by: resume with the same "
            "config, or start without train.resume)"
        )


def check_model_fits(state: Dict[str, Any], model: torch.nn.Module, where: str) -> None:
    """Before the warm-up: the checkpoint's tensors are this model's (names and shapes), so a
    mismatch is one line, not load_state_dict's dump of every key."""
    mine = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    theirs = {k: tuple(v.shape) for k, v in state["model"].items() if hasattr(v, "shape")}
    missing, unexpected = sorted(set(mine) - set(theirs)), sorted(set(theirs) - set(mine))
    shapes = [f"{k} {theirs[k]} there, {mine[k]} here" for k in mine if k in theirs and theirs[k] != mine[k]]
    if missing or unexpected or shapes:
        what = (
            f"{len(missing)} of this model's tensors missing (first: {missing[0]})"
            if missing
            else f"{len(unexpected)} tensors this model does not have (first: {unexpected[0]})"
            if unexpected
            else f"{len(shapes)} tensors of another shape (first: {shapes[0]})"
        )
        raise CheckpointError(
            f"checkpoint {where} holds another model: {what}; resume with the model it was "
            "written by, or start without train.resume"
        )


def numpy_rng_file_state() -> Dict[str, Any]:
    """numpy's RNG state as plain data: a tensor and numbers (format 2)."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "kind": str(kind),
        "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
        "pos": int(pos),
        "has_gauss": int(has_gauss),
        "cached_gaussian": float(cached),
    }


def numpy_rng_state(saved: Any) -> Any:
    """np.random.set_state's argument, from either format."""
    if isinstance(saved, dict):
        keys = saved["keys"].numpy().astype(np.uint32)
        return saved["kind"], keys, saved["pos"], saved["has_gauss"], saved["cached_gaussian"]
    return saved  # format 1: numpy's own tuple


def read(source: Union[bytes, Path], where: str, mmap: bool = False) -> Dict[str, Any]:
    """A bench checkpoint, loaded as plain data (`source`: its bytes, or a file: with `mmap` the
    tensors are mapped, not read, for a look at the metadata); CheckpointError naming `where`
    otherwise."""
    opened = source if isinstance(source, Path) else io.BytesIO(source)
    if not zipfile.is_zipfile(opened):  # torch.save's format; a bare pickle is never bench's
        raise CheckpointError(f"checkpoint {where} is damaged or not bench's (not a torch.save zip file)")
    try:
        state = _load(source, mmap, where)
    except CheckpointError:
        raise
    except Exception as exc:  # a damaged file fails in many ways
        raise CheckpointError(
            f"checkpoint {where} is damaged or not bench's ({type(exc).__name__}: {str(exc).strip()[:120]})"
        ) from None
    if not isinstance(state, dict) or state.get("format") not in READABLE or "model" not in state:
        raise CheckpointError(f"checkpoint {where} is damaged or not bench's (not a bench training checkpoint)")
    return state


def _load(source: Union[bytes, Path], mmap: bool, where: str) -> Any:
    """torch.load as plain data; a type it refuses is named (CheckpointError)."""
    # a format-1 file's numpy RNG state: let through on a second try
    for allowed in ([], NUMPY_ARRAY_GLOBALS):
        # torch warns on stderr about pickle protocols: the refusal is the line
        with warnings.catch_warnings(), torch.serialization.safe_globals(allowed):
            warnings.simplefilter("ignore")
            opened = source if isinstance(source, Path) else io.BytesIO(source)
            try:
                return torch.load(opened, map_location="cpu", weights_only=True, mmap=mmap and isinstance(source, Path))
            except Exception as exc:  # the unpickler's refusal, named below
                if (needed := _needed_global(exc)) is None:
                    raise
                if allowed or not needed.startswith("numpy."):
                    raise CheckpointError(
                        f"checkpoint {where} is refused: it needs {needed}, which a bench checkpoint never holds "
                        "(checkpoints are read as plain tensors, dicts, lists, numbers and strings with "
                        "torch.load(weights_only=True), which runs no code)"
                    ) from None


def _needed_global(exc: BaseException) -> Optional[str]:
    """The type the weights-only unpickler refused (None: the file failed for another reason)."""
    text = str(exc)
    if "Weights only load failed" not in text:
        return None
    found = _GLOBAL.search(text)
    return found.group(1) if found else "an instruction plain data does not use"


class WriteRecorder:
    """A file for torch.save that keeps the OSError a write raised (torch reports its own error)."""

    def __init__(self, fh: Any):
        self.fh = fh
        self.error: Optional[OSError] = None

    def write(self, data: Any) -> int:
        try:
            return self.fh.write(data)
        except OSError as exc:
            self.error = exc
            raise

    def flush(self) -> None:
        self.fh.flush()


def write_failure(exc: BaseException, where: str) -> str:
    """A checkpoint write's failure in words: a full disk says so, naming the file."""
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return f"no space left on {where}"
    return f"{type(exc).__name__}: {getattr(exc, 'strerror', None) or exc} ({where})"
