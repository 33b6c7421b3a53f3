"""The cluster view keeps its objects out of the garbage collector's full passes.

On a 50,000-pod cluster a full collection walked over a million held objects with the GIL
held for 200 ms or more, and at 150,000 pods each cycle's own objects still cost a full
collection of 12–40 ms about once a cycle: a scrape arriving then waited as long (make
bench). The loop freezes what lives after every cycle (frozen_heap.py) and collects fully
only after a (re)list: a pod an event changed is frozen after the next cycle, and a cycle
with events alone runs no full collection.

Real watches over the test API server, in this process (the frozen set is per process).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster_objects import make_gpu_pod, make_node
from kube_gpu_exporter.demo.kube_api import KubeApiServer
from kube_gpu_exporter.exporter.cluster import DEFAULT_SETTINGS
from kube_gpu_exporter.exporter.cluster.watches import ClusterWatches
from kube_gpu_exporter.exporter.serve.cluster_loop import ClusterLoop
from kube_gpu_exporter.exporter.serve.frozen_heap import FrozenHeap
from support import full_collections_during, wait_until


@pytest.fixture
def unfrozen() -> Iterator[None]:
    """The collector as the cluster process sets it (no automatic full collection in the
    watch threads to count), and as it was afterwards."""
    thresholds = gc.get_threshold()
    gc.unfreeze()
    FrozenHeap().start()
    yield
    gc.unfreeze()  # leave the test process as it was
    gc.set_threshold(*thresholds)


def collected(obj: object) -> bool:
    """Whether a collection of the old generation would walk `obj` (frozen ones it does not)."""
    return any(o is obj for o in gc.get_objects())  # the frozen generation is not listed


def test_every_cycle_freezes_and_only_a_relist_collects_fully(
    tmp_path: Path, unfrozen: None
) -> None:
    with KubeApiServer() as api:
        api.put_node(make_node("gpu-a"))
        for n in range(50):
            api.put(make_gpu_pod(f"train-{n}", 1, node="gpu-a"))
        watches = ClusterWatches(
            str(api.write_kubeconfig(tmp_path / "kubeconfig")), DEFAULT_SETTINGS
        )
        watches.start()
        try:
            wait_until(lambda: watches.listed, what="the first lists")
            loop = ClusterLoop(watches, DEFAULT_SETTINGS, 15.0)
            held = watches.objects().pods[0]
            assert collected(held)
            assert full_collections_during(loop.cycle) == 1  # the first, after the list
            assert not collected(held)

            api.put(make_gpu_pod("train-new", 1, node="gpu-a"))  # an event, no list
            wait_until(
                lambda: any(p.name == "train-new" for p in watches.objects().pods),
                what="the event",
            )
            new = next(p for p in watches.objects().pods if p.name == "train-new")
            assert collected(new)
            assert full_collections_during(loop.cycle) == 0
            assert not collected(new)

            lists = watches.lists
            api.expire("http")  # a 410: the watches relist, every object is new
            api.end_watches()
            wait_until(lambda: watches.lists > lists, what="a relist")
            relisted = next(p for p in watches.objects().pods if p is not held)
            assert collected(relisted)
            assert full_collections_during(loop.cycle) == 1
            assert not collected(relisted)
        finally:
            watches.stop()
