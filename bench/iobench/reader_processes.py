"""One simulated accelerator's `read_threads` readers as forked processes
(storage.workload.readers=processes; `auto`, the default, picks them for local files).

Why: reader *threads* hand Python's GIL over around every read call. With 8 of them on 2 cores
`perf` put ~23% of a warm read's CPU in those hand-overs (futex waits and wake-ups), and the read
phase ran at 0.64-0.72 of fio's 8 threads; the same reads from 8 processes, which share no GIL,
ran at 1.1x fio (docs/performance.md). PyTorch's DataLoader reads from worker processes for the
same reason, and MLPerf Storage's PyTorch loader with them.

How: the readers are forked once per run_reader (before its start gate, so not in any measured
window) and live across its epochs. They inherit the file lists, the workload and the store; a
task (an epoch's training or evaluation pass) is 16 bytes on each reader's own control pipe, and
each reader works the pass's list out itself (bench.iobench.reader's order is seeded: the parent's list).
They take item numbers from a shared counter and a place in the read-ahead window from a shared
semaphore, as the threads do, and write one fixed-size record per item to one result pipe (under
PIPE_BUF: whole among writers); the parent turns records into Requests and batches exactly as
the threads' Pipeline. A reader's CPU comes back with every record (and at a pass's start), so
the measured window counts neither its start-up after the fork nor its exit. Readers die with
the parent (PR_SET_PDEATHSIG) and leave Ctrl-C to it. Only stores whose files this process may
open itself are read this way: a forked S3 client would share its parent's connections.
"""

from __future__ import annotations

import io
import multiprocessing
import os
import pickle
import select
import signal
import struct
import time
from contextlib import suppress
from typing import Any, Callable, Iterator, List, Optional, Sequence, Set, Tuple

from bench.iobench.pipeline import BatchStream, Fetcher, Work, WorkItem
from bench.iobench.result import Request
from bench.machine.children import STOP_SIGNALS, STOPS_HELD, die_with_parent, reap, stops_held_over_fork

_TASK = struct.Struct("qq")  # kind, epoch
_TRAIN, _EVAL, _QUIT = 0, 1, 2
# kind, reader, item, samples, bytes, start, end, the reader's CPU seconds, payload length
_RECORD = struct.Struct("qqqqqdddq")
_RESULT, _DONE, _ERROR, _STARTED = 0, 1, 2, 3
_NO_FIGURES = (0, 0, 0, 0.0, 0.0)  # item, samples, bytes, start, end: of a done or error record
_MAX_PAYLOAD = 3000  # a record and a pickled exception stay under PIPE_BUF (4096): written whole
_EXIT_WAIT_S = 10.0  # a reader that has not exited this long after it was told to is killed


class _Pass(BatchStream):
    """One pass (an epoch, or an evaluation) over the reader processes' result pipe."""

    def __init__(self, readers: "ReaderProcesses", items: Sequence[WorkItem], epoch: int, requests: List[Request]):
        self.readers, self.items, self.epoch, self.requests = readers, items, epoch, requests
        self._running = readers.count
        self._error: Optional[BaseException] = None

    def _next(self) -> Optional[Tuple[int, int, int]]:
        """The next delivered item (samples, bytes, request index); None once every reader is done."""
        while self._running:
            self.readers.wait_for_record()  # a stop signal may land while it waits: nothing is taken yet
            # A record is taken and counted as one step: Interrupted raised between the two lost a
            # reader's 'done', and stop() then waited for it for good.
            with STOPS_HELD:
                delivered = self._take_record()
            if delivered is not None:
                return delivered
        return None

    def _take_record(self) -> Optional[Tuple[int, int, int]]:
        readers = self.readers
        kind, reader, item, samples, size, start, end, cpu, payload = readers.record()
        readers.cpu_s[reader] = cpu
        if kind == _DONE:
            self._running -= 1
        elif kind == _ERROR:
            self._error = self._error or pickle.loads(payload)  # an exception: _pickled's
            readers.release_all()
        elif kind == _RESULT:
            readers.slots.release()
            if self._error is None:  # an item read after another reader failed is not delivered
                self.requests.append(Request(self.items[item][0].key, self.epoch, size, (end - start) * 1000.0, end))
                return samples, size, len(self.requests) - 1
        return None

    def _delivered(self) -> Iterator[Tuple[int, int, int]]:
        while (delivered := self._next()) is not None:
            yield delivered
        if self._error is not None:
            raise self._error

    def stop(self) -> None:
        """Tell the readers to stop after their current item and wait until each has said so (the
        next pass must not read this one's records)."""
        self.readers.release_all()
        if self.readers.broken:  # a dead reader will never say it is done: close() ends the rest
            return
        while self._next() is not None:
            pass


