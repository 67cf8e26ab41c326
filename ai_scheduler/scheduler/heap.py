"""Free heap pages handed back to the system: glibc's `malloc_trim`, now and then.

The daemon's memory swings with the cluster: a burst of pods (a churn of tens of thousands created and
deleted, a relist, the pages of a list response) allocates and frees far more than what stays. CPython
gives an arena of small objects back when it is empty; everything else (dict tables of more than a few
entries, lists, the bytes of responses) comes from glibc's malloc, which keeps freed memory in its heap,
trimming only its top, and raises its mmap threshold as large blocks are freed, so that later large
buffers come from the heap too and stay there once freed. `malloc_trim(0)` returns every whole free
page of every arena to the system (madvise), wherever it lies. It costs a walk of the free lists: the
daemon calls it every `TRIM_SECONDS` on a worker thread (ctypes releases the interpreter's lock for the
call, so scheduling goes on). Where the C library has no `malloc_trim` (musl, macOS), nothing is done.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

TRIM_SECONDS = 30.0


def trimmer() -> Callable[[], int] | None:
    """`malloc_trim(0)` of this process's C library (1: memory was released), or None without one."""
    with contextlib.suppress(Exception):
        import ctypes
        import ctypes.util

        name = ctypes.util.find_library("c")
        trim = ctypes.CDLL(name).malloc_trim if name else None
        if trim is not None:
            trim.argtypes = [ctypes.c_size_t]
            trim.restype = ctypes.c_int
            return lambda: int(trim(0))
    return None


async def trim_forever(seconds: float = TRIM_SECONDS) -> None:
    """Hand free heap pages back every `seconds`, for as long as the daemon runs."""
    trim = trimmer()
    if trim is None:
        return
    while True:
        await asyncio.sleep(seconds)
        await asyncio.to_thread(trim)
