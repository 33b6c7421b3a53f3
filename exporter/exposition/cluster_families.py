"""The cluster view as prometheus-client families: pending GPU pods by reason, capacity per
node and per GPU product, GPU quotas and the pods they refused, and the watches' health.

One build of the view (view.py) feeds every family; the pending pods are classified through
the view's cache, so a Job's replicas cost one classification. Series exist only for what
exists: a namespace with no pending GPU pod has no `kube_gpu_pending_seconds`.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client import Metric as Family
from prometheus_client.core import HistogramMetricFamily

from kube_gpu_exporter.exporter.catalog import cluster as k
from kube_gpu_exporter.exporter.cluster.capacity import node_capacity, product_capacity
from kube_gpu_exporter.exporter.cluster.classify import classify
from kube_gpu_exporter.exporter.cluster.kueue_view import KueueView
from kube_gpu_exporter.exporter.cluster.objects import Pod
from kube_gpu_exporter.exporter.cluster.quota_events import Series
from kube_gpu_exporter.exporter.cluster.transitions import BUCKETS, TransitionCounts
from kube_gpu_exporter.exporter.cluster.view import ClusterView
from kube_gpu_exporter.exporter.exposition.families import add, family

# Kueue's waiting Workloads: (cluster_queue, namespace, local_queue, reason) → (workloads,
# GPUs asked, the oldest's creation time), as cluster/kueue_view.py counts them
PendingWorkloads = Mapping[tuple[str, str, str, str], tuple[int, int, float | None]]
# a ClusterQueue's GPU quotas: (cluster_queue, flavor, resource) → (nominal, borrowing limit,
# used), None where not set or not yet counted
QueueQuotas = Mapping[tuple[str, str, str], tuple[int, int | None, int | None]]


@dataclass(frozen=True)
class WatchHealth:
    """One watched resource: whether its list/watch is current, its failures by kind, and
    how many objects the view holds of it."""

    up: bool
    errors_total: Mapping[str, int] = field(default_factory=dict)
    objects: int = 0


@dataclass(frozen=True, eq=False)
class ClusterState:
    """What one cycle of the cluster loop renders. `now` is Unix time (pending ages);
    `started` the cycle's `time.monotonic()` at its start: the build duration runs from it to
    when its family is built, last, so it covers building the view and classifying;
    `transitions` what the pod watch counted (scheduling waits, disruptions); `rejections`
    the pods refused per (namespace, quota, resource), from the events watch."""

    view: ClusterView
    watches: Mapping[str, WatchHealth]
    now: float
    started: float | None = None
    transitions: TransitionCounts | None = None
    rejections: Mapping[Series, int] | None = None
    kueue: KueueView | None = None  # the Kueue series' values (cluster/kueue_view.py)


def selected_product(view: ClusterView, pod: Pod) -> str:
    """The GPU product the pod selects (nodeSelector, or a required-affinity `In` of one
    value on the product label), "" when it takes any."""
    label = view.settings.product_label
    if label in pod.node_selector:
        return pod.node_selector[label]
    for term in pod.affinity or ():
        for requirement in term.match_expressions:
            one = len(requirement.values) == 1
            if requirement.key == label and requirement.operator == "In" and one:
                return requirement.values[0]
    return ""


def cluster_families(state: ClusterState) -> Iterator[Family]:
    yield from _pending(state)
    yield from _capacity(state.view)
    yield from _quotas(state.view)
    if state.rejections is not None:
        yield _rejections(state.rejections)
    if state.kueue is not None:
        yield from _workloads(state.kueue.pending, state.now)
        yield from _queue_quotas(state.kueue.quotas)
        yield from _kueue(state.kueue)
    if state.transitions is not None:
        yield from _transitions(state.transitions)
    yield from _health(state)


def _pending(state: ClusterState) -> Iterator[Family]:
    view = state.view
    counts: Counter[tuple[str, str, str, str]] = Counter()
    oldest: dict[tuple[str, str], float] = {}  # (namespace, reason) → age of the oldest
    # a pod Kueue's admission gate holds waits for its Workload: its reason is theirs
    kueue_reasons = state.kueue.pod_reasons if state.kueue is not None else {}
    for pod in view.pending_gpu_pods():
        reason = kueue_reasons.get((pod.namespace, pod.name)) or (
            classify(view, pod).pending_reason.value
        )
        product = selected_product(view, pod)
        for resource in view.gpu_requests(pod):
            counts[(pod.namespace, resource, product, reason)] += 1
        if pod.created_at is not None:
            age = max(0.0, state.now - pod.created_at)
            key = (pod.namespace, reason)
            oldest[key] = max(age, oldest.get(key, 0.0))
    pending = family(k.PENDING_PODS)
    for (namespace, resource, product, reason), count in sorted(counts.items()):
        labels = {"namespace": namespace, "resource": resource, "gpu_product": product}
        add(pending, {**labels, "reason": reason}, count)
    seconds = family(k.PENDING_SECONDS)
    for (namespace, reason), age in sorted(oldest.items()):
        add(seconds, {"namespace": namespace, "reason": reason}, age)
    yield pending
    yield seconds


def _capacity(view: ClusterView) -> Iterator[Family]:
    allocatable, allocated, free = (
        family(m) for m in (k.NODE_ALLOCATABLE, k.NODE_ALLOCATED, k.NODE_FREE)
    )
    for row in node_capacity(view):
        labels = {"node": row.node, "resource": row.resource, "gpu_product": row.product}
        add(allocatable, labels, row.allocatable)
        add(allocated, labels, row.allocated)
        add(free, labels, row.free)
    yield from (allocatable, allocated, free)
    largest, fragmentation = family(k.LARGEST_REQUEST), family(k.FRAGMENTATION)
    for product in product_capacity(view):
        labels = {"gpu_product": product.product, "resource": product.resource}
        add(largest, labels, product.largest_request)
        add(fragmentation, labels, product.fragmentation)
    yield largest
    yield fragmentation


def _quotas(view: ClusterView) -> Iterator[Family]:
    hard, used = family(k.QUOTA_HARD), family(k.QUOTA_USED)
    for namespace, quotas in sorted(view.quotas.items()):
        for quota in sorted(quotas, key=lambda q: q.name):
            for resource, amount in sorted(quota.hard.items()):
                labels = {"namespace": namespace, "quota": quota.name, "resource": resource}
                add(hard, labels, amount)
                # Absent until the quota controller has counted it: unknown, not 0 used.
                if resource in quota.used:
                    add(used, labels, quota.used[resource])
    yield hard
    yield used


def _rejections(totals: Mapping[Series, int]) -> Family:
    rejected = family(k.QUOTA_REJECTIONS)
    for (namespace, quota, resource), count in sorted(totals.items()):
        add(rejected, {"namespace": namespace, "quota": quota, "resource": resource}, count)
    return rejected


def _workloads(pending: PendingWorkloads, now: float) -> Iterator[Family]:
    workloads, gpus = family(k.PENDING_WORKLOADS), family(k.PENDING_WORKLOAD_GPUS)
    seconds = family(k.PENDING_WORKLOAD_SECONDS)
    for (cluster_queue, namespace, local_queue, reason), (count, asked, created) in sorted(
        pending.items()
    ):
        labels = {
            "cluster_queue": cluster_queue,
            "namespace": namespace,
            "local_queue": local_queue,
            "reason": reason,
        }
        add(workloads, labels, count)
        add(gpus, labels, asked)
        if created is not None:
            add(seconds, labels, max(0.0, now - created))
    yield workloads
    yield gpus
    yield seconds


def _queue_quotas(quotas: QueueQuotas) -> Iterator[Family]:
    nominal, limit, used = (
        family(m) for m in (k.QUEUE_NOMINAL, k.QUEUE_BORROWING_LIMIT, k.QUEUE_USED)
    )
    for (cluster_queue, flavor, resource), (amount, borrowable, counted) in sorted(quotas.items()):
        labels = {"cluster_queue": cluster_queue, "flavor": flavor, "resource": resource}
        add(nominal, labels, amount)
        if borrowable is not None:
            add(limit, labels, borrowable)
        if counted is not None:
            add(used, labels, counted)
    yield from (nominal, limit, used)


def _kueue(kueue: KueueView) -> Iterator[Family]:
    nodes = family(k.FLAVOR_NODES)
    for (flavor, resource), count in sorted(kueue.flavor_nodes.items()):
        add(nodes, {"flavor": flavor, "resource": resource}, count)
    info = family(k.QUEUE_INFO)
    for cluster_queue, cohort in sorted(kueue.queue_cohorts.items()):
        add(info, {"cluster_queue": cluster_queue, "cohort": cohort}, 1)
    admissions, preemptions = family(k.QUEUE_ADMISSIONS), family(k.QUEUE_PREEMPTIONS)
    for counter, counts in ((admissions, kueue.admissions), (preemptions, kueue.preemptions)):
        for cluster_queue, count in sorted(counts.items()):
            add(counter, {"cluster_queue": cluster_queue}, count)
    pods = family(k.QUEUE_POD_INFO)
    for namespace, pod, cluster_queue, local_queue in kueue.queue_pods:
        labels = {"namespace": namespace, "pod": pod}
        add(pods, {**labels, "cluster_queue": cluster_queue, "local_queue": local_queue}, 1)
    yield from (nodes, info, admissions, preemptions, pods)


def _transitions(counts: TransitionCounts) -> Iterator[Family]:
    waits = HistogramMetricFamily(
        k.SCHEDULING_WAIT.name, k.SCHEDULING_WAIT.help, labels=("namespace", "resource")
    )
    for (namespace, resource), histogram in sorted(counts.waits.items()):
        cumulative = list(itertools.accumulate(histogram.counts))
        bounds = [repr(b) for b in BUCKETS] + ["+Inf"]  # 60.0, as the client writes it
        waits.add_metric(
            [namespace, resource], list(zip(bounds, cumulative, strict=True)), histogram.total
        )
    yield waits
    disruptions = family(k.DISRUPTIONS)
    for (namespace, resource, reason), count in sorted(counts.disruptions.items()):
        labels = {"namespace": namespace, "resource": resource, "reason": reason}
        add(disruptions, labels, count)
    yield disruptions


def _health(state: ClusterState) -> Iterator[Family]:
    up, errors, objects = (family(m) for m in (k.WATCH_UP, k.WATCH_ERRORS, k.WATCHED_OBJECTS))
    for resource, health in sorted(state.watches.items()):
        add(up, {"resource": resource}, 1 if health.up else 0)
        add(objects, {"resource": resource}, health.objects)
        for kind, count in sorted(health.errors_total.items()):
            add(errors, {"resource": resource, "kind": kind}, count)
    duration = family(k.BUILD_DURATION)
    if state.started is not None:
        add(duration, {}, time.monotonic() - state.started)
    yield from (up, errors, objects, duration)