class ReaderProcesses:
    def __init__(self, make_fetcher: Callable[[], Fetcher], count: int, depth: int, work: Work):
        """`work(evaluation, epoch)` is a pass's item list; the readers call it too."""
        self.count, self.depth, self.work = count, depth, work
        ctx = multiprocessing.get_context("fork")
        self.counter = ctx.RawValue("q", 0)
        self.counter_lock = ctx.Lock()
        self.stopped = ctx.RawValue("b", 0)
        self.slots = ctx.Semaphore(depth)
        self.cpu_s: List[float] = [0.0] * self.count
        self._reaped: Set[int] = set()
        self._closed = False
        self.broken: Optional[str] = None  # set when a reader died mid-pass: no pass can end
        self._next_check = 0.0
        self._pids: List[int] = []
        self._controls: List[int] = []
        result_read, result_write = os.pipe()
        self._results, self._buffer = result_read, bytearray()
        parent = os.getpid()
        try:
            for reader in range(self.count):
                control_read, control_write = os.pipe()
                # Ctrl-C / SIGTERM held over the fork (this thread's mask; stops_held_over_fork for one another
                # thread took): raised in os.fork's at-fork hooks, Python drops it and cuts the hook short
                # (issue 28); delivered after, here
                with stops_held_over_fork():
                    held, pid = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS), -1
                    try:
                        pid = os.fork()
                    finally:
                        if pid:
                            signal.pthread_sigmask(signal.SIG_SETMASK, held)
                    if pid == 0:  # the reader: it never returns from here (nor leaves the hold)
                        code = 1
                        try:
                            os.close(result_read)
                            for fd in [control_write, *self._controls]:
                                os.close(fd)
                            die_with_parent(parent)
                            # SIGTERM ends a reader (the accelerator's handler is not for it), even when it
                            # was forked while the accelerator held the stop signals blocked
                            signal.signal(signal.SIGTERM, signal.SIG_DFL)
                            signal.pthread_sigmask(signal.SIG_SETMASK, held)
                            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
                            self._serve(reader, make_fetcher, control_read, result_write)
                            code = 0
                        finally:
                            os._exit(code)
                    os.close(control_read)  # kept before a held stop lands: close() below ends this reader too
                    self._pids.append(pid)
                    self._controls.append(control_write)
        except BaseException:  # a fork failed (out of memory, process limit): the readers so far quit
            self.close()
            raise
        finally:
            os.close(result_write)  # the readers hold it: the pipe ends when they all do

    # --- in a reader process ---

    def _serve(self, reader: int, make_fetcher: Callable[[], Fetcher], control: int, results: int) -> None:
        fetcher = make_fetcher()
        tasks = io.FileIO(control, "rb")

        def send(kind: int, figures: Tuple[int, int, int, float, float] = _NO_FIGURES, payload: bytes = b"") -> None:
            os.write(results, _RECORD.pack(kind, reader, *figures, time.process_time(), len(payload)) + payload)

        while len(task := tasks.read(_TASK.size) or b"") == _TASK.size:  # b"": the parent is gone
            kind, epoch = _TASK.unpack(task)
            if kind == _QUIT:
                break
            send(_STARTED)  # its CPU now: what it spends from here on is the pass's
            items = self.work(kind == _EVAL, epoch)
            while True:
                self.slots.acquire()  # a place in the read-ahead window
                with self.counter_lock:
                    index = self.counter.value
                    self.counter.value = index + 1
                if self.stopped.value or index >= len(items):
                    break
                try:
                    start = time.perf_counter()
                    samples, size = fetcher.read(*items[index])
                    end = time.perf_counter()
                except Exception as exc:
                    send(_ERROR, payload=_pickled(exc))
                    break
                send(_RESULT, (index, samples, size, start, end))
            send(_DONE)
        fetcher.close()

    # --- in the parent ---

    def wait_for_record(self) -> None:
        """Until a whole record (and its payload) is buffered; checks every second that no reader died."""
        while not self._buffered_record():
            if time.monotonic() > self._next_check:
                self._check_alive()
            ready, _, _ = select.select([self._results], [], [], 1.0)
            if ready:
                with STOPS_HELD:  # read and kept as one step: no chunk lost between
                    chunk = os.read(self._results, 1 << 16)
                    self._buffer += chunk
                if not chunk:
                    raise RuntimeError("the storage reader processes closed their pipe mid-pass")

    def _buffered_record(self) -> int:
        """The size of the buffer's first record with its payload; 0 until all of it is there."""
        if len(self._buffer) < _RECORD.size:
            return 0
        size = _RECORD.size + _RECORD.unpack_from(self._buffer)[-1]
        return size if len(self._buffer) >= size else 0

    def record(self) -> Tuple[Any, ...]:
        """The buffered record (wait_for_record): (kind, reader, item, samples, bytes, start, end, CPU
        s, payload)."""
        size = self._buffered_record()
        fields, payload = _RECORD.unpack_from(self._buffer), bytes(self._buffer[_RECORD.size : size])
        del self._buffer[:size]
        return (*fields[:-1], payload)

    def _check_alive(self) -> None:
        self._next_check = time.monotonic() + 1.0
        if self.broken:
            raise RuntimeError(self.broken)
        for pid in self._pids:
            if pid in self._reaped or not os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT):
                continue
            _pid, status = os.waitpid(pid, 0)
            self._reaped.add(pid)
            code = os.waitstatus_to_exitcode(status)
            how = f"signal {-code}" if code < 0 else f"exit code {code}"
            self.broken = f"a storage reader process (pid {pid}) died mid-pass ({how})"
            raise RuntimeError(self.broken)

    def release_all(self) -> None:
        """Stop the pass: every reader ends after its current item (a place in the window each, so
        none waits on one)."""
        self.stopped.value = 1
        for _ in range(self.count):
            self.slots.release()

    def start(self, evaluation: bool, epoch: int, requests: List[Request]) -> _Pass:
        """Send every reader the pass; its batches come from the returned stream."""
        items = self.work(evaluation, epoch)
        self.counter.value = 0
        self.stopped.value = 0
        while self.slots.acquire(False):  # the window back to `depth` (every reader is idle here)
            pass
        for _ in range(self.depth):
            self.slots.release()
        task = _TASK.pack(_EVAL if evaluation else _TRAIN, epoch)
        for control in self._controls:
            os.write(control, task)
        return _Pass(self, items, epoch, requests)

    def children_cpu_s(self) -> float:
        """The readers' CPU seconds as they last reported them: at a pass's start, after each item and
        at its end (so not their start-up after the fork, nor their exit)."""
        return sum(self.cpu_s)

    def close(self) -> None:
        """Tell every reader to quit, and reap them (killing one that does not within 10 s)."""
        if self._closed:
            return
        self._closed = True
        self.release_all()  # a reader waiting for a place in the window sees it is stopped
        quit_task = _TASK.pack(_QUIT, 0)
        for control in self._controls:
            with suppress(OSError):  # the reader is gone already
                os.write(control, quit_task)
            os.close(control)
        self._controls = []
        deadline = time.monotonic() + _EXIT_WAIT_S
        for pid in self._pids:
            if pid not in self._reaped:
                reap(pid, deadline)
                self._reaped.add(pid)
        os.close(self._results)


def _pickled(exc: BaseException) -> bytes:
    """The exception as the parent will raise it: itself when it pickles small, else its text."""
    try:
        data = pickle.dumps(exc)
        pickle.loads(data)
    except Exception:
        data = b""
    if not data or len(data) > _MAX_PAYLOAD:
        data = pickle.dumps(RuntimeError(f"{type(exc).__name__}: {str(exc)[:2000]}"))
    return data
