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

The cyclic collector, too, is tuned to a cache: the cache holds hundreds of thousands of long-lived
objects (records, their maps, the queue's entries), and CPython's oldest generation walks all of them
each time it runs, about 100 ms at 5,000 nodes and 8,000 pods, wherever it strikes: inside a scheduling
cycle, a gang's attempt, a binding. Once the informers' first lists are in, `freeze_survivors` runs one
collection and moves every object still alive to the permanent generation (`gc.freeze`): later
collections walk only what came since, and the youngest generation is collected every `YOUNG_THRESHOLD`
allocations rather than every 700 (see there). Reference counting still frees a frozen object that is dropped;
only reference cycles among frozen objects would wait, so `collect_forever` unfreezes, collects and
freezes again every `FULL_COLLECTION_SECONDS`, put off while pods wait to be tried (for at most one
interval more), as a forecast is: its walk of everything falls where no cycle waits for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import Callable

TRIM_SECONDS = 30.0
FULL_COLLECTION_SECONDS = 600.0
COLLECTION_POLL_SECONDS = 1.0
# Allocations (net of deallocations) between two collections of the youngest generation (CPython: 700).
# Each collection walks every young object still alive, and in the daemon most of those are the same
# in-flight requests (64 bindings' coroutines, their frames and futures, about 5,000 objects): walked
# 75 times a second at the default while gangs bind, for nothing. Fewer walks of about the same set.
YOUNG_THRESHOLD = 10_000


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


def freeze_survivors(full: bool = False) -> float:
    """Collect what is not frozen (`full`: everything, frozen or not), then freeze every object still
    alive; the seconds it took. The youngest generation's threshold is raised to `YOUNG_THRESHOLD`."""
    started = time.perf_counter()
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, oldest)
    if full:
        gc.unfreeze()
    gc.collect()
    gc.freeze()
    return time.perf_counter() - started


def collection_due(
    now: float, last: float, due_since: float | None, interval: float, active: int
) -> tuple[bool, float | None]:
    """Whether a periodic job runs now, and since when it has been due (None: not due, or running): due
    `interval` after the last run; while `active` pods wait to be tried, put off for at most one interval
    more (the full collection here, the daemon's forecasts)."""
    if now - last < interval:
        return False, None
    due_since = now if due_since is None else due_since
    if active and now - due_since < interval:
        return False, due_since
    return True, None


async def collect_forever(
    active: Callable[[], int],
    on_collected: Callable[[float], None],
    seconds: float = FULL_COLLECTION_SECONDS,
) -> None:
    """Every `seconds`, once no pod waits to be tried (`active`: how many do), or one interval late at the
    latest: a full collection, then everything alive is frozen again (see the module)."""
    loop = asyncio.get_running_loop()
    last = loop.time()
    due_since: float | None = None
    while True:
        await asyncio.sleep(COLLECTION_POLL_SECONDS)
        now = loop.time()
        run, due_since = collection_due(now, last, due_since, seconds, active())
        if run:
            last = now
            on_collected(freeze_survivors(full=True))
