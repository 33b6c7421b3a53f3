"""The cluster process's collector policy: young collections and a freeze each cycle, a full
collection only after a (re)list or when the frozen heap grows by a quarter."""

from __future__ import annotations

import asyncio
import gc
import mmap
import sys
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from kube_gpu_exporter.exporter.cluster import DEFAULT_SETTINGS
from kube_gpu_exporter.exporter.serve import frozen_heap
from kube_gpu_exporter.exporter.serve.cluster_loop import ClusterLoop
from kube_gpu_exporter.exporter.serve.frozen_heap import GROWTH, NEVER, FrozenHeap, heap_size
from support import full_collections_during


class Node:
    """A tracked object that can sit in a reference cycle and be watched by a weakref."""

    def __init__(self) -> None:
        self.other: object = None


@pytest.fixture(autouse=True)
def restored() -> Iterator[None]:
    thresholds = gc.get_threshold()
    gc.unfreeze()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


def cycle_garbage() -> weakref.ref[Node]:
    """A two-object cycle nothing else refers to; the weakref tells when it is collected."""
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_start_keeps_young_collections_and_stops_automatic_full_ones() -> None:
    young, middle, _ = gc.get_threshold()
    FrozenHeap().start()
    assert gc.get_threshold() == (young, middle, NEVER)


def test_the_first_cycle_collects_fully_and_freezes_what_lives() -> None:
    heap = FrozenHeap()
    dead = cycle_garbage()
    alive = Node()
    assert full_collections_during(lambda: heap.after_cycle(relisted=False)) == 1
    assert dead() is None
    assert not any(o is alive for o in gc.get_objects())  # frozen: no collection walks it
    assert gc.get_freeze_count() > 0


def test_later_cycles_collect_only_the_young_and_freeze_again() -> None:
    heap = FrozenHeap()
    heap.after_cycle(relisted=False)
    young_garbage = cycle_garbage()  # made this cycle: a young collection finds it
    made = Node()
    assert full_collections_during(lambda: heap.after_cycle(relisted=False)) == 0
    assert young_garbage() is None
    assert not any(o is made for o in gc.get_objects())


def test_a_relist_collects_fully() -> None:
    heap = FrozenHeap()
    heap.after_cycle(relisted=False)
    assert full_collections_during(lambda: heap.after_cycle(relisted=True)) == 1
    assert heap.full_collections == 2


def test_garbage_frozen_in_a_cycle_is_collected_once_the_heap_grows_a_quarter() -> None:
    heap = FrozenHeap()
    a, b = Node(), Node()
    a.other, b.other = b, a
    heap.after_cycle(relisted=False)  # a and b are alive, and frozen
    leaked = weakref.ref(a)
    del a, b  # now garbage in a cycle, frozen: reference counting cannot free it
    heap.after_cycle(relisted=False)
    measured = heap_size()  # what that cycle's heap was, at most, give or take a page
    assert leaked() is not None  # no growth: no full collection
    # Resident memory moves (the allocator returns freed pages, or reuses pages it kept):
    # grow from what is now to a quarter above what the cycle measured, and 16 MiB more, in
    # new pages, each written so that it is resident.
    grown = resident_pages(int(measured * (1 + GROWTH)) - heap_size() + (16 << 20))
    assert full_collections_during(lambda: heap.after_cycle(relisted=False)) == 1
    assert leaked() is None
    assert len(grown) > 0
    grown.close()


def resident_pages(size: int) -> mmap.mmap:
    """`size` bytes of new memory, every page written (so resident), outside the allocator."""
    pages = mmap.mmap(-1, max(size, mmap.PAGESIZE))
    for offset in range(0, len(pages), mmap.PAGESIZE):
        pages[offset] = 1
    return pages


def test_a_cycles_end_walks_none_of_the_frozen_objects(monkeypatch: pytest.MonkeyPatch) -> None:
    """At 150,000 pods the frozen heap holds over a million objects; counting them
    (`gc.get_freeze_count` walks their list) held the GIL 17–31 ms at the end of every cycle,
    and a scrape arriving then waited that long. Only a full collection may walk them."""
    heap = FrozenHeap()
    heap.after_cycle(relisted=False)  # the first cycle's full collection

    def walks(*args: object) -> None:
        raise AssertionError("walked every frozen object at the end of a cycle")

    monkeypatch.setattr(gc, "get_freeze_count", walks)
    monkeypatch.setattr(gc, "get_objects", walks)
    monkeypatch.setattr(gc, "get_referrers", walks)
    monkeypatch.setattr(sys, "getallocatedblocks", walks)  # walks the allocator's pools
    made = [Node() for _ in range(100)]
    assert full_collections_during(lambda: heap.after_cycle(relisted=False)) == 0
    assert full_collections_during(lambda: heap.after_cycle(relisted=False)) == 0
    assert len(made) == 100


