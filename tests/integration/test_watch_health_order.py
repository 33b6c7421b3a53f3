"""A page never contradicts itself about a watch: objects a list brought are never served
with that watch's `kube_gpu_cluster_watch_up` at 0, and no Kueue verdict is drawn while one
of Kueue's watches has not answered its first list (a Workload judged before its
ClusterQueue, flavor or cohort is known).

Real watches over the test API server, in this process; a stalled list holds one watch
back for as long as the test needs.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

from cluster_objects import make_node
from kube_gpu_exporter.demo.kube_api import KubeApiServer
from kube_gpu_exporter.demo.kube_api.kueue_objects import (
    API_VERSION,
    make_cluster_queue,
    make_local_queue,
    make_resource_flavor,
    make_workload,
)
from kube_gpu_exporter.demo.kube_api.objects import NODES_PATH
from kube_gpu_exporter.exporter.cluster import DEFAULT_SETTINGS
from kube_gpu_exporter.exporter.cluster.kueue import COHORTS, RESOURCE_FLAVORS
from kube_gpu_exporter.exporter.cluster.watches import KUEUE_RESOURCES, ClusterWatches, TakenObjects
from kube_gpu_exporter.exporter.kubernetes.client import api_client
from kube_gpu_exporter.exporter.kubernetes.list_watch import ListWatch
from kube_gpu_exporter.exporter.serve.cluster_loop import TEXT_ACCEPT, ClusterLoop
from support import samples, values, wait_until

GPU = "nvidia.com/gpu"
STALL_SECONDS = 10.0  # a held list outlasts the others; the read timeout is longer (`TIMEOUT`)
TIMEOUT = 40.0


def _kueue(api: KubeApiServer) -> None:
    """A flavor, a ClusterQueue in a cohort, its LocalQueue, a waiting Workload, the Cohort."""
    api.put_kueue(RESOURCE_FLAVORS, make_resource_flavor("h100"))
    api.put_kueue(
        "clusterqueues", make_cluster_queue("team-cq", [("h100", GPU, 4, None)], cohort="org")
    )
    api.put_kueue("localqueues", make_local_queue("team", "team", "team-cq"))
    api.put_kueue("workloads", make_workload("job-a", "team", "team", gpus_each=2))
    cohort = {"apiVersion": API_VERSION, "kind": "Cohort", "metadata": {"name": "org"}}
    api.put_kueue(COHORTS, cohort)


def test_a_watch_is_up_before_its_list_and_events_are_published(tmp_path: Path) -> None:
    with KubeApiServer() as api:
        api.put_node(make_node("gpu-a"))
        client = api_client(str(api.write_kubeconfig(tmp_path / "kubeconfig")))
        seen: list[bool] = []

        def publish(held: Mapping[str, Any]) -> None:
            seen.append(watch.up)

        def parse(obj: Any) -> tuple[str, Any]:
            return obj["metadata"]["name"], obj

        watch: ListWatch[Any] = ListWatch("nodes", client.lister("/api/v1/nodes"), parse, publish)
        assert not watch.answered
        watch.start()
        try:
            wait_until(lambda: seen, what="the list published")
            assert watch.answered
            api.put_node(make_node("gpu-b"))
            wait_until(lambda: len(seen) >= 2, what="the event published")
            lists = len(api.lists(NODES_PATH))
            api.fail(503, times=1, resource="nodes")  # down once, then relisted
            api.end_watches()
            wait_until(
                lambda: len(api.lists(NODES_PATH)) > lists and watch.up and len(seen) >= 3,
                what="the relist published",
            )
            assert seen == [True] * len(seen), seen
        finally:
            watch.stop()
            client.close()


W = TypeVar("W", bound=ClusterWatches)


@contextlib.contextmanager
def cohorts_held(tmp_path: Path, kind: type[W]) -> Iterator[W]:
    """`kind` of watches, started, on a Kueue cluster whose API server holds the Cohorts'
    list `STALL_SECONDS`."""
    with KubeApiServer(kueue_versions=("v1beta2",)) as api:
        api.put_node(make_node("gpu-a"))
        _kueue(api)
        api.stall(STALL_SECONDS, resource=COHORTS)
        kubeconfig = str(api.write_kubeconfig(tmp_path / "kubeconfig"))
        watches = kind(kubeconfig, DEFAULT_SETTINGS, timeout=TIMEOUT)
        watches.start()
        try:
            yield watches
        finally:
            watches.stop()


def _cycle(watches: ClusterWatches) -> bytes:
    """One cycle of the cluster loop over `watches`: its plain-text page."""
    return ClusterLoop(watches, DEFAULT_SETTINGS, 15.0).cycle().body(TEXT_ACCEPT, False)[0]


def test_kueue_verdicts_wait_until_every_kueue_watch_has_answered(tmp_path: Path) -> None:
    with cohorts_held(tmp_path, ClusterWatches) as watches:
        others = [name for name in KUEUE_RESOURCES if name != COHORTS]
        wait_until(
            lambda: watches.listed and all(watches.watches[n].up for n in others),
            what="every list but the cohorts'",
        )
        # what is read counts only if the cohorts' list was held before and after it
        held_back = not watches.watches[COHORTS].answered
        taken = watches.kueue_objects()
        page = samples(_cycle(watches))
        assert held_back and not watches.watches[COHORTS].answered, "stall too short"
        assert taken is None
        assert values(page, "kube_gpu_queue_info") == []
        assert values(page, "kube_gpu_pending_workloads") == []
        assert values(page, "kube_gpu_cluster_watch_up", resource=COHORTS) == [0.0]
        assert values(page, "kube_gpu_cluster_watch_up", resource="workloads") == [1.0]

        wait_until(lambda: watches.kueue_objects(), timeout=60, what="the cohorts' list")
        judged = watches.kueue_objects()
        assert judged is not None and dict(judged.cohorts) == {"org": ""}


class TakenAfterTheList(ClusterWatches):
    """The cluster's watches, except that taking Kueue's objects first waits for the
    cohorts' list: that list lands while a cycle is under way, between its start and the
    moment it reads the watches' health."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.waited = threading.Event()
        self.cohorts_up_at_take: bool | None = None

    def take(self) -> TakenObjects:
        self.cohorts_up_at_take = self.watches[COHORTS].up
        return super().take()

    def kueue_objects(self) -> Any:
        self.waited.set()
        wait_until(lambda: self.watches[COHORTS].up, timeout=60, what="the cohorts' list")
        return super().kueue_objects()


def test_a_list_that_lands_during_a_cycle_is_served_with_its_watch_up(tmp_path: Path) -> None:
    with cohorts_held(tmp_path, TakenAfterTheList) as watches:
        wait_until(lambda: watches.listed, what="nodes, pods and quotas listed")
        page = samples(_cycle(watches))
        assert watches.waited.is_set()
        assert watches.cohorts_up_at_take is False, "the stall ended before the cycle"
        assert values(page, "kube_gpu_cluster_watched_objects", resource=COHORTS) == [1.0]
        assert values(page, "kube_gpu_cluster_watch_up", resource=COHORTS) == [1.0]
