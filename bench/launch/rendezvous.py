"""Rendezvous that Ctrl-C and SIGTERM can end, and that say what they wait for.

torch's own rendezvous blocks in C++ for up to distributed.timeout_s (30 minutes for
storage_hosts4) without a word: a TCPStore server waits there for every client, a client retries
its connection there, and a signal is handled only once the call returns. Here the store is made
without that wait (wait_for_workers=False; a client only once the server's port takes a plain
connection), then each member adds itself to a counter in the store, which is polled from Python
in short slices: a signal ends the wait at once, and a line says who is awaited, where and for how
long at most — after a second, then every 30 s.

- hosts: the agents of a multi-node run (bench's elastic launcher with distributed.nnodes > 1),
  through the rendezvous backend registered here: torch's static rendezvous (node_rank fixes the
  ranks, node 0's agent hosts the store) around a store joined this way;
- ranks: the processes of a process group (their store, under any launcher).
"""

from __future__ import annotations

import datetime
import logging
import os
import socket
import time
from typing import Any, List, Optional

from torch.distributed.elastic.rendezvous import RendezvousParameters, rendezvous_handler_registry
from torch.distributed.elastic.rendezvous.static_tcp_rendezvous import StaticTCPRendezvous, create_rdzv_handler

from bench.errors import WorkerFailure
from bench.rank_context import RankContext

log = logging.getLogger("bench")

FIRST_LINE_S = 1.0  # a quick join says nothing
EVERY_S = 30.0
POLL_S = (0.05, 1.0)  # the counter is polled every 50 ms at first, then less often: at most every second
NAMED_AT_MOST = 8  # missing members named in a line
HOSTS_BACKEND = "bench-static"


class Wait:
    """One rendezvous being waited for: its deadline, and the lines that say so."""

    def __init__(self, noun: str, label: str, host: str, port: int, members: int, timeout_s: float, named_by: str):
        self.noun, self.label, self.members, self.timeout_s = noun, label, members, timeout_s
        self.host, self.port, self.where, self.named_by = host, port, f"{host}:{port}", named_by
        self.started = time.monotonic()
        self._said: Optional[float] = None

    def over(self) -> bool:
        return time.monotonic() - self.started > self.timeout_s

    def due(self) -> bool:
        """Time for a line: a second into the wait, then every 30 s."""
        now = time.monotonic()
        return now - self.started >= FIRST_LINE_S and (self._said is None or now - self._said >= EVERY_S)

    def say(self, awaited: str) -> None:
        now = time.monotonic()
        so_far = f"{now - self.started:.0f} s so far, " if self._said is not None else ""
        self._said = now
        log.info(
            "waiting for %s at %s, %sup to %g s (distributed.timeout_s)", awaited, self.where, so_far, self.timeout_s
        )

    def names(self, absent: List[int]) -> str:
        """'distributed.node_rank 1, 2, 3'."""
        named = ", ".join(str(member) for member in absent[:NAMED_AT_MOST])
        return f"{self.label} {named}" + (", ..." if len(absent) > NAMED_AT_MOST else "")

    def missing(self, joined: int, absent: List[int]) -> str:
        """'3 more hosts of 4 (distributed.node_rank 1, 2, 3)'."""
        more = self.members - joined
        return f"{more} more {self.noun}{'s' if more > 1 else ''} of {self.members}" + (
            f" ({self.names(absent)})" if absent else ""
        )


