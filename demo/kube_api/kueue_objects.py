"""Kueue's objects (kueue.x-k8s.io/v1beta2) as the API server returns them, with the fields the
cluster view reads: ResourceFlavors, ClusterQueues with GPU quota per flavor, LocalQueues and
Workloads. The demo's queued Job and the dashboards' test cluster are built with these, so the
Kueue series they show come from objects shaped as Kueue writes them.

A Workload is what Kueue makes of a queued Job: while Kueue has not reserved quota for it the
Job stays suspended (no pods) and the Workload carries `QuotaReserved=False` with the flavor
assigner's reason and message; once admitted, `status.admission` names its ClusterQueue and
flavor and `Admitted=True` its time.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from kube_gpu_exporter.demo.kube_api.cluster_objects import CREATED, GPU_TOLERATION

API_VERSION = "kueue.x-k8s.io/v1beta2"
GPU = "nvidia.com/gpu"
# (flavor, resource, nominal quota, borrowing limit or None for none)
Quota = tuple[str, str, int, int | None]


def _metadata(name: str, namespace: str = "", created: str = CREATED) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "uid": str(uuid.uuid4()), "creationTimestamp": created}
    if namespace:
        meta["namespace"] = namespace
    return meta


def make_resource_flavor(
    name: str,
    node_labels: Mapping[str, str] | None = None,
    tolerations: Sequence[Mapping[str, str]] = (GPU_TOLERATION,),
) -> dict[str, Any]:
    """A ResourceFlavor: its workloads go to nodes with all of `node_labels`."""
    spec: dict[str, Any] = {"nodeLabels": dict(node_labels or {})}
    if tolerations:
        spec["tolerations"] = [dict(t) for t in tolerations]
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceFlavor",
        "metadata": _metadata(name),
        "spec": spec,
    }


def make_cluster_queue(
    name: str,
    quotas: Sequence[Quota],
    *,
    used: Mapping[tuple[str, str], int] | None = None,
    cohort: str = "",
) -> dict[str, Any]:
    """A ClusterQueue with one resource group of `quotas`' flavors; `used` (flavor,
    resource → amount) is its status.flavorsUsage as Kueue counts it (None: not counted)."""
    flavors: dict[str, list[dict[str, Any]]] = {}
    for flavor, resource, nominal, limit in quotas:
        entry: dict[str, Any] = {"name": resource, "nominalQuota": str(nominal)}
        if limit is not None:
            entry["borrowingLimit"] = str(limit)
        flavors.setdefault(flavor, []).append(entry)
    resources = sorted({resource for _, resource, _, _ in quotas})
    group = {
        "coveredResources": resources,
        "flavors": [{"name": f, "resources": r} for f, r in flavors.items()],
    }
    spec: dict[str, Any] = {"namespaceSelector": {}, "resourceGroups": [group]}
    if cohort:
        spec["cohort"] = cohort
    queue: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "ClusterQueue",
        "metadata": _metadata(name),
        "spec": spec,
    }
    if used is not None:
        usage: dict[str, list[dict[str, str]]] = {}
        for (flavor, resource), amount in used.items():
            usage.setdefault(flavor, []).append({"name": resource, "total": str(amount)})
        queue["status"] = {"flavorsUsage": [{"name": f, "resources": r} for f, r in usage.items()]}
    return queue


def make_local_queue(name: str, namespace: str, cluster_queue: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "LocalQueue",
        "metadata": _metadata(name, namespace),
        "spec": {"clusterQueue": cluster_queue},
    }


def make_workload(
    name: str,
    namespace: str,
    local_queue: str,
    *,
    pods: int = 1,
    gpus_each: int = 1,
    created: str = CREATED,
    waiting: tuple[str, str] | None = ("Pending", ""),
    admitted: tuple[str, str, str] | None = None,
    owner: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """A Workload of one pod set (`pods` pods of `gpus_each` GPUs) queued in `local_queue`.
    `waiting`: Kueue's QuotaReserved=False (reason, message); `admitted`: (ClusterQueue,
    flavor, time) of its admission instead; `owner`: its Job's (name, uid)."""
    container = {
        "name": "main",
        "image": "nvcr.io/nvidia/pytorch:24.05-py3",
        "resources": {"requests": {GPU: str(gpus_each)}, "limits": {GPU: str(gpus_each)}},
    }
    template = {"spec": {"containers": [container], "tolerations": [dict(GPU_TOLERATION)]}}
    metadata = _metadata(name, namespace, created)
    if owner is not None:
        job, uid = owner
        metadata["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": uid, "controller": True}
        ]
    status: dict[str, Any] = {"conditions": []}
    if waiting is not None:
        reason, message = waiting
        status["conditions"].append(
            {
                "type": "QuotaReserved",
                "status": "False",
                "reason": reason,
                "message": message,
                "lastTransitionTime": created,
            }
        )
    if admitted is not None:
        cluster_queue, flavor, at = admitted
        status["admission"] = {
            "clusterQueue": cluster_queue,
            "podSetAssignments": [{"name": "main", "flavors": {GPU: flavor}, "count": pods}],
        }
        status["conditions"] += [
            {"type": kind, "status": "True", "reason": kind, "lastTransitionTime": at}
            for kind in ("QuotaReserved", "Admitted")
        ]
    return {
        "apiVersion": API_VERSION,
        "kind": "Workload",
        "metadata": metadata,
        "spec": {
            "queueName": local_queue,
            "podSets": [{"name": "main", "count": pods, "template": template}],
        },
        "status": status,
    }
