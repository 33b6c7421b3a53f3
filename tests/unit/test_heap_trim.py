"""When the listener gives the C heap back: once after a burst has fallen to a quarter."""

from __future__ import annotations

from collections.abc import Callable

from kube_gpu_exporter.exporter.httpd.heap_trim import HeapTrim


def test_a_burst_is_trimmed_once_after_it_falls_to_a_quarter() -> None:
    count = [0]
    scheduled: list[Callable[[], None]] = []
    trims: list[int] = []
    heap = HeapTrim(lambda: count[0], lambda _delay, run: scheduled.append(run), trims.append)
    for n in range(1, 201):
        count[0] = n
        heap.changed()
    for n in range(200, 9, -1):
        count[0] = n
        heap.changed()
    assert len(scheduled) == 1  # at 50 (a quarter of 200), and not again meanwhile
    count[0] = 0
    scheduled.pop()()
    assert trims == [0] and heap.trims == 1
    heap.changed()
    assert not scheduled  # a new peak is needed first


def test_small_bursts_are_left_alone() -> None:
    count = [0]
    scheduled: list[Callable[[], None]] = []
    heap = HeapTrim(lambda: count[0], lambda _delay, run: scheduled.append(run), lambda _: 0)
    for n in [*range(1, 20), *range(20, -1, -1)]:
        count[0] = n
        heap.changed()
    assert not scheduled