def join(wait: Wait, me: int, server: bool, prefix: str) -> Any:
    """The TCPStore at wait.where once all its members (0..members-1; `me` is this one) have
    joined it, under `prefix`; `server`: this process hosts it. Raises WorkerFailure when they have
    not within wait.timeout_s."""
    import torch.distributed as dist

    members, noun, timeout_s = wait.members, wait.noun, wait.timeout_s
    timeout = datetime.timedelta(seconds=timeout_s)
    try:
        if not server:
            _until_it_listens(wait)
        tenants = {"multi_tenant": True} if server else {}
        store = dist.TCPStore(wait.host, wait.port, members, server, timeout, wait_for_workers=False, **tenants)
        store.set(f"{prefix}/{me}", socket.gethostname())
        joined = store.add(f"{prefix}/joined", 1)
        pause = POLL_S[0]
        while joined < members:
            if wait.over():
                raise WorkerFailure(
                    f"only {joined} of {members} {noun}s joined the rendezvous at {wait.where} within "
                    f"{timeout_s:g} s (distributed.timeout_s); missing: {wait.names(_absent(store, prefix, members))}"
                )
            if wait.due():
                wait.say(wait.missing(joined, _absent(store, prefix, members)))
            time.sleep(pause)
            pause = min(POLL_S[1], pause * 1.5)
            joined = store.add(f"{prefix}/joined", 0)
    except dist.DistError as exc:  # a port taken, a server that went away
        raise WorkerFailure(f"the rendezvous of {noun}s at {wait.where} failed: {_first_line(exc)}") from None
    return store


def _until_it_listens(wait: Wait) -> None:
    """Until host:port takes a TCP connection (plain connects: a TCPStore client that cannot
    connect retries in C++, printing a C++ traceback at each try)."""
    while True:
        try:
            with socket.create_connection((wait.host, wait.port), timeout=1.0):
                return
        except OSError as exc:
            if wait.over():
                raise WorkerFailure(
                    f"nothing answered at the rendezvous {wait.where} within {wait.timeout_s:g} s "
                    f"(distributed.timeout_s): {exc.strerror or exc}; start {wait.noun} 0 there, "
                    f"or check {wait.named_by}"
                ) from None
            if wait.due():
                wait.say(f"{wait.noun} 0 to open the rendezvous")
            time.sleep(0.5)


def _absent(store: Any, prefix: str, members: int) -> List[int]:
    return [member for member in range(members) if not store.check([f"{prefix}/{member}"])]


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


# ---- ranks: the store of a process group ------------------------------------------------------------


def rank_store(ctx: RankContext, timeout_s: float) -> Any:
    """The process group's store, every rank joined: MASTER_ADDR:MASTER_PORT (set by bench's
    launcher, torchrun, or the job's script), hosted by rank 0 unless an elastic agent hosts it
    (TORCHELASTIC_USE_AGENT_STORE). None when MASTER_ADDR / MASTER_PORT are not set (torch's
    env:// then says so)."""
    host, port = os.environ.get("MASTER_ADDR", ""), os.environ.get("MASTER_PORT", "")
    if not host or not port.isdigit():
        return None
    agent_hosts = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == str(True)
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")  # a restarted group counts afresh
    server = ctx.rank == 0 and not agent_hosts
    wait = Wait("rank", "rank", host, int(port), ctx.world_size, timeout_s, "MASTER_ADDR and MASTER_PORT")
    return join(wait, ctx.rank, server, f"bench/ranks/{restart}")


# ---- hosts: the agents of a multi-node run ----------------------------------------------------------


class HostsRendezvous(StaticTCPRendezvous):
    """torch's static rendezvous, its store joined by `join` (a signal ends the wait, which says
    which hosts it waits for) instead of TCPStore's blocking wait for every client."""

    def get_backend(self) -> str:
        return HOSTS_BACKEND

    def next_rendezvous(self) -> Any:
        if self._store is None:
            wait = Wait(
                "host",
                "distributed.node_rank",
                self.master_addr,
                self.master_port,
                self.world_size,
                self.timeout.total_seconds(),
                "distributed.rdzv_endpoint",
            )
            self._store = join(wait, self.rank, self.rank == 0, f"bench/hosts/{self.run_id}")
        return super().next_rendezvous()


def _hosts_handler(params: RendezvousParameters) -> HostsRendezvous:
    static = create_rdzv_handler(params)  # torch's own parsing of the endpoint, rank and timeout
    assert isinstance(static, StaticTCPRendezvous)
    timeout = int(static.timeout.total_seconds())
    return HostsRendezvous(
        static.master_addr, static.master_port, static.rank, static.world_size, static.run_id, timeout
    )


def hosts_backend() -> str:
    """The name of the hosts' rendezvous backend, registered with torch's elastic launcher."""
    rendezvous_handler_registry.register(HOSTS_BACKEND, _hosts_handler)  # the same creator again is accepted
    return HOSTS_BACKEND
