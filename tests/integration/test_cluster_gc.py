"""The cluster view keeps what its watches listed out of the garbage collector's full passes.

On a 50,000-pod cluster a full collection walked over a million held objects with the GIL
held for 200 ms or more, and a scrape arriving then waited as long (make bench). After the
first cycle that follows a (re)list, the loop freezes the heap (`gc.freeze`): the listed
pods leave the collected generations; a relist's new pods are frozen in turn.

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
from support import wait_until


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()  # leave the test process as it was


def collected(obj: object) -> bool:
    """Whether a collection of the old generation would walk `obj` (frozen ones it does not)."""
    return any(o is obj for o in gc.get_objects())  # the frozen generation is not listed


def test_listed_objects_are_frozen_once_per_list(tmp_path: Path, unfrozen: None) -> None:
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
            loop.cycle()
            assert not collected(held)
            frozen = gc.get_freeze_count()
            loop.cycle()  # no new list: nothing more is frozen (some frozen ones are freed)
            assert gc.get_freeze_count() <= frozen

            lists = watches.lists
            api.expire("http")  # a 410: the watches relist, every object is new
            api.end_watches()
            wait_until(lambda: watches.lists > lists, what="a relist")
            relisted = next(p for p in watches.objects().pods if p is not held)
            assert collected(relisted)
            loop.cycle()
            assert not collected(relisted)
        finally:
            watches.stop()
