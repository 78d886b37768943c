"""The storage benchmark's reader processes (storage.workload.readers, bench.iobench.reader_processes):
real forked readers over real files, against the same read phase from threads."""

from __future__ import annotations

import _thread
import dis
import os
import signal
import sys
import threading

import psutil
import pytest

from bench.config import compose
from bench.errors import ConfigError, Interrupted
from bench.iobench.prepare import prepare_dataset
from bench.iobench.reader import run_reader
from bench.iobench.reader_processes import ReaderProcesses, _Pass
from bench.machine.children import sigterm_raises
from bench.storage.local import LocalStore

SMALL = {
    "name": "t",
    "num_files": 12,
    "samples_per_file": 5,
    "record_size": 3000,
    "batch_size": 5,
    "read_threads": 3,
    "prefetch": 2,
    "checkpoint_size_mb": 0,
}


def workload(**changes):
    values = {**SMALL, **changes}
    return compose("mode=storage", *[f"storage.workload.{k}={v}" for k, v in values.items()]).storage.workload


def dataset(tmp_path, **changes):
    store, work = LocalStore(tmp_path), workload(**changes)
    prepared = prepare_dataset(store, work, "auto", workers=2)
    return store, prepared


def children_now():
    """This process's children (pytest's own helpers, e.g. the tests' fork server, among them)."""
    return {child.pid for child in psutil.Process().children()}


def read_back(result):
    """What a run read, order aside: (key, epoch, bytes) of every measured request after the first
    epoch (which of the first epoch's is in the warm-up step depends on which read ends first),
    how many there were, and the step totals."""
    requests = sorted((r.key, r.epoch, r.bytes) for r in result.requests if r.epoch > 1), len(result.requests)
    return (
        requests,
        [(e.steps, e.samples, e.bytes) for e in result.epochs],
        [(e.all_steps, e.all_bytes) for e in result.evals],
    )


@pytest.mark.slow  # starts processes inside bench (workers, readers, a fork)
@pytest.mark.parametrize("read_mode", ["whole_file", "sample"])
def test_processes_read_what_threads_read_across_epochs_and_evaluations(tmp_path, read_mode):
    changes = {
        "read_mode": read_mode,
        "epochs": 3,
        "shuffle": "sample" if read_mode == "sample" else "file",
        "eval_num_files": 4,
    }
    store, prepared = dataset(tmp_path, **changes)
    found = {}
    for readers in ("processes", "threads"):
        result = run_reader(store, prepared.files, workload(readers=readers, **changes), eval_files=prepared.eval_files)
        assert result.readers == readers
        found[readers] = read_back(result)
    assert found["processes"] == found["threads"]
    (later, count), _epochs, evals = found["processes"]
    per_epoch = 12 * (1 if read_mode == "whole_file" else 5)
    assert len(later) == 2 * per_epoch and count == 3 * per_epoch - (1 if read_mode == "whole_file" else 5)
    assert len(evals) == 3 and all(steps == 4 for steps, _ in evals)


@pytest.mark.slow  # starts processes inside bench (workers, readers, a fork)
def test_auto_is_processes_on_local_files_and_threads_where_a_store_reads_its_own_way(tmp_path):
    store, prepared = dataset(tmp_path)
    assert run_reader(store, prepared.files, workload()).readers == "processes"

    class OwnWay(LocalStore):  # a store that reads through get() (as S3 and direct_io do)
        def get(self, key):
            return super().get(key)

    other = OwnWay(tmp_path)
    assert run_reader(other, prepared.files, workload()).readers == "threads"
    with pytest.raises(ConfigError) as refused:
        run_reader(other, prepared.files, workload(readers="processes"))
    assert str(refused.value).startswith("storage.workload.readers='processes' is not valid: accepted threads or auto")


@pytest.mark.slow  # starts processes inside bench (workers, readers, a fork)
def test_max_steps_stops_the_readers_mid_epoch_and_the_next_run_starts_clean(tmp_path):
    store, prepared = dataset(tmp_path)
    helpers = children_now()
    cut = run_reader(store, prepared.files, workload(max_steps=4, epochs=2, prefetch=1, read_threads=4))
    assert cut.readers == "processes" and sum(e.all_steps for e in cut.epochs) == 4
    assert len(cut.epochs) == 1 and all(r.step in (2, 3, 4) for r in cut.requests)
    assert children_now() == helpers  # every reader reaped
    whole = run_reader(store, prepared.files, workload(epochs=2))
    assert sum(e.all_steps for e in whole.epochs) == 24


