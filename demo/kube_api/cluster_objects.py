"""Nodes, pods, ResourceQuotas and quota refusals as the API server returns them: the demo's
cluster and the tests' are built with the same functions, from the fields the cluster view
reads plus the usual metadata, so the same objects feed the parsers, the API server and
`explain -f` manifests.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

PRODUCT = "nvidia.com/gpu.product"
H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-80GB"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
CREATED = "2024-05-01T10:00:00Z"


def make_node(
    name: str,
    gpus: int | None = 8,
    *,
    product: str | None = H100,
    resource: str = "nvidia.com/gpu",
    allocatable: Mapping[str, Any] | None = None,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (GPU_TAINT,),
    ready: bool = True,
    unschedulable: bool = False,
    cpu: str = "64",
    memory: str = "512Gi",
) -> dict[str, Any]:
    """A GPU node (8 H100s advertised as nvidia.com/gpu, tainted as the GPU Operator does);
    `gpus=None` leaves the resource out, `product=None` the product label."""
    node_labels = {"kubernetes.io/hostname": name, **(labels or {})}
    if product is not None:
        node_labels[PRODUCT] = product
        node_labels["nvidia.com/gpu.present"] = "true"
    resources: dict[str, Any] = {"cpu": cpu, "memory": memory, "pods": "110"}
    if gpus is not None:
        resources[resource] = str(gpus)
    resources.update(allocatable or {})
    spec: dict[str, Any] = {"taints": [dict(t) for t in taints]}
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": str(uuid.uuid4()), "labels": node_labels},
        "spec": spec,
        "status": {
            "capacity": dict(resources),
            "allocatable": resources,
            "conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": "True" if ready else "False"},
            ],
        },
    }


def make_gpu_pod(
    name: str,
    gpus: int = 1,
    namespace: str = "ml",
    *,
    node: str = "",
    phase: str | None = None,
    resource: str = "nvidia.com/gpu",
    cpu: str = "1",
    memory: str = "4Gi",
    tolerations: Sequence[Mapping[str, str]] = (GPU_TOLERATION,),
    node_selector: Mapping[str, str] | None = None,
    affinity_terms: Sequence[Mapping[str, Any]] | None = None,
    gates: Sequence[str] = (),
    nominated: str = "",
    limits_only: bool = False,
    uid: str | None = None,
    created: str = CREATED,
) -> dict[str, Any]:
    """A pod asking for `gpus` of `resource` (as a limit, and a request unless `limits_only`,
    as a manifest may); bound to `node` (Running) or Pending and unschedulable."""
    limits: dict[str, Any] = {resource: gpus} if gpus else {}
    requests: dict[str, Any] = {"cpu": cpu, "memory": memory}
    if not limits_only and gpus:
        requests[resource] = str(gpus)
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                "env": [{"name": "X", "value": "y" * 100}],
                "resources": {"requests": requests, "limits": limits},
            }
        ],
        "tolerations": [dict(t) for t in tolerations],
    }
    if node:
        spec["nodeName"] = node
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if affinity_terms is not None:
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [dict(t) for t in affinity_terms]
                }
            }
        }
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    status: dict[str, Any] = {"phase": phase or ("Running" if node else "Pending")}
    if not node:
        reason = "SchedulingGated" if gates else "Unschedulable"
        status["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": reason,
                "lastTransitionTime": created,
            }
        ]
    if nominated:
        status["nominatedNodeName"] = nominated
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or str(uuid.uuid4()),
            "creationTimestamp": created,
        },
        "spec": spec,
        "status": status,
    }


def make_quota(
    name: str,
    namespace: str = "ml",
    *,
    hard: int = 8,
    used: int | None = 0,
    resource: str = "nvidia.com/gpu",
) -> dict[str, Any]:
    """`used` None: a quota the ResourceQuota controller has not counted yet, which the API
    server holds with no status at all."""
    key = f"requests.{resource}"
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": name, "namespace": namespace, "uid": str(uuid.uuid4())},
        "spec": {"hard": {key: str(hard)}},
    }
    if used is not None:
        quota["status"] = {"hard": {key: str(hard)}, "used": {key: str(used)}}
    return quota


def scheduled(pod: Mapping[str, Any], node: str, at: str) -> dict[str, Any]:
    """`pod` bound to `node` (Running), its PodScheduled condition True since `at`."""
    bound = copy.deepcopy(dict(pod))
    bound["spec"]["nodeName"] = node
    bound["status"] = {
        "phase": "Running",
        "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": at}],
    }
    return bound


def disrupted(pod: Mapping[str, Any], reason: str) -> dict[str, Any]:
    """`pod` with a DisruptionTarget condition (True) for `reason`."""
    out = copy.deepcopy(dict(pod))
    condition = {"type": "DisruptionTarget", "status": "True", "reason": reason}
    out["status"].setdefault("conditions", []).append(condition)
    return out


def quota_refusal(
    quota: str, requested: Mapping[str, str], *, used: str = "8", pod: str = "train-7f9c-abcde"
) -> str:
    """kube-apiserver's refusal of a pod over quota, as its controller's FailedCreate event
    quotes it: `requested` maps each exceeded resource (as the quota names it) to the
    quantity asked for; each is `used` of a limit of `used`."""

    def listed(amounts: Mapping[str, str]) -> str:
        return ",".join(f"{name}={amount}" for name, amount in sorted(amounts.items()))

    limits = listed(dict.fromkeys(requested, used))
    return (
        f'Error creating: pods "{pod}" is forbidden: exceeded quota: {quota}, '
        f"requested: {listed(requested)}, used: {limits}, limited: {limits}"
    )


def as_manifest(pod: Mapping[str, Any]) -> dict[str, Any]:
    """A pod as a person writes it before submission: no status, uid or timestamps."""
    metadata = {k: v for k, v in pod["metadata"].items() if k in ("name", "namespace", "labels")}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod["spec"]}
