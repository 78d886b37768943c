"""`python -m bench.tools.storage_ceiling`: the storage benchmark's read ceiling against fio and a
plain Python read loop, on the same files, warm and cold, alternating.

    python -m bench.tools.storage_ceiling [--files 128 --samples-per-file 64 --record-size 114660
                                           --format raw --threads 4 --rounds 3 --modes both --root DIR
                                           --min-fio 0.9 --min-plain 1.0] [--clean]

The readers of the same dataset (written once, in --format):
- bench: the read phase (bench.iobench.reader.run_reader, computation_time=0), whole files read
  in record-sized pieces (or --transfer-size) into reused buffers by --threads readers (processes:
  storage.workload.readers=auto on local files), every record checked as its loader would
  (storage.workload.verify_records=true, the default); timed by its epoch (bench.tools.iobench_compare's readers);
- threads: bench's read phase with reader threads instead of processes
  (storage.workload.readers=threads): what the processes gain;
- unchecked (a format with checks beyond lengths, e.g. tfrecord's CRC-32C): the same read phase
  with verify_records=false; bench/unchecked and the CPU seconds per GB between them are what
  checking costs;
- fio: --threads jobs (threads), each reading its own files in order, psync, bs = the same piece
  size, invalidate=0 (this command drops the cache itself, for every reader alike); timed from
  its first I/O completion to its last (bench.tools.iobench_compare's readers say why not by its own figure);
- plain: `open(path, "rb")`, then `read(piece)` until the end, for every file from a
  ThreadPoolExecutor of --threads threads (the same piece size: with --transfer-size at least the
  file size every reader reads each file in one call).
Each round runs them A-B-C-C-B-A (bench.analysis.rounds: ratios are medians of per-round ratios
with a 95% interval and a verdict); warm rounds read from the page cache (one untimed pass first),
cold rounds drop the cache for the dataset's files before every timed pass with
posix_fadvise(DONTNEED) (after fdatasync). --modes both (the default) runs warm, then cold.
Prints every pass, the medians, bench against every other reader, and every reader's CPU seconds
per GB; --min-fio / --min-plain make it a check (exit 1 when bench is below). Without fio it
says so in one line and compares with plain Python only.

Without --root the dataset goes in a new bench-ceiling-* directory under the system temp dir
($TMPDIR, else /tmp), removed at the end, on Ctrl-C and on SIGTERM (exit 130 / 143, one line);
one left by a SIGKILLed run (its owner file names a pid that is gone) is removed by the next run,
or by `--clean` alone. A bad argument is one [ERROR] line and exit 2, before anything is written.
"""

from __future__ import annotations

import argparse
import math
import shutil
import statistics
import sys
from functools import partial
from pathlib import Path
from typing import Dict, List, Optional

from bench.analysis.rounds import Rounds, alternate
from bench.config.storage import PrepareMode, StorageWorkloadConfig
from bench.doctor.storage_read import ceiling_storage
from bench.errors import BenchError, interruption_in, print_error
from bench.iobench.prepare import prepare_dataset
from bench.iobench.reader import uses_processes
from bench.machine.children import clean_leftovers, exit_without_teardown, owned_tempdir, sigterm_raises
from bench.machine.writable import writable_dir_refusal
from bench.maths.stats import on_its_side
from bench.registries import FORMATS
from bench.storage.local import LocalStore
from bench.tools import ab
from bench.tools.iobench_compare import Costs, Reader, bench_reader, fio_reader, plain_reader

PREFIX = "bench-ceiling-"  # the default dataset's directory, under the system temp dir
# its flags that spell storage.workload keys: flag, default, key (--threads: read_threads, not cpu_threads)
SPELLED = [
    ("--files", 128, "num_files"),
    ("--samples-per-file", 64, "samples_per_file"),
    ("--record-size", 114660, "record_size"),  # bytes (default: MLPerf's ResNet-50 record)
    ("--transfer-size", None, "transfer_size"),  # bytes per read call (default: one record)
    ("--threads", 4, "read_threads"),
    ("--prefetch", 4, "prefetch"),
]