@pytest.mark.slow  # starts processes inside bench (workers, readers, a fork)
def test_the_readers_cpu_is_in_the_result_as_the_threads_is_and_no_reader_outlives_the_read(tmp_path):
    """CPU time, not wall time: the same 96 MB of TFRecord read and CRC-checked by 2 processes and 2
    threads cost the same order of CPU. Without the readers' own CPU the processes' figure would be
    this process's alone (it waits on a pipe: a few ms); with their start-up and exit (forking,
    copy-on-write, unmapping: ~4 ms each here) it would be several times the threads'. Each side's
    least of three reads, alternating: on a fast box the threads' read is ~8 ms of CPU, and one read
    beside the suite's other workers came out 3.9 times that (2026-12-01)."""
    # little read ahead (4 of 40 files): the window holds nearly all the reading either way
    changes = {
        "format": "tfrecord",
        "num_files": 40,
        "samples_per_file": 8,
        "record_size": 300_000,
        "batch_size": 8,
        "read_threads": 2,
        "prefetch": 0,
    }
    store, prepared = dataset(tmp_path, **changes)
    helpers = children_now()
    run_reader(store, prepared.files, workload(**changes))  # the page cache holds the files for both
    sides = {readers: workload(readers=readers, **changes) for readers in ("processes", "threads")}
    reads = [run_reader(store, prepared.files, sides[readers]) for _ in range(3) for readers in sides]
    assert [read.readers for read in reads] == [*sides] * 3
    processes = min(reads[0::2], key=lambda read: read.cpu_s)
    threads = min(reads[1::2], key=lambda read: read.cpu_s)
    assert 0.3 * threads.cpu_s < processes.cpu_s < 3 * threads.cpu_s, (processes.cpu_s, threads.cpu_s)
    assert children_now() == helpers


@pytest.mark.slow  # starts processes inside bench (workers, readers, a fork)
def test_a_corrupt_file_read_by_a_reader_process_fails_the_read_with_its_name(tmp_path):
    store, prepared = dataset(tmp_path, format="tfrecord")
    damaged = prepared.files[7]
    path = tmp_path / damaged.key
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    helpers = children_now()
    with pytest.raises(Exception) as failed:
        run_reader(store, prepared.files, workload(format="tfrecord", shuffle="none"))
    assert damaged.key in str(failed.value) and type(failed.value).__name__ == "CorruptFile"
    assert children_now() == helpers


@pytest.mark.slow  # starts processes inside bench (workers, readers, a fork)
def test_a_reader_killed_mid_pass_fails_the_read_instead_of_hanging_it(tmp_path):
    """A reader killed by the OOM killer (SIGKILL here) is named within about a second; the others
    are told to quit (or killed) and reaped."""
    store, prepared = dataset(tmp_path)
    helpers = children_now()
    started = threading.Event()
    outcome = {}

    def beat():  # called after every step: the loop is running, the readers are up
        started.set()

    def read():
        try:
            run_reader(store, prepared.files, workload(computation_time=0.2, epochs=100), heartbeat=beat)
        except Exception as exc:
            outcome["error"] = exc

    reading = threading.Thread(target=read)
    reading.start()
    assert started.wait(300)  # hang guards: the readers' first step on a busy machine took over 60 s
    victim = min(children_now() - helpers)
    os.kill(victim, 9)
    reading.join(300)
    assert not reading.is_alive()
    assert f"a storage reader process (pid {victim}) died mid-pass (signal 9)" in str(outcome["error"])
    assert children_now() == helpers


