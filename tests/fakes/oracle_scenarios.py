"""Seeded random GPU clusters for the scheduler-as-oracle test: per scenario a few Node
objects, the pods already bound to them, maybe a GPU ResourceQuota, and one candidate pod
for the real kube-scheduler to judge.

Many scenarios share one control plane. Each has its own namespace and nodes, and its
candidate is pinned to its own nodes by `matchFields metadata.name In [node]` ORed over
them, crossed with the candidate's own affinity terms. The API server allows one value per
such requirement, and the scheduler's NodeAffinity PreFilter turns them into a node set:
the other scenarios' nodes are never filtered, and its message counts them apart
("N node(s) didn't satisfy plugin(s) [NodeAffinity]"). On its own nodes, the pinning always
passes, so the candidate is judged there as its own spec says.

The bound pods are created with `spec.nodeName` (no scheduler decides them), within each
node's allocatable and the namespace's quota, with no grace period: a pod the scheduler
preempts is gone at once, as no kubelet runs to finish its termination.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Final

GPU: Final = "nvidia.com/gpu"
MIG: Final = "nvidia.com/mig-1g.10gb"
SHARED: Final = "nvidia.com/gpu.shared"
PRODUCT: Final = "nvidia.com/gpu.product"
FAMILY: Final = "nvidia.com/gpu.family"
COUNT: Final = "nvidia.com/gpu.count"
ZONE: Final = "topology.kubernetes.io/zone"
SCENARIO: Final = "oracle.kge.test/scenario"  # on nodes: which scenario they belong to
ROLE: Final = "oracle.kge.test/role"  # on pods: background or candidate
HIGH_PRIORITY: Final = "oracle-high"
PRODUCTS: Final = {
    "NVIDIA-A100-SXM4-80GB": "ampere",
    "NVIDIA-H100-80GB-HBM3": "hopper",
    "NVIDIA-L4": "ada-lovelace",
}
TAINTS: Final = (
    {"key": "nvidia.com/gpu", "effect": "NoSchedule"},
    {"key": "dedicated", "value": "inference", "effect": "NoSchedule"},
    {"key": "dedicated", "value": "training", "effect": "NoExecute"},
    {"key": "spot", "value": "true", "effect": "PreferNoSchedule"},
)
NOT_READY_TAINT: Final = {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}
TOLERATIONS: Final = (  # (weight, toleration)
    (0.55, {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}),
    (0.25, {"key": "dedicated", "operator": "Equal", "value": "inference"}),
    (0.1, {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}),
    (0.1, {"key": "dedicated", "operator": "Equal", "value": "training", "effect": "NoExecute"}),
    (0.05, {"key": "node.kubernetes.io/not-ready", "operator": "Exists"}),
    (0.04, {"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}),
    (0.03, {"operator": "Exists"}),
)


@dataclass
class Scenario:
    index: int
    namespace: str
    nodes: list[dict[str, Any]] = field(default_factory=list)
    background: list[dict[str, Any]] = field(default_factory=list)
    quota: dict[str, Any] | None = None
    candidate: dict[str, Any] = field(default_factory=dict)

    @property
    def node_names(self) -> list[str]:
        return [n["metadata"]["name"] for n in self.nodes]


def generate(seed: int, count: int) -> list[Scenario]:
    rng = random.Random(seed)
    return [_scenario(rng, i) for i in range(count)]


def _scenario(rng: random.Random, index: int) -> Scenario:
    scenario = Scenario(index, f"oracle-{index}")
    for j in range(rng.choice((1, 1, 2, 2, 3, 3, 4))):
        node, free = _node(rng, f"oracle-{index}-{j}", index)
        scenario.nodes.append(node)
        scenario.background += _background(rng, scenario.namespace, node, free)
    used = sum(
        int(c["resources"]["requests"].get(GPU, 0))
        for p in scenario.background
        for c in p["spec"]["containers"]
    )
    if rng.random() < 0.2:
        hard = used + rng.choice((0, 0, 1, 2, 4, 8))
        scenario.quota = {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "gpus", "namespace": scenario.namespace},
            "spec": {"hard": {f"requests.{GPU}": str(hard)}},
        }
    scenario.candidate = _candidate(rng, scenario)
    return scenario


def _node(rng: random.Random, name: str, index: int) -> tuple[dict[str, Any], dict[str, int]]:
    kind = rng.choices(("gpu", "mig", "shared", "silent", "cpu"), (60, 12, 10, 9, 9))[0]
    labels = {SCENARIO: str(index), "kubernetes.io/hostname": name}
    allocatable: dict[str, int] = {}
    if kind == "gpu":
        allocatable[GPU] = rng.choice((1, 2, 4, 4, 8, 8))
    elif kind == "mig":
        allocatable[MIG] = rng.choice((2, 4, 7, 14))
        if rng.random() < 0.5:
            allocatable[GPU] = 0  # the mixed strategy advertises no whole GPU
    elif kind == "shared":
        allocatable[SHARED] = rng.choice((4, 8, 16))
    elif kind == "silent":  # GPU labels, the device plugin down
        if rng.random() < 0.5:
            allocatable[GPU] = 0
        labels["nvidia.com/gpu.present"] = "true"
    if kind != "cpu" and rng.random() < 0.85:
        product = rng.choice(sorted(PRODUCTS))
        labels[PRODUCT] = product
        labels[FAMILY] = PRODUCTS[product]
        labels[COUNT] = str(max(allocatable.values(), default=0))
    if rng.random() < 0.5:
        labels[ZONE] = rng.choice(("zone-a", "zone-b"))
    taints = [dict(t) for t in TAINTS if rng.random() < (0.45 if t["key"] == GPU else 0.12)]
    ready = rng.random() > 0.06
    if not ready:
        taints.append(dict(NOT_READY_TAINT))
    cpu = rng.choice((4, 8, 32, 64))
    memory = rng.choice((16, 64, 256))
    pods = rng.choice((2, 3)) if rng.random() < 0.08 else 110
    resources = {"cpu": str(cpu), "memory": f"{memory}Gi", "pods": str(pods)}
    resources |= {k: str(v) for k, v in allocatable.items()}
    capacity = dict(resources)
    if GPU in allocatable and rng.random() < 0.2:
        capacity[GPU] = str(allocatable[GPU] + 1)  # one GPU held back from allocatable
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": taints, "unschedulable": rng.random() < 0.1},
        "status": {
            "capacity": capacity,
            "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }
    free = {**allocatable, "cpu": cpu * 1000, "memory": memory, "pods": pods}
    return node, free


def _background(
    rng: random.Random, namespace: str, node: dict[str, Any], free: dict[str, int]
) -> list[dict[str, Any]]:
    pods = []
    for k in range(rng.choice((0, 1, 1, 2, 3))):
        if free["pods"] < 1 or (k and free["pods"] < 2 and rng.random() < 0.5):
            break
        requests: dict[str, str] = {}
        for resource in (GPU, MIG, SHARED):
            if free.get(resource, 0) > 0:
                amount = rng.randint(1, free[resource])
                free[resource] -= amount
                requests[resource] = str(amount)
        cpu = min(free["cpu"], rng.choice((500, 2000, 8000, 30000)))
        memory = min(free["memory"], rng.choice((1, 8, 32)))
        free["cpu"] -= cpu
        free["memory"] -= memory
        free["pods"] -= 1
        requests |= {"cpu": f"{cpu}m", "memory": f"{memory}Gi"}
        name = f"{node['metadata']['name']}-held-{k}"
        pods.append(
            _pod(namespace, name, "background", requests, nodeName=node["metadata"]["name"])
        )
    return pods


def _pod(
    namespace: str, name: str, role: str, requests: dict[str, str], **spec: Any
) -> dict[str, Any]:
    limits = {k: v for k, v in requests.items() if k.startswith("nvidia.com/")}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {ROLE: role}},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "cuda",
                    "image": "registry.invalid/cuda:none",  # no kubelet runs: never pulled
                    "resources": {"requests": requests, "limits": limits},
                }
            ],
            **spec,
        },
    }


def _candidate(rng: random.Random, scenario: Scenario) -> dict[str, Any]:
    offered = sorted(
        {r for n in scenario.nodes for r in n["status"]["allocatable"] if "nvidia" in r}
    )
    if offered and rng.random() < 0.85:
        resource = rng.choice(offered)
    else:
        resource = rng.choice((GPU, GPU, MIG, SHARED))
    amount = rng.choice((1, 1, 2, 2, 4, 8) if resource == GPU else (1, 2, 4, 8))
    requests = {resource: str(amount)}
    cpu = rng.choice(("500m", "2", "16", "40", ""))
    if cpu:
        requests["cpu"] = cpu
    if rng.random() < 0.5:
        requests["memory"] = rng.choice(("4Gi", "32Gi", "200Gi"))
    spec: dict[str, Any] = {}
    tolerations = [dict(t) for weight, t in TOLERATIONS if rng.random() < weight]
    if tolerations:
        spec["tolerations"] = tolerations
    selector = {}
    if rng.random() < 0.25:
        selector[PRODUCT] = rng.choice(sorted(PRODUCTS))
    if rng.random() < 0.1:
        selector[ZONE] = rng.choice(("zone-a", "zone-b"))
    if selector:
        spec["nodeSelector"] = selector
    terms = _affinity_terms(rng) if rng.random() < 0.3 else [[]]
    spec["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": term,
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": [node]}
                        ],
                    }
                    if term
                    else {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": [node]}
                        ]
                    }
                    for term in terms
                    for node in scenario.node_names
                ]
            }
        }
    }
    if rng.random() < 0.15:
        spec["priorityClassName"] = HIGH_PRIORITY
    pod = _pod(scenario.namespace, "candidate", "candidate", requests, **spec)
    if rng.random() < 0.05:  # an init container asking for more than the app
        init = dict(pod["spec"]["containers"][0], name="warmup")
        more = {resource: str(amount * 2)}
        init["resources"] = {"requests": more, "limits": more}
        pod["spec"]["initContainers"] = [init]
    return pod


def _affinity_terms(rng: random.Random) -> list[list[dict[str, Any]]]:
    def requirement() -> dict[str, Any]:
        choice = rng.randrange(6)
        if choice == 0:
            return {"key": PRODUCT, "operator": "In", "values": rng.sample(sorted(PRODUCTS), 2)}
        if choice == 1:
            return {"key": PRODUCT, "operator": "NotIn", "values": [rng.choice(sorted(PRODUCTS))]}
        if choice == 2:
            return {"key": COUNT, "operator": "Gt", "values": [str(rng.choice((1, 3, 4)))]}
        if choice == 3:
            return {"key": FAMILY, "operator": "In", "values": ["hopper"]}
        if choice == 4:
            return {"key": ZONE, "operator": rng.choice(("Exists", "DoesNotExist"))}
        return {"key": ZONE, "operator": "In", "values": ["zone-a"]}

    return [
        [requirement() for _ in range(rng.choice((1, 1, 2)))] for _ in range(rng.choice((1, 1, 2)))
    ]
