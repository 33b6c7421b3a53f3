"""The cluster process's garbage collector: young collections only, the rest frozen each cycle.

A full collection holds the GIL while it walks every object it tracks. In the cluster view
that was the scrape's worst wait: each cycle makes some 100,000 short-lived tracked objects
(node checks, families' samples), CPython promotes them and runs a full collection about
once a cycle, and during a (re)list longer ones ran in the watch thread as the heap grew.
Every scrape that arrived then waited that long (the pauses, measured with a `gc.callbacks`
probe: bench/README.md, "Figures behind the code's choices").

So the cluster process never lets CPython start a full collection (`gc.set_threshold` with
an unreachable third threshold); young collections still run as usual and catch the young
cycles. At the end of each cycle the loop calls `after_cycle`: a young collection, then
`gc.freeze()`, which moves everything alive into the permanent generation that no
collection walks. Most of it (this cycle's families, checks, the view) is freed by reference
counting a cycle later, frozen or not. What reference counting cannot free is garbage in
cycles that formed after its objects were frozen; to bound it, a full collection (unfreeze,
collect, freeze) runs when the heap has grown by `GROWTH` since the last full one (CPython's
own rule for its full collections: a quarter more), and after every (re)list, as before.
Those are the only full collections: one after the list, while the old body is still
served, and another only when the heap really grows.

The heap is measured as the process's resident memory (`/proc/self/statm`, one small read),
not in frozen objects: `gc.get_freeze_count` walks the whole permanent generation, a linked list of
every frozen object, holding the GIL — the pause a scrape met at the end of each cycle (a
`gc.callbacks` and lag-thread probe placed it there, with no collection running), and
`sys.getallocatedblocks` walks the allocator's pool headers (both timed in bench/README.md,
"Figures behind the code's choices"). Resident memory is what frozen
garbage would make grow, and what the Deployment's memory limit is about; pages the
allocator kept after a peak are used first, so the trigger comes that much later, bounded
by the peak. Where it cannot be read, growth is unknown and starts nothing; the (re)lists'
full collections still run.

`gc.collect` does nothing, and says nothing, when another thread is inside a collection
(CPython runs one at a time, and a collection's finalizers and callbacks run Python code
that lets other threads in): a watch thread's young collection can swallow the full one a
relist asked for. So each collection here is checked in `gc.get_stats()`, retried while
another thread finishes, and a full one that still did not run stays due for the next cycle.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable
from typing import Final, TypeVar

GROWTH: Final = 0.25  # heap growth over the last full collection's that starts another
NEVER: Final = 2**31 - 1  # a third threshold no count of young collections reaches
STATM: Final = "/proc/self/statm"  # sizes in pages: total, resident, shared, …
PATIENCE: Final = 0.5  # seconds a collection is retried while another thread runs one

T = TypeVar("T")


PAGE: Final = os.sysconf("SC_PAGE_SIZE")


def collect(generation: int, patience: float = PATIENCE) -> bool:
    """Collect `generation` (and the younger ones); False when another thread's collection
    kept it from running for `patience` seconds. `gc.collect` returns 0 both when it found
    nothing and when it did not run; the generation's count of collections tells them apart."""
    deadline = time.monotonic() + patience
    while True:
        before = gc.get_stats()[generation]["collections"]
        gc.collect(generation)
        if gc.get_stats()[generation]["collections"] != before:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.001)  # let the collecting thread finish (it may be waiting for the GIL)


def heap_size() -> int | None:
    """Resident bytes of this process, None when unknown: /proc missing (not Linux) or not
    readable now (no file descriptor left, under a connection flood). Unknown starts no full
    collection; another measure in its place would compare blocks with bytes."""
    try:
        with open(STATM, "rb") as statm:
            return int(statm.read().split()[1]) * PAGE
    except (OSError, ValueError, IndexError):
        return None


class FrozenHeap:
    """The policy above, for one process; `start` once, `after_cycle` from the thread that
    runs the cycles (gc calls are process-wide, one thread makes them)."""

    def __init__(self, growth: float = GROWTH, patience: float = PATIENCE) -> None:
        self._growth = growth
        self._patience = patience
        self._due = True  # a full collection asked for (the first, a relist) and not yet run
        self._baseline = (
            0  # heap_size() after the last full collection (or lowest since); 0 unknown
        )
        self.full_collections = 0

    def start(self) -> None:
        """Young collections as CPython's defaults; no automatic full collection."""
        young, middle, _ = gc.get_threshold()
        gc.set_threshold(young, middle, NEVER)

    def frozen(self, make: Callable[[], T]) -> T:
        """`make()` between a young collection and a freeze: what it makes is never walked
        by the young collections the cycle's own allocations start. The cycle's copy of the
        watches' pods is one tuple, and each young collection that found it young walked all
        of it (the cycle's slowest collections, twice a cycle: bench/README.md)."""
        collect(1, self._patience)
        made = make()
        gc.freeze()
        return made

    def after_cycle(self, relisted: bool) -> None:
        """Collect the young, freeze what lives; a full collection first when `relisted` or
        when the heap grew by the growth factor (or on the first cycle). Nothing here walks
        the frozen objects but that full collection. One another thread's collection kept
        from running stays due: the next cycle runs it."""
        self._due = self._due or relisted
        collect(1, self._patience)
        heap = heap_size()
        limit = self._baseline * (1 + self._growth)  # 0: unknown since the last full one
        grown = heap is not None and self._baseline > 0 and heap > limit
        if self._due or grown:
            gc.unfreeze()
            ran = collect(2, self._patience)
            gc.freeze()
            self._due = not ran
            if ran:
                self._baseline = heap_size() or 0
                self.full_collections += 1
            return
        gc.freeze()
        if heap is not None:
            self._baseline = min(self._baseline, heap) if self._baseline else heap