@pytest.mark.slow  # starts processes inside bench (workers, readers, a fork)
def test_a_stop_taken_while_a_reader_forks_lands_after_the_fork_not_inside_its_hooks(
    tmp_path, stop_inside_the_next_fork
):
    """A SIGTERM taken by another thread's C-level handler while the main thread forked a reader was
    raised inside os.fork's at-fork hooks: Python dropped it there and cut the hook short, so a lock
    the hooks take (logging's, concurrent.futures') could stay held and a later fork from another
    thread waited for good (a CI run hung so, 2026-11-30). Here the handler runs inside the hooks: it
    is held there, and the read ends with Interrupted as the fork returns, every reader reaped."""
    store, prepared = dataset(tmp_path)
    helpers = children_now()
    raised_inside = stop_inside_the_next_fork()
    with sigterm_raises(), pytest.raises(Interrupted, match="SIGTERM"):
        run_reader(store, prepared.files, workload())
    assert raised_inside == [False]
    assert children_now() == helpers


# The parent's code that takes the readers' records: a stop signal may land at any of its lines
_RECORD_TAKERS = (
    _Pass._next,
    _Pass._take_record,
    ReaderProcesses.wait_for_record,
    ReaderProcesses._buffered_record,
    ReaderProcesses.record,
)


@pytest.mark.slow  # starts processes inside bench (workers, readers, a fork)
def test_a_stop_signal_landing_at_any_line_that_takes_a_record_ends_the_read_cleanly(tmp_path):
    """A storage run sent SIGTERM mid-read hung for good, once in thousands (a suite run, and
    reproduced by a loop of SIGTERMs at random moments): Interrupted raised after a reader's
    'done' record was taken but before it was counted, and the pass's stop() then waited for a
    record no reader would send. Here SIGTERM lands at every line of the code that takes records:
    the command's own handler (sigterm_raises) is called there, as Python calls it between two
    lines; every read must end with Interrupted, its readers reaped."""
    store, prepared = dataset(tmp_path)
    work = workload(read_threads=2, epochs=3, computation_time=0)
    helpers = children_now()
    codes = [function.__code__ for function in _RECORD_TAKERS]
    lines = {c: sorted({n for _, n in dis.findlinestarts(c) if n and n > c.co_firstlineno}) for c in codes}
    targets = [(c, line) for c in codes for line in lines[c]]
    reached = []
    for code, line in targets:
        passes = {"n": 0}

        def at_line(frame, event, _arg, code=code, line=line, passes=passes):
            if event == "line" and frame.f_code is code and frame.f_lineno == line:
                passes["n"] += 1
                if passes["n"] == 5:  # past the first records of the first pass
                    signal.getsignal(signal.SIGTERM)(signal.SIGTERM, frame)  # raises, or holds it to the block's end
            return at_line

        watchdog = threading.Timer(120, _thread.interrupt_main)  # a hang guard: KeyboardInterrupt in this thread
        watchdog.start()
        ended = "its last epoch"
        try:
            tracer = sys.gettrace()  # put back after, not removed: coverage's or a debugger's
            with sigterm_raises():
                sys.settrace(lambda frame, _event, _arg: at_line if frame.f_code in codes else None)
                run_reader(store, prepared.files, work)
        except Interrupted as stop:
            ended = stop.signal_name
        except KeyboardInterrupt:
            pytest.fail(f"the read hung after SIGTERM at line {line} of {code.co_name}")
        finally:
            sys.settrace(tracer)
            watchdog.cancel()
        if passes["n"] >= 5:
            reached.append(f"{code.co_name}:{line}")
            assert ended == "SIGTERM", f"the read ended at {ended} after SIGTERM at line {line} of {code.co_name}"
        assert children_now() == helpers, f"a reader outlived the read stopped at line {line} of {code.co_name}"
    assert len(reached) >= 20, reached  # most lines run five times in a read


def test_a_stop_signal_handled_just_before_the_starts_were_blocked_is_handed_on_after_every_start():
    """bench.iobench.accelerators._start_all: a SIGTERM that arrived after its own handlers were set and
    before the C-level block is run by Python at its next bytecode, inside a start: it is kept, and given
    to the caller's handler once every process has started (not lost, not raised half-way through a
    child's start-up data). The stand-in processes call the handler in place as Python would then."""
    from bench.iobench.accelerators import _start_all

    seen: list = []

    class Started:
        def start(self):
            signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)
            seen.append("started")

    callers = signal.signal(signal.SIGTERM, lambda number, _frame: seen.append(signal.Signals(number)))
    try:
        _start_all([Started(), Started()])
    finally:
        signal.signal(signal.SIGTERM, callers)
    assert seen == ["started", "started", signal.SIGTERM]
