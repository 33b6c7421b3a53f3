"""The cluster mode's watches: every node, every pod that has not ended, every ResourceQuota
and the FailedCreate events, and where Kueue is installed its Workloads, LocalQueues,
ClusterQueues, ResourceFlavors and Cohorts (kueue*.py), kept current by `ListWatch` (410
relist, backoff, health) in nine threads.

Each object is parsed into the slim values of objects.py as it arrives, so what is held of a
pod is what the view reads, whatever its spec (bench/README.md has the figure); lists are
paged (`PAGE`), so the raw JSON of the whole cluster is never in memory at once either.
Pods that cannot matter are not held at all: ended pods (the server filters them out, and one
that ends leaves the watch) and pods that wait for the scheduler without requesting a GPU
(they hold nothing on any node). Of the events only GPU quota refusals are held, each as
its count (quota_events.py).

The watch threads change their dicts through `HeldObjects` (view_changes.py), which notes
each change under a lock; `take()` hands the loop each resource's objects at one moment with
the changes since its last take, from which it updates its view (incremental_view.py).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from kube_gpu_exporter.exporter.cluster.kueue import (
    CLUSTER_QUEUES,
    COHORTS,
    LOCAL_QUEUES,
    RESOURCE_FLAVORS,
    WORKLOADS,
    parse_local_queue,
    served_version,
)
from kube_gpu_exporter.exporter.cluster.kueue_counters import QueueCounters
from kube_gpu_exporter.exporter.cluster.kueue_objects import (
    Flavor,
    Queue,
    parse_cohort,
    parse_flavor,
    parse_queue,
)
from kube_gpu_exporter.exporter.cluster.kueue_view import KueueObjects
from kube_gpu_exporter.exporter.cluster.kueue_workloads import Workload, parse_kueue_workload
from kube_gpu_exporter.exporter.cluster.objects import ACTIVE_PODS, Node, Pod, Quota
from kube_gpu_exporter.exporter.cluster.parse import parse_node, parse_pod, parse_quota
from kube_gpu_exporter.exporter.cluster.quota_events import FAILED_CREATE, QuotaRejections
from kube_gpu_exporter.exporter.cluster.settings import ClusterSettings
from kube_gpu_exporter.exporter.cluster.view_changes import HeldObjects, Taken
from kube_gpu_exporter.exporter.kubernetes.client import api_client
from kube_gpu_exporter.exporter.kubernetes.kubeconfig_choice import Kubeconfig
from kube_gpu_exporter.exporter.kubernetes.list_watch import WATCH_SECONDS, ListWatch
from kube_gpu_exporter.exporter.kubernetes.paged_list import PAGE

# kube-apiserver filters events by reason, so other events never cross the wire
REFUSALS: Final = f"reason={FAILED_CREATE}"
NODES, PODS, QUOTAS, EVENTS = "nodes", "pods", "resourcequotas", "events"
KUEUE_RESOURCES: Final = (WORKLOADS, LOCAL_QUEUES, CLUSTER_QUEUES, RESOURCE_FLAVORS, COHORTS)

PodObserver = Callable[[Pod], None]


@dataclass(frozen=True)
class Objects:
    """What the watches hold at one moment."""

    nodes: tuple[Node, ...]
    pods: tuple[Pod, ...]
    quotas: tuple[Quota, ...]


@dataclass(frozen=True)
class TakenObjects:
    """What the cluster loop takes of the watches once a cycle."""

    nodes: Taken[Node]
    pods: Taken[Pod]
    quotas: Taken[Quota]


class ClusterWatches:
    """Nodes, active pods and quotas of the whole cluster. `observe` is called with every pod
    as parsed (from the watch threads) before it is held or dropped: the scheduling-wait and
    disruption counters see each transition there (transitions.py). The events watch feeds
    `rejections` (one of its own unless given); the view does not wait for its list."""

    def __init__(
        self,
        kubeconfig: str | Kubeconfig | None,
        settings: ClusterSettings,
        *,
        observe: PodObserver | None = None,
        rejections: QuotaRejections | None = None,
        timeout: float = 10.0,
        watch_seconds: int = WATCH_SECONDS,
    ) -> None:
        from kube_gpu_exporter.exporter.cluster.decode import decoders  # msgspec: cluster only

        self._client = api_client(kubeconfig)
        self._settings = settings
        self._observe = observe
        self.rejections = rejections if rejections is not None else QuotaRejections(settings)
        api = self._client.lister
        self._nodes: HeldObjects[Node] = HeldObjects()
        self._pods: HeldObjects[Pod] = HeldObjects()
        self._quotas: HeldObjects[Quota] = HeldObjects()
        self._workloads: Mapping[str, Workload] = {}
        self._local_queues: Mapping[str, str] = {}
        self._cluster_queues: Mapping[str, Queue] = {}
        self._flavors: Mapping[str, Flavor] = {}
        self._cohorts: Mapping[str, str] = {}
        self.queue_counters = QueueCounters()
        options: dict[str, Any] = {
            "timeout": timeout,
            "watch_seconds": watch_seconds,
            "page_size": PAGE,
        }
        decoder = decoders(settings)  # straight to slim values; parse_* pass them through
        self.watches: dict[str, ListWatch[Any]] = {
            NODES: ListWatch(
                NODES,
                api("/api/v1/nodes"),
                _node,
                self._nodes.publish,
                store=self._nodes.store,
                decoder=decoder[NODES],
                **options,
            ),
            PODS: ListWatch(
                PODS,
                api("/api/v1/pods", field_selector=ACTIVE_PODS),
                self._pod,
                self._pods.publish,
                store=self._pods.store,
                decoder=decoder[PODS],
                **options,
            ),
            QUOTAS: ListWatch(
                QUOTAS,
                api("/api/v1/resourcequotas"),
                functools.partial(_quota, settings=settings),
                self._quotas.publish,
                store=self._quotas.store,
                decoder=decoder[QUOTAS],
                **options,
            ),
            EVENTS: ListWatch(
                EVENTS,
                api("/api/v1/events", field_selector=REFUSALS),
                self.rejections.parse,
                self.rejections.publish,
                decoder=decoder[EVENTS],
                **options,
            ),
            # Kueue's, where it is served (cluster/kueue.py): idle and up where it is not
            WORKLOADS: ListWatch(
                WORKLOADS,
                served_version(api, WORKLOADS),
                self._workload,
                self._publish_workloads,
                **options,
            ),
            LOCAL_QUEUES: ListWatch(
                LOCAL_QUEUES,
                served_version(api, LOCAL_QUEUES),
                parse_local_queue,
                self._publish_local_queues,
                **options,
            ),
            CLUSTER_QUEUES: ListWatch(
                CLUSTER_QUEUES,
                served_version(api, CLUSTER_QUEUES),
                functools.partial(parse_queue, settings=settings),
                self._publish_cluster_queues,
                **options,
            ),
            RESOURCE_FLAVORS: ListWatch(
                RESOURCE_FLAVORS,
                served_version(api, RESOURCE_FLAVORS),
                parse_flavor,
                self._publish_flavors,
                **options,
            ),
            COHORTS: ListWatch(
                COHORTS,
                served_version(api, COHORTS),
                parse_cohort,
                self._publish_cohorts,
                **options,
            ),
        }

    def start(self) -> None:
        for watch in self.watches.values():
            watch.start()

    def stop(self) -> None:
        """Stops the watches side by side (each may take its `STOP_WAIT_SECONDS`)."""
        threads = [
            threading.Thread(target=watch.stop, name=f"stop-{name}", daemon=True)
            for name, watch in self.watches.items()
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self._client.close()

    @property
    def listed(self) -> bool:
        """Nodes, pods and quotas have been listed once: the view is complete from here on
        (the events only add a counter, which a failing events watch must not hold back)."""
        return self._nodes.listed and self._pods.listed and self._quotas.listed

    @property
    def lists(self) -> int:
        """(Re)lists of nodes, pods and quotas so far: the cluster loop freezes the objects
        a list made out of the garbage collector's way (cluster_loop.py)."""
        return self._nodes.lists + self._pods.lists + self._quotas.lists

    def objects(self) -> Objects:
        return Objects(self._nodes.values(), self._pods.values(), self._quotas.values())

    def take(self) -> TakenObjects:
        """Each resource now, with what changed since the last take (view_changes.py)."""
        return TakenObjects(self._nodes.take(), self._pods.take(), self._quotas.take())

    def kueue_objects(self) -> KueueObjects | None:
        """What the Kueue watches hold now (empty without Kueue); None until each of them
        has answered its first list, so that no verdict is drawn from Workloads whose
        ClusterQueues, flavors or cohorts are still being listed. The held dicts are the
        watch threads', changed by each event: copied first (a dict's copy is one step under
        the GIL), once a cycle rather than once an event."""
        if not all(self.watches[name].answered for name in KUEUE_RESOURCES):
            return None
        workloads = dict(self._workloads)
        self.queue_counters.forget_except(workloads)
        admissions, preemptions = self.queue_counters.snapshot()
        return KueueObjects(
            workloads,
            dict(self._local_queues),
            dict(self._cluster_queues),
            dict(self._flavors),
            dict(self._cohorts),
            admissions,
            preemptions,
        )

    def kueue_counts(self) -> dict[str, int]:
        """Objects held of Kueue's: GPU Workloads not finished, LocalQueues, ClusterQueues
        with GPU quota, ResourceFlavors, Cohorts."""
        return {
            WORKLOADS: len(self._workloads),
            LOCAL_QUEUES: len(self._local_queues),
            CLUSTER_QUEUES: len(self._cluster_queues),
            RESOURCE_FLAVORS: len(self._flavors),
            COHORTS: len(self._cohorts),
        }

    def _workload(self, obj: Mapping[str, Any]) -> tuple[str, Workload | None] | None:
        """A Workload parsed, and its admission or preemption counted (kueue_counters.py)."""
        parsed = parse_kueue_workload(obj, self._settings)
        if parsed is not None:
            key, workload = parsed
            local = "" if workload is None else f"{workload.namespace}/{workload.local_queue}"
            self.queue_counters.observe(key, workload, self._local_queues.get(local, ""))
        return parsed

    def _publish_workloads(self, held: Mapping[str, Workload]) -> None:
        self._workloads = held  # the watch's own dict (a new one after each list)

    def _publish_local_queues(self, held: Mapping[str, str]) -> None:
        self._local_queues = held

    def _publish_cluster_queues(self, held: Mapping[str, Queue]) -> None:
        self._cluster_queues = held

    def _publish_flavors(self, held: Mapping[str, Flavor]) -> None:
        self._flavors = held

    def _publish_cohorts(self, held: Mapping[str, str]) -> None:
        self._cohorts = held

    def up(self) -> dict[str, bool]:
        return {name: watch.up for name, watch in self.watches.items()}

    def errors_total(self) -> dict[str, dict[str, int]]:
        return {name: watch.errors_total for name, watch in self.watches.items()}

    def _pod(self, obj: Mapping[str, Any] | Pod) -> tuple[str, Pod | None] | None:
        pod = parse_pod(obj)
        if pod is None:
            return None
        if self._observe is not None:
            self._observe(pod)
        key = f"{pod.namespace}/{pod.name}"
        if pod.terminated or (pod.unscheduled and not self._settings.gpu_part(pod.requests)):
            return key, None
        return key, pod


def _node(obj: Mapping[str, Any] | Node) -> tuple[str, Node] | None:
    node = parse_node(obj)
    return None if node is None else (node.name, node)


def _quota(obj: Mapping[str, Any] | Quota, settings: ClusterSettings) -> tuple[str, Quota] | None:
    quota = parse_quota(obj, settings)
    return None if quota is None else (f"{quota.namespace}/{quota.name}", quota)