def test_a_heap_size_unknown_starts_no_full_collection(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Where /proc/self/statm cannot be read (not Linux, or no file descriptor left), the
    growth is unknown: neither taken as growth nor compared with another measure."""
    heap = FrozenHeap()
    monkeypatch.setattr(frozen_heap, "STATM", str(tmp_path / "missing"))
    assert frozen_heap.heap_size() is None
    assert full_collections_during(lambda: heap.after_cycle(relisted=False)) == 1  # the first
    assert full_collections_during(lambda: heap.after_cycle(relisted=False)) == 0
    monkeypatch.undo()  # readable again: measured from now on, no collection for it
    assert full_collections_during(lambda: heap.after_cycle(relisted=False)) == 0
    assert full_collections_during(lambda: heap.after_cycle(relisted=False)) == 0
    assert full_collections_during(lambda: heap.after_cycle(relisted=True)) == 1


def test_what_a_cycle_takes_is_frozen_at_once_after_the_young_are_collected() -> None:
    heap = FrozenHeap()
    heap.after_cycle(relisted=False)
    young_garbage = cycle_garbage()
    taken = heap.frozen(lambda: tuple(Node() for _ in range(1000)))
    assert young_garbage() is None  # collected before the freeze, not frozen with it
    tracked = {id(o) for o in gc.get_objects()}  # what a collection would walk
    assert not any(id(o) in tracked for o in (taken, *taken))


def test_the_cluster_loop_sets_the_collector_when_it_starts() -> None:
    """What a scrape waits for while a cycle runs: no automatic full collection. (The GIL
    switch interval is the command's: tests/unit/test_process_policy.py.)"""

    class NotListed:
        listed = False
        lists = 0

    async def started() -> None:
        loop = ClusterLoop(NotListed(), DEFAULT_SETTINGS, 15.0)  # type: ignore[arg-type]
        loop.start()
        await loop.stop()

    asyncio.run(started())
    assert gc.get_threshold()[2] == NEVER


@contextmanager
def collection_held_by_another_thread() -> Iterator[threading.Event]:
    """Another thread inside a young collection until the yielded event is set: its gc
    callback waits on it, as a finalizer or callback running Python code lets others in."""
    inside, release = threading.Event(), threading.Event()
    holder: list[int] = []

    def hold(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and threading.get_ident() in holder:
            inside.set()
            release.wait(10)

    def collect_young() -> None:
        holder.append(threading.get_ident())
        gc.collect(0)

    gc.callbacks.append(hold)
    thread = threading.Thread(target=collect_young)
    thread.start()
    try:
        assert inside.wait(10)
        yield release
    finally:
        release.set()
        thread.join()
        gc.callbacks.remove(hold)


def test_a_full_collection_waits_out_another_threads_collection() -> None:
    """`gc.collect` returns at once when another thread is collecting: the relist's full
    collection is retried until that one ends, not skipped."""
    heap = FrozenHeap(patience=10)
    heap.after_cycle(relisted=False)
    with collection_held_by_another_thread() as release:
        threading.Timer(0.05, release.set).start()
        dead = cycle_garbage()
        assert full_collections_during(lambda: heap.after_cycle(relisted=True)) == 1
    assert dead() is None
    assert heap.full_collections == 2


def test_a_full_collection_kept_from_running_stays_due() -> None:
    heap = FrozenHeap(patience=0.05)
    heap.after_cycle(relisted=False)
    with collection_held_by_another_thread():
        dead = cycle_garbage()
        assert full_collections_during(lambda: heap.after_cycle(relisted=True)) == 0
        assert heap.full_collections == 1
    assert full_collections_during(lambda: heap.after_cycle(relisted=False)) == 1
    assert dead() is None
    assert full_collections_during(lambda: heap.after_cycle(relisted=False)) == 0
