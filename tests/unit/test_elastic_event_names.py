"""bench.launch.launchers.name_events_cheaply: torch's rendezvous names its log events by the calling
method through inspect.stack() (0.4-1.5 CPU-s of each launch: a sweep job, a DDP run); bench's
replacement reads the same frame directly and must give the same names."""

from __future__ import annotations

import importlib.util

from torch.distributed.elastic.rendezvous import dynamic_rendezvous

from bench.launch.launchers import name_events_cheaply


def torchs_own_get_method_name():
    """From a fresh copy of torch's module: an in-process launch earlier in this worker has replaced
    the loaded module's function already."""
    spec = importlib.util.find_spec(dynamic_rendezvous.__name__)
    fresh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fresh)
    return fresh.get_method_name


def test_the_cheap_event_name_is_torchs_at_every_depth(monkeypatch):
    torchs = torchs_own_get_method_name()
    monkeypatch.setattr(dynamic_rendezvous, "get_method_name", torchs)  # put back after the test
    name_events_cheaply()
    cheap = dynamic_rendezvous.get_method_name
    assert cheap is not torchs

    def the_rendezvous_method():
        def its_record_call():
            names = []
            for depth in (0, 1, 2, 3, 10_000):  # a loop, not a comprehension: that would be a frame more
                names.append((torchs(depth), cheap(depth)))
            return names

        return its_record_call()

    names = the_rendezvous_method()
    assert [theirs for theirs, _ in names] == [ours for _, ours in names]
    assert names[2][1] == "the_rendezvous_method" and names[-1][1] == "no_method_name"
