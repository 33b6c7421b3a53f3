"""Kueue's Workloads as the cluster view holds them: every one asking GPUs that has not
finished, admitted or not, with what its reason, its pods and its counters need.

A Workload is Kueue's record of one queued Job (or plain pod, or pod group): its pod sets'
templates and counts (`spec.podSets`), the LocalQueue it was queued in (`spec.queueName`),
its owners (the Job, or for plain pods the pods themselves, by `metadata.ownerReferences`),
and Kueue's verdicts as conditions: `QuotaReserved` (quota set aside in a flavor), `Admitted`
(quota reserved and every admission check passed: the Job is let go), `Evicted` (reason
`Preempted` when a higher-priority Workload took its quota), `Finished`. `status.admission`
names the ClusterQueue and, per pod set, the flavor chosen for each resource.

Each pod set's template is kept as a slim `Pod` (parse.py), so the classification of real
pods (classify.py) can judge where the pod set's pods would go. The parser is pure: the
watches call it per event, `explain` may call it on one object.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from kube_gpu_exporter.exporter.cluster import fields
from kube_gpu_exporter.exporter.cluster.objects import NO_LABELS, Pod
from kube_gpu_exporter.exporter.cluster.parse import parse_pod
from kube_gpu_exporter.exporter.cluster.settings import ClusterSettings

PREEMPTED = "Preempted"  # the Evicted condition's reason when Kueue preempted the Workload


@dataclass(frozen=True)
class PodSet:
    """One pod set: its name, how many pods, one of them as a slim pod (the template; named
    `<workload>-<pod set>`, in the Workload's namespace) and the GPU devices each asks."""

    name: str
    count: int
    pod: Pod
    gpus_each: int

    @property
    def gpus(self) -> int:
        return self.count * self.gpus_each


@dataclass(frozen=True)
class Workload:
    """A Workload asking GPUs, not finished.

    - `reserved`, `admitted`: its QuotaReserved and Admitted conditions are True;
    - `quota_reason`: QuotaReserved=False's reason as Kueue wrote it ("" while Kueue has not
      evaluated it); `admit_reason`: Admitted=False's reason (admission checks pending);
    - `cluster_queue`, `flavors`: from `status.admission` ("" and none until reserved):
      per pod set, the flavor of its GPU resource;
    - `owners`: the uids of its owner references (a Job's; a plain pod's own);
    - `admitted_at`, `preempted_at`: the transition times (Unix seconds) of Admitted=True
      and of Evicted=True with reason Preempted, None when not so.
    """

    namespace: str
    name: str
    local_queue: str
    pod_sets: tuple[PodSet, ...]
    owners: tuple[str, ...] = ()
    created: float | None = None
    reserved: bool = False
    admitted: bool = False
    quota_reason: str = ""
    admit_reason: str = ""
    cluster_queue: str = ""
    flavors: Mapping[str, str] = field(default_factory=lambda: NO_LABELS, hash=False)
    admitted_at: float | None = None
    preempted_at: float | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def gpus(self) -> int:
        """GPU devices asked: each pod set's count times its pod's GPU requests."""
        return sum(pod_set.gpus for pod_set in self.pod_sets)


def _condition(status: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    return fields.condition(status.get("conditions"), kind)


def _reason_if_false(condition: Mapping[str, Any]) -> str:
    return fields.text(condition.get("reason")) if condition.get("status") == "False" else ""


def _pod_sets(
    spec: Mapping[str, Any], namespace: str, name: str, settings: ClusterSettings
) -> tuple[PodSet, ...]:
    sets = []
    for pod_set in fields.entries(spec.get("podSets")):
        count, set_name = pod_set.get("count"), fields.text(pod_set.get("name"))
        template = fields.mapping(fields.mapping(pod_set.get("template")).get("spec"))
        # the pods Kueue lets go carry no admission gate: neither does their stand-in
        template = {k: v for k, v in template.items() if k != "schedulingGates"}
        pod = parse_pod({"metadata": {"name": f"{name}-{set_name}"}, "spec": template}, namespace)
        if pod is None or type(count) is not int or count <= 0:
            continue
        gpus = sum(settings.gpu_part(pod.requests).values())
        if gpus > 0:
            sets.append(PodSet(set_name, count, pod, gpus))
    return tuple(sets)


def _assigned_flavors(admission: Mapping[str, Any], settings: ClusterSettings) -> dict[str, str]:
    """Per pod set, the flavor Kueue assigned to its (first) GPU resource."""
    chosen = {}
    for assignment in fields.entries(admission.get("podSetAssignments")):
        for resource, flavor in sorted(fields.string_map(assignment.get("flavors")).items()):
            if settings.is_gpu_resource(resource):
                chosen[fields.text(assignment.get("name"))] = flavor
                break
    return chosen


def parse_kueue_workload(
    obj: Mapping[str, Any], settings: ClusterSettings
) -> tuple[str, Workload | None] | None:
    """(namespace/name, the workload), None as the value for one that has finished, asks
    for no GPU or names no LocalQueue (not held)."""
    metadata = fields.mapping(obj.get("metadata"))
    namespace, name = fields.text(metadata.get("namespace")), fields.text(metadata.get("name"))
    if not namespace or not name:
        return None
    key = f"{namespace}/{name}"
    spec, status = fields.mapping(obj.get("spec")), fields.mapping(obj.get("status"))
    queue = fields.text(spec.get("queueName"))
    if _condition(status, "Finished").get("status") == "True" or not queue:
        return key, None
    pod_sets = _pod_sets(spec, namespace, name, settings)
    if not pod_sets:
        return key, None
    reserved, admitted = (_condition(status, kind) for kind in ("QuotaReserved", "Admitted"))
    evicted = _condition(status, "Evicted")
    preempted = evicted.get("status") == "True" and evicted.get("reason") == PREEMPTED
    admission = fields.mapping(status.get("admission"))
    owners = tuple(
        fields.interned(owner.get("uid"))
        for owner in fields.entries(metadata.get("ownerReferences"))
        if fields.text(owner.get("uid"))
    )
    return key, Workload(
        namespace=fields.interned(namespace),
        name=name,
        local_queue=fields.interned(queue),
        pod_sets=pod_sets,
        owners=owners,
        created=fields.timestamp(metadata.get("creationTimestamp")),
        reserved=reserved.get("status") == "True",
        admitted=admitted.get("status") == "True",
        quota_reason=_reason_if_false(reserved),
        admit_reason=_reason_if_false(admitted),
        cluster_queue=fields.interned(admission.get("clusterQueue")),
        flavors=MappingProxyType(_assigned_flavors(admission, settings)),
        admitted_at=fields.timestamp(admitted.get("lastTransitionTime"))
        if admitted.get("status") == "True"
        else None,
        preempted_at=fields.timestamp(evicted.get("lastTransitionTime")) if preempted else None,
    )
