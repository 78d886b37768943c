"""cpu_malloc_reuse (bench.runtime.malloc): on a CPU, memory a step frees is kept for the next
step instead of going back to the OS, so the next step does not fault its pages in again."""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest
import torch

from bench.config import compose
from bench.rank_context import RankContext
from bench.runtime import device as runtime_device
from bench.runtime.malloc import glibc_mallopt, in_effect

glibc_only = pytest.mark.skipif(glibc_mallopt() is None, reason="mallopt is glibc's")

BLOCK = 64 << 20  # over glibc's largest mmap threshold (32 MB): by default mmapped, and unmapped when freed

# In a fresh process (the setting cannot be undone): the page faults of writing a block of BLOCK
# bytes the second time it is allocated, after it was written once and freed.
PROBE = f"""
import ctypes, resource, sys
from bench.runtime.malloc import keep_freed_memory
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]
if sys.argv[1] == "reuse":
    assert keep_freed_memory()
def write_once():
    block = libc.malloc({BLOCK})
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    ctypes.memset(block, 1, {BLOCK})
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    libc.free(block)
    return faults
write_once()
print(write_once())
"""


def second_write_faults(mode: str) -> int:
    done = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True)
    return int(done.stdout.split()[-1])


@glibc_only
def test_a_freed_block_is_reused_without_faulting_its_pages_again():
    pages = BLOCK // resource.getpagesize()
    reused, default = second_write_faults("reuse"), second_write_faults("default")
    assert reused < pages // 10, f"{reused} page faults writing a reused block of {pages} pages"
    assert default > reused, "glibc's defaults unmap the block: its pages fault in again"


@pytest.mark.parametrize("requested", [True, False])
def test_prepare_process_keeps_freed_memory_on_a_cpu_unless_asked_not_to(monkeypatch, requested):
    calls = []
    monkeypatch.setattr(runtime_device, "keep_freed_memory", lambda: calls.append(1) or True)
    config = compose("allow_cpu=true", f"cpu_malloc_reuse={str(requested).lower()}")
    threads = torch.get_num_threads()
    try:
        runtime_device.prepare_process(config, torch.device("cpu"), RankContext())
    finally:
        torch.set_num_threads(threads)
    assert calls == ([1] if requested else [])


def test_the_record_says_whether_the_process_kept_freed_memory():
    assert in_effect(True, "cuda") is None and in_effect(False, "cuda") is None  # a CPU setting
    assert in_effect(False, "cpu") is False
    assert in_effect(True, "cpu") is (glibc_mallopt() is not None)
    assert compose().cpu_malloc_reuse is True  # the default


def test_prepare_process_starts_cuda_before_resetting_its_peak_memory_with_a_mocked_gpu(monkeypatch):
    """torch.cuda.reset_peak_memory_stats does not start CUDA: in a process where nothing had, it
    raised "Invalid device argument" on the H200 of 2026-11-30 (the gpu-marked
    test_find_max_batch_on_a_gpu_trains_with_the_batch_it_found). No GPU here: both calls are mocked
    and their order checked."""
    calls = []
    monkeypatch.setattr(torch.cuda, "init", lambda: calls.append("init"))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device: calls.append(f"reset {device}"))
    benchmark = torch.backends.cudnn.benchmark
    try:
        runtime_device.prepare_process(compose(), torch.device("cuda", 0), RankContext())
    finally:
        torch.backends.cudnn.benchmark = benchmark
    assert calls == ["init", "reset cuda:0"]
