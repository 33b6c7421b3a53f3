"""`explain` for Kueue: the verdict on a queued Job or Workload: would Kueue reserve quota for
it now (kueue_quota.py's flavor assignment on the usage the Workloads hold), and would its
pods then fit nodes of the flavor (explain's own node check, on the pod as Kueue lets it go:
the flavor's node labels and tolerations added, put through the API server's dry run).

Kueue admits on quota alone: a Workload it admits may still have pods the scheduler cannot
place, which is why both halves are judged. All `count` pods must fit: each node that passes
every filter takes as many as its free GPUs hold.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kube_gpu_exporter.exporter.cluster.classify import Classification, classify
from kube_gpu_exporter.exporter.cluster.explain.admission import admit
from kube_gpu_exporter.exporter.cluster.explain.api import ApiReader
from kube_gpu_exporter.exporter.cluster.explain.kueue_api import KueueRead
from kube_gpu_exporter.exporter.cluster.explain.kueue_objects import usage_of, with_flavor
from kube_gpu_exporter.exporter.cluster.explain.kueue_quota import (
    Assignment,
    ClusterQueue,
    PodSet,
    Room,
    assign,
    room,
)
from kube_gpu_exporter.exporter.cluster.objects import Pod
from kube_gpu_exporter.exporter.cluster.parse import parse_pod
from kube_gpu_exporter.exporter.cluster.settings import ClusterSettings
from kube_gpu_exporter.exporter.cluster.view import ClusterView

LIMITS = (
    "preemption",
    "fair sharing",
    "Cohort objects' own quotas",
    "partial admission",
    "admission checks",
    "topology-aware scheduling",
)


@dataclass(frozen=True)
class NodeFit:
    """One pod set against the nodes of its flavor: explain's classification of one pod, and
    how many of the `count` pods the fitting nodes hold (`refusal`: the dry run's)."""

    pod: Pod | None
    result: Classification | None
    count: int
    placeable: int
    refusal: str = ""

    @property
    def fits(self) -> bool:
        return not self.refusal and self.placeable >= self.count


@dataclass(frozen=True)
class KueueVerdict:
    cluster_queue: ClusterQueue | None
    assignment: Assignment
    rooms: Mapping[tuple[str, str], Room]  # (flavor, resource) → the queue's room
    fits: tuple[NodeFit, ...] = ()
    admitted: bool = False  # Kueue has already admitted it (not a prediction)

    @property
    def quota(self) -> bool:
        return self.admitted or self.assignment.fits

    @property
    def schedules(self) -> bool:
        return self.quota and bool(self.fits) and all(f.fits for f in self.fits)

    @property
    def stated(self) -> tuple[str, ...]:
        """The limits that could change this verdict: preemption where the queue may preempt
        and the Workload does not fit (else nothing is weighed that is not modelled)."""
        cq = self.cluster_queue
        if cq is not None and cq.preempting and not self.quota:
            return ("preemption",)
        return ()


def judge(
    read: KueueRead,
    local_queue: str,
    pod_sets: Sequence[PodSet],
    skip: str = "",
) -> KueueVerdict:
    """The quota half: which ClusterQueue, its room per flavor, Kueue's assignment now."""
    cq_name = str(((read.local_queue or {}).get("spec") or {}).get("clusterQueue") or "")
    cq = read.queues.get(cq_name)
    if read.local_queue is None:
        return KueueVerdict(None, Assignment(message=f"LocalQueue {local_queue} doesn't exist"), {})
    if cq is None:
        return KueueVerdict(None, Assignment(message=f"ClusterQueue {cq_name} doesn't exist"), {})
    usage = usage_of(read.workloads, skip)
    rooms = {
        (flavor, resource): room(cq, read.queues, usage, flavor, resource)
        for group in cq.groups
        for flavor, limits in group.flavors
        for resource in limits
    }
    return KueueVerdict(cq, assign(pod_sets, cq, read.queues, read.flavors, usage), rooms)


def node_fits(
    reader: ApiReader,
    view: ClusterView,
    read: KueueRead,
    templates: Sequence[Mapping[str, Any]],
    pod_sets: Sequence[PodSet],
    flavors: Sequence[Mapping[str, str]],
) -> tuple[NodeFit, ...]:
    """Each pod set's pod, in the flavor Kueue gives (or would give) it, against the nodes."""
    found = []
    for template, pod_set, chosen in zip(templates, pod_sets, flavors, strict=False):
        flavored: Mapping[str, Any] = template
        for name in dict.fromkeys(chosen.values()):
            if name in read.flavors:
                flavored = with_flavor(flavored, read.flavors[name])
        manifest = {
            **flavored,
            "metadata": {"name": pod_set.pod.name, "namespace": pod_set.pod.namespace},
            "status": {},
        }
        admission = admit(reader, manifest, f"pod set {pod_set.name}")
        if admission.refusal:
            found.append(NodeFit(None, None, pod_set.count, 0, admission.refusal))
            continue
        pod = parse_pod(admission.pod or manifest) or pod_set.pod
        result = classify(view, pod, admitted=admission.pod is not None)
        found.append(NodeFit(pod, result, pod_set.count, placeable(result, view.settings)))
    return tuple(found)


def placeable(result: Classification, settings: ClusterSettings) -> int:
    """How many such pods the nodes that pass every filter hold at once (by free GPUs; a pod
    asking for no GPU counts as fitting wherever one does)."""
    if result.reason is not None:
        return 0
    total = 0
    for check in result.nodes:
        if check.node not in result.fits:
            continue
        asked = {r: n for r, n in check.gpu_requested.items() if n > 0}
        if not asked:
            return 1 << 30
        total += min(check.gpu_free.get(r, 0) // n for r, n in asked.items())
    return total
