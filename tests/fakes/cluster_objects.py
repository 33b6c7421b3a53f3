"""Test scenarios of the cluster view: the cluster objects (built by the package's
demo/kube_api/cluster_objects.py, re-exported here for the tests) and the pending-pod
scenarios each test asserts the classification of.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kube_gpu_exporter.demo.kube_api.cluster_objects import (
    A100,
    CREATED,
    GPU_TAINT,
    GPU_TOLERATION,
    H100,
    PRODUCT,
    as_manifest,
    disrupted,
    make_gpu_pod,
    make_node,
    make_quota,
    quota_refusal,
    scheduled,
)

__all__ = [
    "A100",
    "CREATED",
    "GPU_TAINT",
    "GPU_TOLERATION",
    "H100",
    "INFERENCE_TAINT",
    "MIG",
    "PRODUCT",
    "ZONE",
    "Scenario",
    "as_manifest",
    "disrupted",
    "make_gpu_pod",
    "make_node",
    "make_quota",
    "quota_refusal",
    "scenarios",
    "scheduled",
]


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
