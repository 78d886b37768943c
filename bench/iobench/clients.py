"""storage.clients=N: N reader processes (simulated accelerators), each on its own files.

Client i reads files i, i+N, i+2N, ... (disjoint shards). With N > 1 each client is a fresh
spawned process (no forked threads or MLflow state) that opens its own store; a barrier
starts their measured loops together. A client that fails or dies fails the phase, with its
reason, within a bounded time.
"""

from __future__ import annotations

import multiprocessing
import queue as queue_module
import time
from typing import Any, Dict, List, Mapping, Sequence

from bench.iobench.reader import ReaderResult, run_reader
from bench.iobench.workload import FileSpec
from bench.storage.objects import open_store

START_TIMEOUT_S = 120.0  # spawning and importing a client


class ClientFailed(RuntimeError):
    pass


def shard(files: Sequence[FileSpec], client: int, clients: int) -> List[FileSpec]:
    return list(files[client::clients])


def run_clients(location: str, storage: Mapping[str, Any], files: Sequence[FileSpec],
                workload: Mapping[str, Any], clients: int) -> List[ReaderResult]:
    if clients == 1:
        return [run_reader(open_store(location, storage), files, workload, 0)]
    context = multiprocessing.get_context("spawn")
    gate = context.Barrier(clients, timeout=START_TIMEOUT_S)
    results = context.Queue()
    processes = [context.Process(target=_client_main, name=f"bench-client-{i}", daemon=True,
                                 args=(i, location, dict(storage), [f.to_dict() for f in shard(files, i, clients)],
                                       dict(workload), gate, results))
                 for i in range(clients)]
    for process in processes:
        process.start()
    try:
        return _collect(processes, results, clients)
    finally:
        for process in processes:
            if process.is_alive():
                process.terminate()
            process.join(timeout=10)


def _collect(processes: List[Any], results: Any, clients: int) -> List[ReaderResult]:
    collected: Dict[int, ReaderResult] = {}
    while len(collected) < clients:
        try:
            client, ok, payload = results.get(timeout=1.0)
        except queue_module.Empty:
            dead = [p for i, p in enumerate(processes) if i not in collected and not p.is_alive()]
            if dead:
                time.sleep(0.5)  # its last message may still be in the pipe
                if results.empty():
                    raise ClientFailed(f"storage client {dead[0].name} exited with code {dead[0].exitcode} "
                                       "before reporting") from None
            continue
        if not ok:
            raise ClientFailed(f"storage client {client} failed: {payload}")
        collected[client] = ReaderResult.from_dict(payload)
    return [collected[i] for i in range(clients)]


def _client_main(client: int, location: str, storage: Dict[str, Any], files: List[Dict[str, Any]],
                 workload: Dict[str, Any], gate: Any, results: Any) -> None:
    try:
        store = open_store(location, storage)
        result = run_reader(store, [FileSpec(**f) for f in files], workload, client, start_gate=gate)
        results.put((client, True, result.to_dict()))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which fails the run with it
        results.put((client, False, f"{type(exc).__name__}: {exc}"))  # first, so the parent sees the cause
        gate.abort()  # then release the others from the start barrier
