"""Which threads run parallel torch work: the engine thread, and no other thread of the process.

GNU OpenMP keeps one worker team per thread that ever ran a parallel region, and the team stays for the thread's
life: once a second thread has run a parallel op, every parallel op on the engine thread is slower for good
(docs/engine.md has the figures). The remedy is a rule: threads that load voices, build runners or touch tensors for any other reason run torch
with one thread (no team), and the engine thread alone takes `num_threads`.
"""

from __future__ import annotations

import os

import torch

ONEDNN_CACHE_CAPACITY = 4096  # compiled oneDNN kernels kept (default 1024); read once, at the first kernel


def _raise_onednn_cache() -> None:
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(ONEDNN_CACHE_CAPACITY))


def available_cores() -> int:
    """CPUs this process may run on (its affinity mask, which a container's cpuset narrows)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def serial_torch() -> None:
    """Run torch on the calling thread with one thread: it will never own an OpenMP team.

    Call it first thing in any thread that touches tensors but is not an engine thread (voice loading,
    runner set-up, the event loop). Idempotent.
    """
    _raise_onednn_cache()
    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)


def name_os_thread(name: str) -> None:
    """Name the calling thread for the OS (Linux: /proc/PID/task/TID/comm, `top -H`, py-spy); threads it starts
    later (the OpenMP workers) inherit the name. Best effort: nothing happens where prctl is missing."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME, 15 bytes + NUL at most
    except (OSError, AttributeError):
        pass


def claim_engine_thread(num_threads: int) -> int:
    """Give the calling (engine) thread `num_threads` intra-op threads (0: every available core); returns it.

    The thread (and the OpenMP workers it starts) is named `voxpool-engine` for the OS, so per-thread CPU reads
    (bench/capacity.py) tell the engine from the event loop and gRPC's threads.
    """
    name_os_thread("voxpool-engine")
    _raise_onednn_cache()
    n = num_threads if num_threads > 0 else available_cores()
    torch.set_num_threads(n)
    return n
