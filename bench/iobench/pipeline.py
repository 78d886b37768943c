"""Reader threads feeding one simulated accelerator: read-ahead bounded by a window, batches cut
from the stream of what they read, and every request tied to the step that consumed it.

Threads pull the next work item themselves (a whole file, or one sample) so the loop never
wakes up to hand out work, and deliver results as they finish; a semaphore bounds the items
read but not yet consumed to `depth`, which is what prefetching means. A request belongs to
the step that consumes its last sample: a file read ahead during the warm-up step but consumed
later is a request of the measured window, counted once.

How one reader (a thread, or a reader process: bench.iobench.reader_processes) reads (`Fetcher`): into a
buffer of its own, allocated once and reused.

Local files (a store that offers `local_path`) are read with os.preadv straight into the
buffer, `transfer_size` bytes per call (one record when unset), as fio and TensorFlow's record
reader do; the GIL is released in every call. A format that checks a file as it streams by
(raw, tfrecord) is read through one piece-sized buffer, which stays in the CPU cache (a
file-sized one did not: ~40% slower warm here); the others need the file whole. Buffers are
anonymous mmaps, so they start on a page boundary: the kernel's copy out of the page cache into
a buffer that is not 64-byte aligned (a bytearray's data starts 16 or 48 bytes into a cache
line) ran ~4x slower here. No read-ahead hint is given: POSIX_FADV_SEQUENTIAL (fio's default)
made cold reads ~10% slower here than the kernel's own read-ahead. Other stores (S3, direct I/O) hand back bytes,
which are used in place. Either way the format checks the bytes before the buffer is reused,
so a reader holds one file (or one sample) at a time, never a copy.
"""

from __future__ import annotations

import mmap
import os
import queue
import threading
import time
from collections import OrderedDict, deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Deque, Iterator, List, NamedTuple, Optional, Sequence, Tuple

from bench.iobench.formats.base import FileSpec, Format, LengthCheck, StreamCheck
from bench.iobench.result import Request
from bench.storage.base import ObjectStore

OPEN_FILES = 64  # per reader, sample-level reads: descriptors kept open, least recently used closed


class Fetcher:
    def __init__(self, store: ObjectStore, fmt: Format, transfer_size: Optional[int] = None, decode: bool = False):
        self.store, self.fmt, self.transfer_size, self.decode = store, fmt, transfer_size, decode
        self._local = getattr(store, "local_path", None)
        self._view = memoryview(b"")
        self._piece = memoryview(b"")
        self._open: "OrderedDict[str, int]" = OrderedDict()

    def read(self, spec: FileSpec, sample: Optional[int]) -> Tuple[int, int]:
        """(samples, bytes) of one work item read and checked: the whole file (sample None) or one sample."""
        return self.whole_file(spec) if sample is None else (1, self.sample(spec, sample))

    def whole_file(self, spec: FileSpec) -> Tuple[int, int]:
        """(samples, bytes) of one file read whole and checked."""
        path = self._local(spec.key) if self._local else None
        if path is None:
            data = memoryview(self.store.get(spec.key))
        else:
            fd = os.open(path, os.O_RDONLY)
            try:
                size, chunk = os.fstat(fd).st_size, self.transfer_size or spec.record_size
                if (stream := self.fmt.stream(spec, self.decode)) is not None:
                    got = self._stream(fd, size, chunk, stream)
                    return stream.finish(), got
                data = self._read(fd, 0, size, chunk)
            finally:
                os.close(fd)
        return self.fmt.check_file(data, spec, self.decode), len(data)

    def _stream(self, fd: int, size: int, chunk: int, stream: StreamCheck) -> int:
        """Feed the file to `stream` through one reused piece-sized buffer; returns the bytes read.
        A LengthCheck needs the count only: it is told it once, at the end, not fed every piece."""
        if len(self._piece) < chunk:
            self._piece = memoryview(mmap.mmap(-1, chunk))
        piece = self._piece[:chunk]
        pieces, got, preadv = [piece], 0, os.preadv
        feed = None if isinstance(stream, LengthCheck) else stream.feed
        while got < size:
            n = preadv(fd, pieces, got)
            if n == 0:
                break
            if feed is not None:
                feed(piece if n == chunk else piece[:n])
            got += n
        if isinstance(stream, LengthCheck):
            stream.got += got
        return got

    def sample(self, spec: FileSpec, index: int) -> int:
        """Bytes of one sample read on its own (a seek and a read) and checked."""
        offset, length = self.fmt.sample_span(spec, index)
        path = self._local(spec.key) if self._local else None
        if path is None:
            data = memoryview(self.store.get_range(spec.key, offset, length))
        else:
            data = self._read(self._descriptor(path), offset, length, chunk=self.transfer_size or length)
        self.fmt.check_sample(data, spec, self.decode)
        return len(data)

    def _read(self, fd: int, offset: int, length: int, chunk: int) -> memoryview:
        if len(self._view) < length:  # grown once to the largest read, then reused
            self._view = memoryview(mmap.mmap(-1, length))
        view, got = self._view, 0
        while got < length:
            n = os.preadv(fd, [view[got : min(length, got + chunk)]], offset + got)
            if n == 0:  # end of file: the format calls a short file what it is
                break
            got += n
        return view[:got]

    def _descriptor(self, path: str) -> int:
        if (fd := self._open.pop(path, None)) is None:
            fd = os.open(path, os.O_RDONLY)
            if len(self._open) >= OPEN_FILES:
                os.close(self._open.popitem(last=False)[1])
        self._open[path] = fd
        return fd

    def close(self) -> None:
        while self._open:
            os.close(self._open.popitem()[1])


