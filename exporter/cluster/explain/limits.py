"""What of a pod the scheduler weighs and `explain` does not judge, so that `-f` says so in
its verdict rather than a flat "would schedule".

The view evaluates taints, node selection and resources (placement.py). The scheduler also
filters on the pod's required inter-pod affinity and anti-affinity, hard topology spread
constraints, host ports and volumes, and for a pod that fits nowhere it may preempt pods of
lower priority. Each of these can only remove nodes the view counts (or, preemption, add
one), so they are named where they could change the verdict: the first four where the pod
fits, preemption where it does not.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final

from kube_gpu_exporter.exporter.cluster import fields
from kube_gpu_exporter.exporter.cluster.classify import Classification
from kube_gpu_exporter.exporter.cluster.objects import Pod
from kube_gpu_exporter.exporter.cluster.placement import Filter
from kube_gpu_exporter.exporter.cluster.quantities import PODS, add
from kube_gpu_exporter.exporter.cluster.view import ClusterView

REQUIRED: Final = "requiredDuringSchedulingIgnoredDuringExecution"
PREEMPTION: Final = "preemption"
# The filters preemption cannot lift: evicting pods frees resources, never a taint or a label.
_ACCESS: Final = frozenset({Filter.TAINTS, Filter.GPU_TYPE, Filter.AFFINITY})


def unchecked(pod: Mapping[str, Any], parsed: Pod) -> tuple[str, ...]:
    """The scheduler's filters the pod's spec engages that the view does not evaluate."""
    spec = fields.mapping(pod.get("spec"))
    affinity = fields.mapping(spec.get("affinity"))
    found = []
    for key, name in (("podAffinity", "pod affinity"), ("podAntiAffinity", "pod anti-affinity")):
        if fields.entries(fields.mapping(affinity.get(key)).get(REQUIRED)):
            found.append(name)
    spread = fields.entries(spec.get("topologySpreadConstraints"))
    if any(c.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule" for c in spread):
        found.append("topology spread")
    if any(port.get("hostPort") for port in _ports(spec)):
        found.append("host ports")
    volumes = fields.entries(spec.get("volumes"))
    if any("persistentVolumeClaim" in v or "ephemeral" in v for v in volumes):
        found.append("volumes")
    if parsed.has_claims:
        found.append("DRA claims")
    return tuple(found)


def _ports(spec: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for kind in ("containers", "initContainers"):
        for container in fields.entries(spec.get(kind)):
            yield from fields.entries(container.get("ports"))


def preemptible(
    view: ClusterView, pod: Mapping[str, Any], parsed: Pod, result: Classification
) -> tuple[str, ...]:
    """For a pod that fits nowhere: the nodes where it would fit once every pod of lower
    priority there were gone, as the scheduler's preemption tries (PodDisruptionBudgets and
    the choice among victims are not judged). A pod of unknown priority counts as lower."""
    spec = fields.mapping(pod.get("spec"))
    priority = parsed.priority
    if result.reason is None or priority is None or spec.get("preemptionPolicy") == "Never":
        return ()
    candidates = {c.node: c for c in result.nodes if not (c.failed & _ACCESS)}
    freed: dict[str, dict[str, int]] = {name: {} for name in candidates}
    for other in view.pods:
        lower = other.priority is None or other.priority < priority
        if lower and other.node_name in freed and not other.terminated:
            add(freed[other.node_name], {**other.requests, PODS: 1})
    found = []
    for name, check in candidates.items():
        free = view.nodes[name].free
        if freed[name] and all(
            free.get(r, 0) + freed[name].get(r, 0) >= n
            for r, n in {**parsed.requests, PODS: 1}.items()
            if r in view.nodes[name].node.allocatable or r != PODS
        ):
            found.append(check.node)
    return tuple(found)
