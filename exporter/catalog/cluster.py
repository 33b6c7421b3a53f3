"""The cluster view's metrics: what `kube-gpu-exporter cluster` serves, one process per
cluster, from its watches of nodes, pods and ResourceQuotas.

They answer "why does my GPU pod wait?" where the node exporter cannot: pending GPU pods by
reason (classify.py's precedence), how long the oldest has waited, free devices per node as
the scheduler counts them, the largest request that could schedule now per GPU product and
how fragmented the free devices are, and the namespaces' GPU quotas. The `kube_gpu_` prefix
(not `kube_gpu_exporter_`) marks cluster-scoped facts, as kube-state-metrics' `kube_` does;
the cluster process's own health is `kube_gpu_cluster_*`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

from kube_gpu_exporter.exporter.catalog.metric import Metric, MetricType, Scope


class Reason(StrEnum):
    """Why a GPU pod waits, broadly in the precedence the classification applies (the first
    that holds wins; classify.py has the exact order — a device plugin down on another node
    ranks after a node that one filter keeps out, as the real scheduler's verdicts showed).
    The values are `kube_gpu_pending_pods`' `reason` label — the alerts and
    panels select on them — except `quota_exceeded`, which only `explain` reports for a pod
    not yet created (a created pod's quota was charged when it was admitted)."""

    GATED = "gated"
    AWAITING_PREEMPTION = "awaiting_preemption"
    QUOTA_EXCEEDED = "quota_exceeded"
    NOT_ADVERTISED = "not_advertised"
    FRAGMENTED = "fragmented"
    TAINT_NOT_TOLERATED = "taint_not_tolerated"
    GPU_TYPE_UNAVAILABLE = "gpu_type_unavailable"
    AFFINITY_UNMATCHED = "affinity_unmatched"
    INSUFFICIENT_GPUS = "insufficient_gpus"
    OTHER = "other"


# The reasons a Pending pod can have (the `reason` label's values), in precedence order.
PENDING_REASONS: Final = tuple(r for r in Reason if r is not Reason.QUOTA_EXCEEDED)
# `kube_gpu_pod_disruptions_total`'s `reason` values (from the DisruptionTarget condition).
EVICTED, PREEMPTED, TAINT_MANAGER, NODE_LOST, KUBELET, DISRUPTED_OTHER = (
    "evicted",
    "preempted",
    "taint_manager",
    "node_lost",
    "kubelet",
    "other",
)
DISRUPTION_REASONS: Final = (EVICTED, PREEMPTED, TAINT_MANAGER, NODE_LOST, KUBELET, DISRUPTED_OTHER)

G, C, H = MetricType.GAUGE, MetricType.COUNTER, MetricType.HISTOGRAM
K = Scope.CLUSTER
PRODUCT_LABELS = ("gpu_product", "resource")
NODE_LABELS = ("node", "resource", "gpu_product")

PENDING_PODS = Metric(
    "kube_gpu_pending_pods",
    G,
    "",
    "GPU pods waiting for the scheduler, by the first reason that holds ("
    + ", ".join(PENDING_REASONS)
    + "); a pod Kueue's admission gate holds, by its Workload's reason.",
    K,
    ("namespace", "resource", "gpu_product", "reason"),
)
PENDING_SECONDS = Metric(
    "kube_gpu_pending_seconds",
    G,
    "seconds",
    "Age of the oldest GPU pod of the namespace that waits for the scheduler, per reason "
    "(max by namespace: the oldest of all).",
    K,
    ("namespace", "reason"),
)
NODE_ALLOCATABLE = Metric(
    "kube_gpu_node_allocatable_devices",
    G,
    "",
    "GPU devices the node advertises as allocatable for the resource.",
    K,
    NODE_LABELS,
)
NODE_ALLOCATED = Metric(
    "kube_gpu_node_allocated_devices",
    G,
    "",
    "GPU devices the requests of the node's bound, not ended pods take.",
    K,
    NODE_LABELS,
)
NODE_FREE = Metric(
    "kube_gpu_node_free_devices",
    G,
    "",
    "GPU devices of the node no bound pod requests (allocatable minus allocated, at least 0).",
    K,
    NODE_LABELS,
)
LARGEST_REQUEST = Metric(
    "kube_gpu_largest_schedulable_request",
    G,
    "",
    "The most devices of the resource one standard GPU pod could get now: the largest free "
    "block on a Ready, schedulable node whose taints it tolerates and that has CPU and memory "
    "left.",
    K,
    PRODUCT_LABELS,
)
FRAGMENTATION = Metric(
    "kube_gpu_fragmentation_ratio",
    G,
    "ratio",
    "1 - largest free block / total free devices on the eligible nodes; 0 when nothing is "
    "free or all of it sits on one node.",
    K,
    PRODUCT_LABELS,
)
QUOTA_HARD = Metric(
    "kube_gpu_quota_hard",
    G,
    "",
    "A ResourceQuota's limit on a GPU resource's requests.",
    K,
    ("namespace", "quota", "resource"),
)
QUOTA_USED = Metric(
    "kube_gpu_quota_used",
    G,
    "",
    "What the namespace's pods request of a GPU resource, as the ResourceQuota counts it.",
    K,
    ("namespace", "quota", "resource"),
)
QUOTA_REJECTIONS = Metric(
    "kube_gpu_quota_rejected_pods_total",
    C,
    "",
    "Pods a controller could not create because a ResourceQuota on a GPU resource was "
    "exceeded (FailedCreate events of Jobs, ReplicaSets, StatefulSets, counted with each "
    "event's repeats): the pods that never became pending.",
    K,
    ("namespace", "quota", "resource"),
)
KUEUE_LABELS = ("cluster_queue", "namespace", "local_queue", "reason")
PENDING_WORKLOADS = Metric(
    "kube_gpu_pending_workloads",
    G,
    "",
    "Kueue Workloads asking for GPUs that Kueue has not admitted (their Jobs are suspended: "
    "no pods yet), by ClusterQueue, LocalQueue and Kueue's QuotaReserved=False reason "
    '("" until Kueue has evaluated one).',
    K,
    KUEUE_LABELS,
)
PENDING_WORKLOAD_GPUS = Metric(
    "kube_gpu_pending_workload_gpus",
    G,
    "",
    "GPU devices those waiting Kueue Workloads ask for (pod-set count times each pod's GPU "
    "requests, all GPU resources together).",
    K,
    KUEUE_LABELS,
)
PENDING_WORKLOAD_SECONDS = Metric(
    "kube_gpu_pending_workload_seconds",
    G,
    "seconds",
    "Age of the oldest of those waiting Kueue Workloads (max by cluster_queue: the oldest "
    "wait of the queue).",
    K,
    KUEUE_LABELS,
)
QUEUE_QUOTA_LABELS = ("cluster_queue", "flavor", "resource")
QUEUE_NOMINAL = Metric(
    "kube_gpu_queue_nominal_quota",
    G,
    "",
    "A Kueue ClusterQueue's nominal quota of a GPU resource in a ResourceFlavor.",
    K,
    QUEUE_QUOTA_LABELS,
)
QUEUE_BORROWING_LIMIT = Metric(
    "kube_gpu_queue_borrowing_limit",
    G,
    "",
    "How much more of it the ClusterQueue may borrow from its cohort (absent: no limit).",
    K,
    QUEUE_QUOTA_LABELS,
)
QUEUE_USED = Metric(
    "kube_gpu_queue_used_quota",
    G,
    "",
    "What the ClusterQueue's admitted Workloads use of it, borrowed included, as Kueue counts "
    "it (its status.flavorsUsage).",
    K,
    QUEUE_QUOTA_LABELS,
)
FLAVOR_NODES = Metric(
    "kube_gpu_flavor_nodes",
    G,
    "",
    "Nodes a Kueue ResourceFlavor's pods could be bound to (its node labels, no scheduling "
    "taint its tolerations leave) that advertise the GPU resource above 0; 0: none ever could.",
    K,
    ("flavor", "resource"),
)
QUEUE_INFO = Metric(
    "kube_gpu_queue_info",
    G,
    "",
    'A Kueue ClusterQueue with GPU quota and its cohort ("" when none); always 1.',
    K,
    ("cluster_queue", "cohort"),
)
QUEUE_ADMISSIONS = Metric(
    "kube_gpu_queue_admissions_total",
    C,
    "",
    "GPU-asking Kueue Workloads this process saw admitted to the ClusterQueue since it started "
    "(Admitted=True transitions).",
    K,
    ("cluster_queue",),
)
QUEUE_PREEMPTIONS = Metric(
    "kube_gpu_queue_preemptions_total",
    C,
    "",
    "GPU-asking Kueue Workloads of the ClusterQueue this process saw evicted by preemption "
    "since it started (Evicted=True, reason Preempted).",
    K,
    ("cluster_queue",),
)
QUEUE_POD_INFO = Metric(
    "kube_gpu_queue_pod_info",
    G,
    "",
    "A GPU pod, not ended, of a Workload Kueue admitted, with the queues it was admitted "
    "through; always 1 (join it to the pod's GPU usage).",
    K,
    ("namespace", "pod", "cluster_queue", "local_queue"),
)
SCHEDULING_WAIT = Metric(
    "kube_gpu_scheduling_wait_seconds",
    H,
    "seconds",
    "How long GPU pods waited to be scheduled (PodScheduled's transition minus creation), "
    "observed when a watched pod goes from pending to bound.",
    K,
    ("namespace", "resource"),
)
DISRUPTIONS = Metric(
    "kube_gpu_pod_disruptions_total",
    C,
    "",
    "GPU pods disrupted, once per pod, by the DisruptionTarget condition's reason ("
    + ", ".join(DISRUPTION_REASONS)
    + ").",
    K,
    ("namespace", "resource", "reason"),
)
WATCH_UP = Metric(
    "kube_gpu_cluster_watch_up",
    G,
    "",
    "1 while the list/watch of the resource (nodes, pods, resourcequotas, events) is "
    "current, 0 while it fails and the view is built from its last objects.",
    K,
    ("resource",),
)
WATCH_ERRORS = Metric(
    "kube_gpu_cluster_watch_errors_total",
    C,
    "",
    "Failed lists and watches of the resource, by kind (connection, timeout, gone, "
    "server_error, other).",
    K,
    ("resource", "kind"),
)
BUILD_DURATION = Metric(
    "kube_gpu_cluster_build_duration_seconds",
    G,
    "seconds",
    "Wall time of building the view and classifying its pending pods, this cycle.",
    K,
)
WATCHED_OBJECTS = Metric(
    "kube_gpu_cluster_watched_objects",
    G,
    "",
    "Objects of the resource the view holds (pods: those not ended).",
    K,
    ("resource",),
)

CLUSTER_METRICS: tuple[Metric, ...] = (
    PENDING_PODS,
    PENDING_SECONDS,
    NODE_ALLOCATABLE,
    NODE_ALLOCATED,
    NODE_FREE,
    LARGEST_REQUEST,
    FRAGMENTATION,
    QUOTA_HARD,
    QUOTA_USED,
    QUOTA_REJECTIONS,
    PENDING_WORKLOADS,
    PENDING_WORKLOAD_GPUS,
    PENDING_WORKLOAD_SECONDS,
    QUEUE_NOMINAL,
    QUEUE_BORROWING_LIMIT,
    QUEUE_USED,
    FLAVOR_NODES,
    QUEUE_INFO,
    QUEUE_ADMISSIONS,
    QUEUE_PREEMPTIONS,
    QUEUE_POD_INFO,
    SCHEDULING_WAIT,
    DISRUPTIONS,
    WATCH_UP,
    WATCH_ERRORS,
    BUILD_DURATION,
    WATCHED_OBJECTS,
)