WorkItem = Tuple[FileSpec, Optional[int]]  # (file, None): the whole file; (file, i): its sample i
Work = Callable[[bool, int], Sequence[WorkItem]]  # (evaluation?, epoch) -> the pass's items


class Batch(NamedTuple):
    samples: int
    bytes: float
    requests: List[int]  # indices into the request list: the requests whose last sample is in this batch


_WORKER_DONE = object()
_RECORD_LOCK = threading.Lock()


class BatchStream:
    """Batches cut from what the readers deliver, in the order it arrives: (samples, bytes, request
    index) per item. The threads' Pipeline and the reader processes' pipeline
    (bench.iobench.reader_processes) deliver; this cuts."""

    def _delivered(self) -> Iterator[Tuple[int, int, int]]:
        raise NotImplementedError

    def batches(self, batch_size: int) -> Iterator[Batch]:
        """Successive batches, the last one may be short. A batch's bytes are its share of the
        items it came from (headers included), so they add up to the items'."""
        pending: Deque[List[float]] = deque()  # [samples left, bytes per sample, request index]
        available = 0
        for samples, size, request in self._delivered():
            pending.append([samples, size / samples if samples else 0.0, request])
            available += samples
            while available >= batch_size:
                yield self._cut(pending, batch_size)
                available -= batch_size
        if available:
            yield self._cut(pending, available)

    @staticmethod
    def _cut(pending: Deque[List[float]], count: int) -> Batch:
        size, finished, wanted = 0.0, [], count
        while wanted:
            head = pending[0]
            taken = min(wanted, int(head[0]))
            size += taken * head[1]
            head[0] -= taken
            wanted -= taken
            if not head[0]:
                finished.append(int(head[2]))
                pending.popleft()
        return Batch(count, size, finished)


class ThreadReaders:
    """read_threads threads of this process, each with a Fetcher (one reused buffer) of its own: any store."""

    def __init__(self, make_fetcher: Callable[[], Fetcher], threads: int, depth: int, work: Work):
        self.make_fetcher, self.threads, self.depth, self.work = make_fetcher, threads, depth, work
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="reader")
        self._local = threading.local()
        self._fetchers: List[Fetcher] = []  # every thread's (list.append is atomic)

    def read(self, item: WorkItem) -> Tuple[int, int]:
        if (fetcher := getattr(self._local, "fetcher", None)) is None:
            fetcher = self._local.fetcher = self.make_fetcher()
            self._fetchers.append(fetcher)
        return fetcher.read(*item)

    def start(self, evaluation: bool, epoch: int, requests: List[Request]) -> "Pipeline":
        return Pipeline(self, self.work(evaluation, epoch), epoch, requests)

    @staticmethod
    def children_cpu_s() -> float:
        return 0.0  # the threads' CPU is this process's

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        for fetcher in self._fetchers:
            fetcher.close()


class Pipeline(BatchStream):
    """One pass of the reader threads."""

    def __init__(self, readers: ThreadReaders, work: Sequence[WorkItem], epoch: int, requests: List[Request]):
        self.readers, self.epoch, self.requests, self.threads = readers, epoch, requests, readers.threads
        self._todo: Iterator[WorkItem] = iter(work)
        self._todo_lock = threading.Lock()
        self._slots = threading.Semaphore(readers.depth)
        self._done: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
        self._stopped = False
        for _ in range(self.threads):
            readers.pool.submit(self._worker)

    def _worker(self) -> None:
        while True:
            self._slots.acquire()  # a place in the read-ahead window
            with self._todo_lock:
                item = None if self._stopped else next(self._todo, None)
            if item is None:
                self._done.put(_WORKER_DONE)
                return
            try:
                start = time.perf_counter()
                samples, size = self.readers.read(item)
                end = time.perf_counter()
                request = Request(item[0].key, self.epoch, size, (end - start) * 1000.0, end)
                with _RECORD_LOCK:  # a stopped pipeline's last reads may still land beside the next one's
                    self.requests.append(request)
                    index = len(self.requests) - 1
                self._done.put((samples, size, index))
            except BaseException as exc:
                self._done.put(exc)
                return

    def _delivered(self) -> Iterator[Tuple[int, int, int]]:
        running = self.threads
        while running:
            item = self._done.get()
            if item is _WORKER_DONE:
                running -= 1
                continue
            if isinstance(item, BaseException):
                self.stop()
                raise item
            self._slots.release()
            yield item

    def stop(self) -> None:
        """Let every reader thread finish its current item and exit (a run cut short by max_steps)."""
        with self._todo_lock:
            self._stopped = True
        for _ in range(self.threads):
            self._slots.release()
