"""Kueue's ResourceFlavors, Cohorts and ClusterQueues (with their cohort), as the cluster
view holds them: pure parsers, each from one object's JSON, for the watches and `explain`.

A ResourceFlavor says where its Workloads' pods go: Kueue adds its `nodeLabels` to their
node selector and its `tolerations` to theirs when it admits them. So the nodes a flavor
can use are the nodes with those labels whose scheduling taints those tolerations cover
(`flavor_nodes`), and a taint named after the GPU resource counted: GPU nodes commonly carry
one (GKE's `nvidia.com/gpu`), and the pods asking for that resource tolerate it, written in
their template or added by the ExtendedResourceToleration admission plugin. A pod's other
tolerations are its own, not the flavor's, so a node tainted otherwise is not counted. A
flavor's `nodeTaints` are what Kueue assumes of its nodes, not what the scheduler reads, and
are not used. Both API versions spell these fields alike.

A ClusterQueue's cohort is `spec.cohortName` in v1beta2 and `spec.cohort` in v1beta1; a
Cohort object (optional: a cohort exists as soon as a queue names it) may name a parent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kube_gpu_exporter.exporter.cluster import fields
from kube_gpu_exporter.exporter.cluster.filters import untolerated
from kube_gpu_exporter.exporter.cluster.kueue import FlavorQuota, parse_cluster_queue
from kube_gpu_exporter.exporter.cluster.objects import NO_LABELS, Node, Toleration
from kube_gpu_exporter.exporter.cluster.settings import ClusterSettings


@dataclass(frozen=True)
class Flavor:
    """A ResourceFlavor: the labels it adds to its pods' node selector, the tolerations it
    adds to theirs."""

    name: str
    node_labels: Mapping[str, str] = field(default_factory=lambda: NO_LABELS, hash=False)
    tolerations: tuple[Toleration, ...] = ()

    def admits(self, node: Node, also: tuple[Toleration, ...] = ()) -> bool:
        """A pod of this flavor may be bound to `node`: the node has every label and no
        scheduling taint (NoSchedule, NoExecute, the cordon's) the tolerations (and `also`)
        leave."""
        labels = node.labels
        if any(labels.get(key) != value for key, value in self.node_labels.items()):
            return False
        return not untolerated(node, self.tolerations + also, running=False)


@dataclass(frozen=True)
class Queue:
    """A ClusterQueue with GPU quota: its cohort ("" when none) and its GPU quotas."""

    cohort: str
    quotas: tuple[FlavorQuota, ...]


def parse_flavor(obj: Mapping[str, Any]) -> tuple[str, Flavor] | None:
    """(name, the flavor) of a ResourceFlavor."""
    name = fields.text(fields.mapping(obj.get("metadata")).get("name"))
    if not name:
        return None
    spec = fields.mapping(obj.get("spec"))
    return name, Flavor(
        name, fields.string_map(spec.get("nodeLabels")), fields.tolerations(spec.get("tolerations"))
    )


def parse_cohort(obj: Mapping[str, Any]) -> tuple[str, str] | None:
    """(name, its parent cohort or "") of a Cohort."""
    name = fields.text(fields.mapping(obj.get("metadata")).get("name"))
    if not name:
        return None
    return name, fields.text(fields.mapping(obj.get("spec")).get("parentName"))


def parse_queue(
    obj: Mapping[str, Any], settings: ClusterSettings
) -> tuple[str, Queue | None] | None:
    """(name, the queue), None as the value for a ClusterQueue without GPU quota."""
    parsed = parse_cluster_queue(obj, settings)
    if parsed is None:
        return None
    name, quotas = parsed
    if quotas is None:
        return name, None
    spec = fields.mapping(obj.get("spec"))
    cohort = fields.text(spec.get("cohortName")) or fields.text(spec.get("cohort"))
    return name, Queue(cohort, quotas)


def flavor_nodes(
    flavors: Iterable[Flavor],
    nodes: Iterable[Node],
    resources: Mapping[str, Iterable[str]],
) -> dict[tuple[str, str], int]:
    """(flavor, GPU resource) → the nodes a pod of the flavor may be bound to that advertise
    the resource above 0. `resources`: per flavor name, the GPU resources to count (a flavor
    absent from it is not counted); a known 0 is kept (no node could ever take its pods)."""
    nodes = tuple(nodes)
    counts: dict[tuple[str, str], int] = {}
    for flavor in flavors:
        wanted = tuple(resources.get(flavor.name, ()))
        if not wanted:
            continue
        for resource in wanted:
            asking = (Toleration(key=resource, operator="Exists"),)  # the resource's own taint
            counts[(flavor.name, resource)] = sum(
                1
                for node in nodes
                if node.allocatable.get(resource, 0) > 0 and flavor.admits(node, asking)
            )
    return counts
