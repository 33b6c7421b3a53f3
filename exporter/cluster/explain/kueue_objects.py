"""`explain` for Kueue: Kueue's objects (v1beta2, or v1beta1 where that is what the server
serves) and a queued Job read from JSON into what kueue_quota.py judges. Pure.

A Job joins a queue by its `kueue.x-k8s.io/queue-name` label; Kueue makes one pod set of it,
`main`, of min(parallelism, completions) pods of its template. A Workload holds its pod
sets itself. The quota a queue uses is what its Workloads with QuotaReserved=True (and not
Finished) hold: their `status.admission`, per pod set the flavor of each resource and the
amount; the ClusterQueue's own `status.flavorsUsage` lags behind them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from kube_gpu_exporter.exporter.cluster import fields
from kube_gpu_exporter.exporter.cluster.explain.kueue_quota import (
    ClusterQueue,
    Flavor,
    Limit,
    PodSet,
    ResourceGroup,
    Usage,
)
from kube_gpu_exporter.exporter.cluster.objects import Node
from kube_gpu_exporter.exporter.cluster.parse import parse_pod
from kube_gpu_exporter.exporter.cluster.quantities import parse_quantity, parse_resources

QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL: Final = "kueue.x-k8s.io/priority-class"
MAIN: Final = "main"  # the one pod set Kueue makes of a batch Job
STATES: Final = ("QuotaReserved", "Admitted", "Evicted", "Preempted", "Finished")


def queue_name(obj: Mapping[str, Any]) -> str:
    """The LocalQueue a Job (or any object Kueue manages) names, "" for none."""
    metadata = fields.mapping(obj.get("metadata"))
    for where in ("labels", "annotations"):  # the annotation is the older form
        name = fields.mapping(metadata.get(where)).get(QUEUE_LABEL)
        if isinstance(name, str) and name:
            return name
    return ""


def parse_flavor(obj: Mapping[str, Any]) -> Flavor | None:
    name = fields.mapping(obj.get("metadata")).get("name")
    if not isinstance(name, str) or not name:
        return None
    spec = fields.mapping(obj.get("spec"))
    node = Node(
        name=name,
        labels=fields.string_map(spec.get("nodeLabels")),
        taints=fields.taints(spec.get("nodeTaints")),
    )
    raw = tuple(fields.entries(spec.get("tolerations")))
    return Flavor(name, node, fields.tolerations(list(raw)), raw)


def parse_cluster_queue(obj: Mapping[str, Any]) -> ClusterQueue | None:
    metadata, spec = fields.mapping(obj.get("metadata")), fields.mapping(obj.get("spec"))
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        return None
    groups = []
    for group in fields.entries(spec.get("resourceGroups")):
        covered = tuple(str(r) for r in group.get("coveredResources") or () if isinstance(r, str))
        flavors = []
        for flavor in fields.entries(group.get("flavors")):
            limits = {}
            for resource in fields.entries(flavor.get("resources")):
                resource_name = str(resource.get("name") or "")
                nominal = parse_quantity(resource.get("nominalQuota"), resource_name)
                if not resource_name or nominal is None:
                    continue
                limits[resource_name] = Limit(
                    nominal,
                    parse_quantity(resource.get("borrowingLimit"), resource_name),
                    parse_quantity(resource.get("lendingLimit"), resource_name),
                )
            flavors.append((str(flavor.get("name") or ""), limits))
        groups.append(ResourceGroup(covered, tuple(flavors)))
    cohort = spec.get("cohortName") or spec.get("cohort")  # v1beta2, v1beta1
    preemption = fields.mapping(spec.get("preemption"))
    borrow_within = fields.mapping(preemption.get("borrowWithinCohort")).get("policy")
    policies = {
        "withinClusterQueue": preemption.get("withinClusterQueue"),
        "reclaimWithinCohort": preemption.get("reclaimWithinCohort"),
        "borrowWithinCohort": borrow_within,
    }
    fungibility = fields.mapping(spec.get("flavorFungibility"))
    active = fields.condition(fields.mapping(obj.get("status")).get("conditions"), "Active")
    return ClusterQueue(
        name=name,
        cohort=cohort if isinstance(cohort, str) else "",
        groups=tuple(groups),
        when_can_borrow=str(fungibility.get("whenCanBorrow") or "MayStopSearch"),
        preempting=tuple(f"{k} {v}" for k, v in policies.items() if v not in (None, "Never")),
        active=active.get("status") != "False",
    )


def pod_sets_of_job(job: Mapping[str, Any]) -> tuple[PodSet, ...]:
    """The one pod set Kueue makes of a batch Job (Kueue's podsCount)."""
    spec = fields.mapping(job.get("spec"))
    parallelism = spec.get("parallelism")
    count = parallelism if isinstance(parallelism, int) else 1
    completions = spec.get("completions")
    if isinstance(completions, int) and completions < count:
        count = completions
    template = fields.mapping(spec.get("template"))
    return (_pod_set(MAIN, count, template, job),)


def pod_sets_of_workload(workload: Mapping[str, Any]) -> tuple[PodSet, ...]:
    found = []
    for pod_set in fields.entries(fields.mapping(workload.get("spec")).get("podSets")):
        count = pod_set.get("count")
        name = pod_set.get("name")
        template = fields.mapping(pod_set.get("template"))
        found.append(
            _pod_set(
                name if isinstance(name, str) else MAIN,
                count if isinstance(count, int) else 1,
                template,
                workload,
            )
        )
    return tuple(found)


def _pod_set(
    name: str, count: int, template: Mapping[str, Any], owner: Mapping[str, Any]
) -> PodSet:
    metadata = fields.mapping(owner.get("metadata"))
    pod = parse_pod(
        {
            "metadata": {
                "name": fields.text(metadata.get("name")) or "manifest",
                "namespace": fields.text(metadata.get("namespace")) or "default",
            },
            "spec": fields.mapping(template.get("spec")),
        }
    )
    assert pod is not None  # it has a name and a namespace
    return PodSet(name, max(0, count), pod)


def usage_of(workloads: list[Mapping[str, Any]], skip: str = "") -> Usage:
    """The quota each (cluster queue, flavor, resource) holds for the Workloads Kueue has
    reserved quota for; `skip`: a Workload's namespace/name left out (the one judged)."""
    usage: dict[tuple[str, str, str], int] = {}
    for workload in workloads:
        metadata = fields.mapping(workload.get("metadata"))
        if f"{metadata.get('namespace')}/{metadata.get('name')}" == skip:
            continue
        state = workload_state(workload)
        if not state.holds_quota:
            continue
        admission = fields.mapping(fields.mapping(workload.get("status")).get("admission"))
        queue = str(admission.get("clusterQueue") or "")
        for assigned in fields.entries(admission.get("podSetAssignments")):
            flavors = fields.string_map(assigned.get("flavors"))
            for resource, amount in parse_resources(assigned.get("resourceUsage")).items():
                key = (queue, flavors.get(resource, ""), resource)
                usage[key] = usage.get(key, 0) + amount
    return usage


@dataclass(frozen=True)
class Condition:
    status: str
    reason: str
    message: str


@dataclass(frozen=True)
class WorkloadState:
    """What Kueue says of a Workload: its conditions by type, and where it was admitted."""

    namespace: str
    name: str
    queue: str = ""
    conditions: Mapping[str, Condition] = field(default_factory=dict)
    cluster_queue: str = ""  # status.admission's
    flavors: tuple[Mapping[str, str], ...] = ()  # per pod set, resource → flavor
    owner_uids: tuple[str, ...] = ()

    def has(self, kind: str) -> bool:
        condition = self.conditions.get(kind)
        return condition is not None and condition.status == "True"

    @property
    def holds_quota(self) -> bool:
        return self.has("QuotaReserved") and not self.has("Finished")


def workload_state(workload: Mapping[str, Any]) -> WorkloadState:
    metadata = fields.mapping(workload.get("metadata"))
    status = fields.mapping(workload.get("status"))
    conditions = {}
    for condition in fields.entries(status.get("conditions")):
        kind = condition.get("type")
        if isinstance(kind, str):
            conditions[kind] = Condition(
                fields.text(condition.get("status")),
                fields.text(condition.get("reason")),
                fields.text(condition.get("message")),
            )
    admission = fields.mapping(status.get("admission"))
    return WorkloadState(
        namespace=fields.text(metadata.get("namespace")),
        name=fields.text(metadata.get("name")),
        queue=fields.text(fields.mapping(workload.get("spec")).get("queueName")),
        conditions=conditions,
        cluster_queue=fields.text(admission.get("clusterQueue")),
        flavors=tuple(
            fields.string_map(a.get("flavors"))
            for a in fields.entries(admission.get("podSetAssignments"))
        ),
        owner_uids=tuple(
            fields.text(o.get("uid")) for o in fields.entries(metadata.get("ownerReferences"))
        ),
    )


def with_flavor(template: Mapping[str, Any], flavor: Flavor) -> Mapping[str, Any]:
    """A pod template's pod as Kueue lets it go in `flavor`: the flavor's node labels added to
    its nodeSelector and its tolerations to the pod's (what Kueue writes into the Job)."""
    spec = dict(fields.mapping(template.get("spec")))
    if flavor.node.labels:
        spec["nodeSelector"] = {**fields.string_map(spec.get("nodeSelector")), **flavor.node.labels}
    if flavor.raw_tolerations:
        spec["tolerations"] = [*fields.entries(spec.get("tolerations")), *flavor.raw_tolerations]
    return {**template, "spec": spec}
