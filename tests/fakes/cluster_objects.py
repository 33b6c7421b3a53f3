"""Nodes, pods and ResourceQuotas as the API server returns them, for the cluster view's tests.

Each builder returns the JSON dict the API would serve, with only the fields the view reads
plus the usual metadata, so the same objects feed the pure functions (through the parsers),
the fake API server and `explain -f` manifests.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
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
                "lastTransitionTime": CREATED,
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
            "uid": str(uuid.uuid4()),
            "creationTimestamp": CREATED,
        },
        "spec": spec,
        "status": status,
    }


def make_quota(
    name: str,
    namespace: str = "ml",
    *,
    hard: int = 8,
    used: int = 0,
    resource: str = "nvidia.com/gpu",
) -> dict[str, Any]:
    key = f"requests.{resource}"
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": name, "namespace": namespace, "uid": str(uuid.uuid4())},
        "spec": {"hard": {key: str(hard)}},
        "status": {"hard": {key: str(hard)}, "used": {key: str(used)}},
    }


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


@dataclass(frozen=True)
class Scenario:
    """A cluster and one pod in it (`subject`, Pending unless `manifest`), with what the
    classification and `explain` must say: the reason (None: it would schedule), the exit
    status and lines the output must contain."""

    name: str
    nodes: tuple[dict[str, Any], ...]
    subject: dict[str, Any]
    reason: str | None
    says: tuple[str, ...]
    bound: tuple[dict[str, Any], ...] = ()
    quotas: tuple[dict[str, Any], ...] = ()
    manifest: bool = False
    gpu_type_labels: tuple[str, ...] = ()

    @property
    def exit_status(self) -> int:
        return 0 if self.reason is None else 1


def _filled(node: str, gpus: int, name: str = "") -> dict[str, Any]:
    """A Running pod holding `gpus` GPUs of `node`."""
    return make_gpu_pod(name or f"holder-{node}", gpus, "batch", node=node)


def scenarios() -> list[Scenario]:
    """One cluster per reason (and one that fits), small enough to read."""
    three = tuple(make_node(f"gpu-{c}") for c in "abc")
    return [
        Scenario(
            "plenty",
            three,
            make_gpu_pod("train", 4),
            None,
            ("would schedule now", "fits on 3 nodes: gpu-a, gpu-b, gpu-c"),
        ),
        Scenario(
            "fragmented",
            three,
            make_gpu_pod("train", 2),
            "fragmented",
            ("gpu fit        FAIL", "3 nvidia.com/gpu free in total", "no node has 2"),
            bound=tuple(_filled(f"gpu-{c}", 7) for c in "abc"),
        ),
        Scenario(
            "tainted",
            (
                make_node("gpu-a"),
                make_node("gpu-b"),
                make_node("gpu-c", taints=(GPU_TAINT, INFERENCE_TAINT)),
            ),
            make_gpu_pod("train", 4),
            "taint_not_tolerated",
            ("taints         FAIL", "dedicated=inference:NoSchedule on gpu-c"),
            bound=(_filled("gpu-a", 8), _filled("gpu-b", 6)),
        ),
        Scenario(
            "gpu type by nodeSelector",
            (make_node("gpu-a"), make_node("gpu-b"), make_node("a100-a", product=A100)),
            make_gpu_pod("train", 2, node_selector={PRODUCT: A100}),
            "gpu_type_unavailable",
            ("gpu type       FAIL", f"{PRODUCT}={A100} (node: {H100}) on gpu-a, gpu-b"),
            bound=(_filled("a100-a", 8),),
        ),
        Scenario(
            "gpu type by affinity",
            (make_node("gpu-a"), make_node("a100-a", product=A100)),
            make_gpu_pod("train", 1, affinity_terms=[_product_in(A100)]),
            "gpu_type_unavailable",
            ("gpu type       FAIL", f"{PRODUCT} In ({A100}) (node: {H100})"),
            bound=(_filled("a100-a", 8),),
        ),
        Scenario(
            "gpu type by a custom label",
            (
                make_node("gpu-a", labels={"gpu-type": "h100"}),
                make_node("a100-a", product=A100, labels={"gpu-type": "a100"}),
            ),
            make_gpu_pod("train", 1, node_selector={"gpu-type": "a100"}),
            "gpu_type_unavailable",
            ("gpu type       FAIL", "gpu-type=a100 (node: h100) on gpu-a"),
            bound=(_filled("a100-a", 8),),
            gpu_type_labels=("gpu-type",),
        ),
        Scenario(
            "affinity",
            (make_node("gpu-a", labels={ZONE: "a"}), make_node("gpu-b", labels={ZONE: "b"})),
            make_gpu_pod("train", 2, node_selector={ZONE: "a"}),
            "affinity_unmatched",
            ("affinity       FAIL", f"{ZONE}=a (node: b) on gpu-b"),
            bound=(_filled("gpu-a", 8),),
        ),
        Scenario(
            "quota used up",
            three,
            as_manifest(make_gpu_pod("train", 2)),
            "quota_exceeded",
            ("quota          FAIL", "gpu-quota: nvidia.com/gpu 8 of 8 used, 0 left, 2 requested"),
            quotas=(make_quota("gpu-quota", hard=8, used=8),),
            manifest=True,
        ),
        Scenario(
            "device plugin advertises 0",
            (make_node("gpu-a", gpus=0), make_node("cpu-a", gpus=None, product=None, taints=())),
            make_gpu_pod("train", 1),
            "not_advertised",
            ("device plugin  FAIL", "no node advertises nvidia.com/gpu", "gpu-a advertises no GPU"),
        ),
        Scenario(
            "gated by Kueue",
            three,
            make_gpu_pod("train", 1, gates=["kueue.x-k8s.io/admission"]),
            "gated",
            ("gates          FAIL", "held by scheduling gates: kueue.x-k8s.io/admission"),
        ),
        Scenario(
            "nominated",
            three,
            make_gpu_pod("train", 8, nominated="gpu-a"),
            "awaiting_preemption",
            ("preemption     FAIL", "nominated to gpu-a"),
            bound=tuple(_filled(f"gpu-{c}", 8) for c in "abc"),
        ),
        Scenario(
            "MIG-only node",
            (make_node("mig-a", gpus=None, product=A100, allocatable={MIG: "7"}),),
            make_gpu_pod("train", 1),
            "not_advertised",
            ("device plugin  FAIL", "mig-a advertises only nvidia.com/mig-1g.10gb 7"),
        ),
        Scenario(
            "CPU does not fit",
            (make_node("gpu-a", cpu="8"),),
            make_gpu_pod("train", 1, cpu="4"),
            "other",
            ("cpu/memory     FAIL", "cpu 4 wanted, 2 free on gpu-a"),
            bound=(make_gpu_pod("web", 0, "web", node="gpu-a", cpu="6"),),
        ),
        Scenario(
            "insufficient",
            three,
            make_gpu_pod("train", 1),
            "insufficient_gpus",
            ("gpu fit        FAIL", "0 free on the nodes the pod may use"),
            bound=tuple(_filled(f"gpu-{c}", 8) for c in "abc"),
        ),
    ]


ZONE = "topology.kubernetes.io/zone"
MIG = "nvidia.com/mig-1g.10gb"
INFERENCE_TAINT = {"key": "dedicated", "value": "inference", "effect": "NoSchedule"}


def _product_in(*products: str) -> dict[str, Any]:
    return {"matchExpressions": [{"key": PRODUCT, "operator": "In", "values": list(products)}]}