def workload_for(args: argparse.Namespace, verify: bool = True, readers: str = "auto") -> StorageWorkloadConfig:
    """The read phase the flags (spellings of storage.workload keys) and any other key given describe."""
    fixed = {"name": "ceiling", "batch_size": args.samples_per_file, "shuffle": "none", "readers": readers}
    return ceiling_storage({**fixed, "verify_records": str(verify).lower()}, *args.overrides).workload


def summarise(found: Rounds, costs: Costs, label: str) -> Dict[str, float]:
    """Each reader's median and range, bench against every other reader (median of per-round
    ratios, 95% interval, verdict), the unchecked reader against fio and plain, every reader's
    CPU seconds per GB and what checking costs; returns bench's ratios."""
    say = partial(print, label, flush=True)  # every line but the first names the temperature
    print(found.summary("MB/s", label), flush=True)
    ratios = found.ratios()
    if "unchecked" in found.names:
        for other in found.names[1:]:
            if other != "unchecked":
                say(found.ratio(other, "unchecked").describe("unchecked"))
    say("ratios: " + ", ".join(f"bench/{other} {ratio.ratio:.2f}" for other, ratio in ratios.items()))
    say("CPU-s/GB: " + ", ".join(f"{name} {costs.median(name):.3f}" for name in found.names))
    if costs.fio_own_mb_s:
        own = sorted(costs.fio_own_mb_s)[len(costs.fio_own_mb_s) // 2]
        say(f"fio's own figure (io_bytes / its longest job's runtime): median {own:.1f} MB/s")
    for name, outside in costs.outside_ms.items():
        whole = statistics.median(costs.whole_cpu_s_per_gb[name])
        say(
            f"{name}: starting and ending its readers took {statistics.median(outside):.1f} ms a pass "
            f"(median), outside its timed epoch; its CPU-s/GB over the whole call, those included: {whole:.3f}"
        )
    if "unchecked" in found.names:
        say(
            f"checking costs {costs.median('bench') - costs.median('unchecked'):.3f} CPU-s/GB "
            f"(bench/unchecked {ratios['unchecked'].ratio:.2f})"
        )
    return {other: ratio.ratio for other, ratio in ratios.items()}


def modes_of(text: str) -> List[str]:
    """--modes: warm, cold, both, or a comma list of warm and cold."""
    modes: List[str] = []
    for word in (w.strip() for w in text.split(",") if w.strip()):
        if word not in ("warm", "cold", "both"):
            raise SystemExit(f"[ERROR] --modes={text!r} is not valid: accepted warm, cold, both or warm,cold")
        modes += ["warm", "cold"] if word == "both" else [word]
    return list(dict.fromkeys(modes))


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tools.storage_ceiling", description=__doc__.split("\n\n")[0])
    for flag, default, key in SPELLED:
        ab.spell(parser, flag, default, key=f"storage.workload.{key}")
    said = "how the files are written and checked (default raw: lengths only; tfrecord: CRC-32C, as the preset)"
    said += "; the config key storage.workload.format"
    parser.add_argument("--format", default="raw", choices=list(FORMATS), help=said)
    parser.add_argument("--rounds", type=int, default=3, help="A-B-C-C-B-A rounds per temperature")
    parser.add_argument("--modes", default="both", help="warm, cold or both (default: warm, then cold)")
    said = f"dataset directory (default: a new {PREFIX}* in the system temp dir, removed after)"
    parser.add_argument("--root", type=Path, help=said)
    parser.add_argument("--min-fio", type=float, help="exit 1 when bench/fio is below this (warm or cold)")
    parser.add_argument("--min-plain", type=float, help="exit 1 when bench/plain is below this (warm or cold)")
    said = f"only remove the {PREFIX}* datasets that killed runs left, and exit"
    parser.add_argument("--clean", action="store_true", help=said)
    args, overrides = ab.parse(parser, argv)
    args.overrides = [f"storage.workload.format={args.format}", *overrides]
    if problem := argument_problem(args):
        return print_error(problem)
    for path in clean_leftovers(PREFIX):  # what a SIGKILLed run left: its owner is gone
        print(f"removed {path}: a dataset left by a run that was killed", file=sys.stderr, flush=True)
    if args.clean:
        return 0
    root = args.root or owned_tempdir(PREFIX)
    try:
        with sigterm_raises():  # SIGTERM as Ctrl-C: the readers stop, the dataset is removed
            return _compare(args, root)
    except BaseException as exc:
        if (stopped := interruption_in(exc)) is None:  # also one that a library turned into its own error
            raise
        return print_error(f"storage_ceiling interrupted: {stopped}", stopped.exit_code)
    finally:
        if args.root is None:
            shutil.rmtree(root, ignore_errors=True)


def argument_problem(args: argparse.Namespace) -> Optional[str]:
    """The first argument that cannot work, in one sentence; None when all can (nothing written yet)."""
    counts = ("files", "samples_per_file", "record_size", "threads", "prefetch", "rounds", "transfer_size")
    if problem := ab.below_one(args, *counts):
        return problem
    for flag, floor in (("--min-fio", args.min_fio), ("--min-plain", args.min_plain)):
        if floor is not None and not (math.isfinite(floor) and floor > 0):  # nan compares below nothing
            return f"{flag}={floor} is not valid: accepted a finite ratio above 0 (bench/{flag[6:]}, e.g. 0.9)."
    try:
        modes_of(args.modes)
    except SystemExit as exc:
        return str(exc).replace("[ERROR] ", "", 1)
    try:
        workload_for(args)  # every other value, as the storage benchmark checks it
    except BenchError as exc:
        return str(exc)
    return writable_dir_refusal("--root", str(args.root)) if args.root is not None else None


def _compare(args: argparse.Namespace, root: Path) -> int:
    workload = workload_for(args)
    store = LocalStore(root)
    files = prepare_dataset(store, workload, PrepareMode.auto, workers=4).files
    paths = [str(root / f.key) for f in files]
    size, block = files[0].size, args.transfer_size or args.record_size
    costs = Costs()
    readers: Dict[str, Reader] = {"bench": bench_reader(store, files, workload, "bench", costs)}
    if args.format != "raw":  # it checks more than lengths: an unchecked reader differs from bench
        readers["unchecked"] = bench_reader(store, files, workload_for(args, verify=False), "unchecked", costs)
    # fio reads whole blocks: a short tail (TFRecord's 16 bytes of framing a record) it skips, a long one it times oddly
    if (tail := size % block) and tail * 100 < size:
        print(
            f"fio reads whole blocks only: it leaves the last {tail} bytes of each {size}-byte file unread "
            "(its rate counts the bytes it read)"
        )
    elif tail:
        print(
            f"fio reads whole blocks only and times a partial last block oddly: --transfer-size {block} does not "
            f"divide the file size ({size} bytes); pick one that does for a fair comparison"
        )
    if shutil.which("fio"):
        readers["fio"] = fio_reader(paths, args.threads, block, root, costs)
    else:
        print("fio: not installed (Debian: apt-get install fio): comparing with plain Python only")
    readers["plain"] = plain_reader(paths, args.threads, block, costs)
    if uses_processes(store, files, workload):  # the same read phase from threads: what processes gain
        readers["threads"] = bench_reader(store, files, workload_for(args, readers="threads"), "threads", costs)
    print(
        f"{len(files)} {args.format} files x {size / 2**20:.1f} MiB in {root}, {args.threads} threads, "
        f"reads of {block} bytes; cold = posix_fadvise(DONTNEED) of every file before each pass"
    )
    failed = False
    for mode in modes_of(args.modes):

        def before(mode: str = mode) -> None:  # bound now: alternate() calls it in this iteration
            if mode != "warm":
                store.drop_cache([f.key for f in files])

        # warm: one untimed pass of every reader first (the page cache holds the dataset, every
        # reader's code is warm); cold: the cache is dropped before every pass anyway
        found = alternate(readers, args.rounds, warmup=int(mode == "warm"), before=before, label=mode, unit="MB/s")
        costs.keep_last(2 * args.rounds)  # the warm-up passes' costs are not the mode's
        ratios = summarise(found, costs, mode)
        costs.clear()
        for other, floor in (("fio", args.min_fio), ("plain", args.min_plain)):
            if floor is not None and other in ratios and ratios[other] < floor:
                print(f"{mode}: bench/{other} {on_its_side(ratios[other], floor, 2)} is below {floor}", file=sys.stderr)
                failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    exit_without_teardown(main)
