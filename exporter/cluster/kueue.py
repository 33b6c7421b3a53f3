"""Kueue's queues, when the cluster has Kueue: the GPU workloads that wait in them.

A Job queued by Kueue (`kueue.x-k8s.io/queue-name`) is suspended until Kueue admits it, so
its pods do not exist yet and the pod view cannot see it wait; its `Workload` can. Three
watches, started with the others: Workloads (those not admitted and not finished, asking for
GPUs), LocalQueues (which ClusterQueue each feeds, since a waiting Workload names only its
LocalQueue) and ClusterQueues (their GPU quotas per flavor: nominal, borrowing limit, used).
All read `kueue.x-k8s.io/v1beta2`, or v1beta1 where that is all the server has (Kueue before
0.15); where neither is served the watches idle (`list_watch.NotServed`):
nothing is exported and nothing is an error, and they look again after a while, since Kueue
may be installed later.

A waiting Workload's reason is Kueue's own: the reason of its `QuotaReserved=False` condition
(Kueue 0.17: `Pending`, with the flavor assigner's message; 0.19+: `WaitingForQuota`,
`ExceedsMaxQuota`, …), or "" while Kueue has not yet evaluated it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from kube_gpu_exporter.exporter.cluster import fields
from kube_gpu_exporter.exporter.cluster.kueue_workloads import parse_kueue_workload
from kube_gpu_exporter.exporter.cluster.quantities import parse_quantity
from kube_gpu_exporter.exporter.cluster.settings import ClusterSettings
from kube_gpu_exporter.exporter.kubernetes.served_version import ServedVersion

GROUP: Final = "kueue.x-k8s.io"
API_VERSIONS: Final = ("v1beta2", "v1beta1")  # the first the server serves
WORKLOADS, LOCAL_QUEUES, CLUSTER_QUEUES = "workloads", "localqueues", "clusterqueues"
RESOURCE_FLAVORS, COHORTS = "resourceflavors", "cohorts"


@dataclass(frozen=True)
class WaitingWorkload:
    """A Workload Kueue has not admitted that asks for GPUs."""

    namespace: str
    local_queue: str
    reason: str
    gpus: int
    created: float | None = None  # Unix time: the Workload's creation, when its Job queued


# (cluster_queue, namespace, local_queue, reason) → (workloads, GPUs asked, the oldest one's
# creation time or None)
PendingWorkloads = Mapping[tuple[str, str, str, str], tuple[int, int, float | None]]


def parse_workload(
    obj: Mapping[str, Any], settings: ClusterSettings
) -> tuple[str, WaitingWorkload | None] | None:
    """(namespace/name, the waiting workload), or None as the value for one that is
    admitted, finished or asks for no GPU (it is dropped). The waiting part of what
    kueue_workloads.py reads of every Workload."""
    parsed = parse_kueue_workload(obj, settings)
    if parsed is None:
        return None
    key, workload = parsed
    if workload is None or workload.admitted:
        return key, None
    return key, WaitingWorkload(
        workload.namespace,
        workload.local_queue,
        workload.quota_reason,
        workload.gpus,
        workload.created,
    )


@dataclass(frozen=True)
class FlavorQuota:
    """A ClusterQueue's quota of one GPU resource in one flavor: nominal, how much more it may
    borrow from its cohort (None: no limit set) and what admitted Workloads use (None until
    Kueue has counted it)."""

    flavor: str
    resource: str
    nominal: int
    borrowing_limit: int | None
    used: int | None


def parse_cluster_queue(
    obj: Mapping[str, Any], settings: ClusterSettings
) -> tuple[str, tuple[FlavorQuota, ...] | None] | None:
    """(name, its GPU quotas per flavor), None as the value when it has none."""
    name = fields.mapping(obj.get("metadata")).get("name")
    if not isinstance(name, str):
        return None
    used: dict[tuple[str, str], int] = {}
    for usage in fields.entries(fields.mapping(obj.get("status")).get("flavorsUsage")):
        for resource in fields.entries(usage.get("resources")):
            amount = parse_quantity(resource.get("total"), str(resource.get("name")))
            if amount is not None:
                used[(str(usage.get("name")), str(resource.get("name")))] = amount
    quotas = []
    for group in fields.entries(fields.mapping(obj.get("spec")).get("resourceGroups")):
        for flavor in fields.entries(group.get("flavors")):
            flavor_name = flavor.get("name")
            for resource in fields.entries(flavor.get("resources")):
                resource_name = resource.get("name")
                if not isinstance(flavor_name, str) or not isinstance(resource_name, str):
                    continue
                if not settings.is_gpu_resource(resource_name):
                    continue
                nominal = parse_quantity(resource.get("nominalQuota"), resource_name)
                if nominal is None:
                    continue
                limit = parse_quantity(resource.get("borrowingLimit"), resource_name)
                quotas.append(
                    FlavorQuota(
                        flavor_name,
                        resource_name,
                        nominal,
                        limit,
                        used.get((flavor_name, resource_name)),
                    )
                )
    return name, tuple(quotas) or None


def parse_local_queue(obj: Mapping[str, Any]) -> tuple[str, str | None] | None:
    """(namespace/name, the ClusterQueue it feeds)."""
    metadata = fields.mapping(obj.get("metadata"))
    namespace, name = metadata.get("namespace"), metadata.get("name")
    if not isinstance(namespace, str) or not isinstance(name, str):
        return None
    cluster_queue = fields.mapping(obj.get("spec")).get("clusterQueue")
    return f"{namespace}/{name}", cluster_queue if isinstance(cluster_queue, str) else None


def pending_workloads(
    workloads: Mapping[str, WaitingWorkload], local_queues: Mapping[str, str]
) -> PendingWorkloads:
    """Waiting workloads, the GPUs they ask and when the oldest was created, by cluster
    queue, local queue and reason; a LocalQueue not (yet) seen has cluster queue ""."""
    counts: Counter[tuple[str, str, str, str]] = Counter()
    gpus: Counter[tuple[str, str, str, str]] = Counter()
    oldest: dict[tuple[str, str, str, str], float] = {}
    for workload in workloads.values():
        queue = local_queues.get(f"{workload.namespace}/{workload.local_queue}", "")
        key = (queue, workload.namespace, workload.local_queue, workload.reason)
        counts[key] += 1
        gpus[key] += workload.gpus
        if workload.created is not None:
            oldest[key] = min(workload.created, oldest.get(key, workload.created))
    return {key: (count, gpus[key], oldest.get(key)) for key, count in counts.items()}


def served_version(lister: Callable[[str], Callable[..., Any]], resource: str) -> ServedVersion:
    """The list/watch request of one of Kueue's resources on the first version served."""
    return ServedVersion(
        [lister(f"/apis/{GROUP}/{version}/{resource}") for version in API_VERSIONS],
        API_VERSIONS,
        f"{GROUP} {resource} are not served (no Kueue in this cluster)",
    )
