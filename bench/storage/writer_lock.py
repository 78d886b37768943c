"""One writer per checkpoint folder: two runs writing the same `epoch-000N.pt` (two
`train.resume=auto` runs of one config, started together) each lose the other's work. The same
lock keeps one run per storage dataset folder (bench.iobench.session) and per run directory a
command names (bench.run_dirs), each under a lock file (`name`) of its own.

`hold(store, run_dir, hint)` makes this process the folder's one writer until `release()`, or
raises FolderBusy (a CheckpointError) naming the writer that holds it (pid, host, run dir, since when) and what
to do (`hint`): a second writer is refused in one line, it never waits.

- A local folder: an exclusive `flock` on `<folder>/.bench-writer.lock`, which holds the owner's
  JSON. The kernel releases a flock when its process dies, however it dies, so a SIGKILLed
  writer's lock is free at once; its file is still there with its owner in it (a clean release
  removes the file), and the next writer says whose lock it took over. flock works across hosts on
  NFS (v4 emulates it with byte-range locks); where the filesystem refuses it, the writer goes on
  with a warning that nothing keeps a second writer out.
- An S3 prefix (no locks): an owner object `<prefix>/.bench-writer.json` with an expiry
  (`EXPIRY_S`), renewed every `RENEW_S` by a thread while the writer runs. An unexpired owner of
  another process refuses; an expired one (its writer was killed) is taken over, and said. Two
  writers that both find none both write theirs; after `SETTLE_S` each reads it back, and the
  one whose object is not there any more is refused (S3 reads its writes).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Dict, Optional

from bench.errors import CheckpointError

log = logging.getLogger("bench")

LOCK_FILE = ".bench-writer.lock"
OWNER_OBJECT = ".bench-writer.json"
EXPIRY_S, RENEW_S, SETTLE_S = 300.0, 60.0, 1.0


class FolderBusy(CheckpointError):
    """Another run writes this folder: the refusal, one line naming it."""


class WriterLock:
    """What hold() returns: release() frees the folder (at most once)."""

    owner: Dict[str, Any]  # who holds it: set by hold()

    def release(self) -> None:
        pass


def hold(
    store: Any, run_dir: Optional[Path], hint: str, name: str = LOCK_FILE, what: str = "checkpoint folder"
) -> WriterLock:
    """This process as the one writer of `store` (a folder's Path, a LocalStore: its `root`; else an
    object store), under the lock file `name`; a refusal says two runs must not write one `what`; the
    lock's `owner` says who (pid, host, run dir, since, token)."""
    owner = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "run_dir": str(run_dir) if run_dir else None,
        "since": time.strftime("%Y-%m-%d %H:%M:%S"),
        "token": uuid.uuid4().hex,
    }
    hint = f"Two runs must not write one {what}: {hint}"
    root = store if isinstance(store, Path) else getattr(store, "root", None)
    return _FileLock(Path(root), owner, hint, name) if root is not None else _OwnerObject(store, owner, hint)


def describe(owner: Optional[Dict[str, Any]]) -> str:
    if not owner:
        return "another process (it has not written down who it is yet)"
    run_dir = f" (run dir {owner['run_dir']})" if owner.get("run_dir") else ""
    return f"pid {owner.get('pid')} on {owner.get('host')}{run_dir}, since {owner.get('since')}"


def _busy(where: str, owner: Optional[Dict[str, Any]], hint: str) -> FolderBusy:
    return FolderBusy(f"{where} is being written by another run: {describe(owner)}. {hint}")


def _parse(text: bytes) -> Optional[Dict[str, Any]]:
    try:
        owner = json.loads(text)
    except ValueError:
        return None
    return owner if isinstance(owner, dict) else None


class _FileLock(WriterLock):
    def __init__(self, folder: Path, owner: Dict[str, Any], hint: str, lock_file: str):
        self.path, self.fd, self.owner = folder / lock_file, -1, owner
        try:
            folder.mkdir(parents=True, exist_ok=True)
            previous = self._lock(hint)
        except OSError as exc:  # a filesystem without flock, a full or read-only disk (the write says it)
            log.warning("%s cannot be locked (%s): nothing keeps a second run from writing it", folder, exc)
            return
        with contextlib.suppress(OSError):  # a full disk: the lock holds all the same, its owner unsaid
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, json.dumps(owner).encode(), 0)
        if previous:
            log.warning(
                "%s: took over the lock of %s, which ended without releasing it (killed: a lock dies with its process)",
                folder,
                describe(previous),
            )

    def _lock(self, hint: str) -> Optional[Dict[str, Any]]:
        """Lock the file at self.path; the owner a killed writer left in it, if any."""
        import fcntl

        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _parse(os.pread(fd, 4096, 0))
                os.close(fd)
                raise _busy(str(self.path.parent), holder, hint) from None
            except BaseException:
                os.close(fd)
                raise
            with contextlib.suppress(FileNotFoundError):  # gone: released (removed) by its holder meanwhile
                if os.stat(self.path).st_ino == os.fstat(fd).st_ino:
                    self.fd = fd
                    return _parse(os.pread(fd, 4096, 0))
            os.close(fd)  # its holder released (removed) it while this process opened it: lock anew

    def release(self) -> None:
        if self.fd < 0:
            return
        with contextlib.suppress(OSError):  # removed while still locked: whoever opened it meanwhile locks anew
            os.unlink(self.path)
        os.close(self.fd)
        self.fd = -1


class _OwnerObject(WriterLock):
    def __init__(self, store: Any, owner: Dict[str, Any], hint: str):
        self.store, self.owner = store, owner
        where = store.url
        current = self._read()
        if current and current.get("token") != owner["token"] and current.get("expires", 0) > time.time():
            raise _busy(where, current, hint)
        self._write()
        time.sleep(SETTLE_S)  # a writer that found no owner at the same moment has written its own by now
        if not (now := self._read()) or now.get("token") != owner["token"]:
            raise _busy(where, now, hint)
        if current:
            log.warning(
                "%s: took over the owner object of %s, which expired (killed, or cut off)", where, describe(current)
            )
        self._stop = threading.Event()
        self._renew = threading.Thread(target=self._renewing, name="bench-writer-lock", daemon=True)
        self._renew.start()

    def _read(self) -> Optional[Dict[str, Any]]:
        with contextlib.suppress(FileNotFoundError):
            return _parse(self.store.get(OWNER_OBJECT))
        return None

    def _write(self) -> None:
        self.owner["expires"] = time.time() + EXPIRY_S
        self.store.put(OWNER_OBJECT, json.dumps(self.owner).encode())

    def _renewing(self) -> None:
        while not self._stop.wait(RENEW_S):
            try:
                self._write()
            except Exception as exc:  # said; the next renewal tries again before the expiry
                log.warning(
                    "could not renew the writer's owner object in %s (%s: %s)", self.store.url, type(exc).__name__, exc
                )

    def release(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._renew.join(timeout=5)
        with contextlib.suppress(Exception):  # an expiry ends it anyway
            if (self._read() or {}).get("token") == self.owner["token"]:
                self.store.delete(OWNER_OBJECT)
