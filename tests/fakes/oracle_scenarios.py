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
    """`family`: "base" for the seeded mix, else the one thing its scenarios vary (FAMILIES);
    `objects`: (API path, object) created after the nodes and bound pods, before the
    candidate (a LimitRange, a RuntimeClass); `limits`: what of the candidate the scheduler
    weighs and explain does not judge, which its verdict must name."""

    index: int
    namespace: str
    nodes: list[dict[str, Any]] = field(default_factory=list)
    background: list[dict[str, Any]] = field(default_factory=list)
    quota: dict[str, Any] | None = None
    candidate: dict[str, Any] = field(default_factory=dict)
    family: str = "base"
    quotas: list[dict[str, Any]] = field(default_factory=list)
    objects: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    limits: tuple[str, ...] = ()

    @property
    def all_quotas(self) -> list[dict[str, Any]]:
        return [*([self.quota] if self.quota else []), *self.quotas]

    @property
    def node_names(self) -> list[str]:
        return [n["metadata"]["name"] for n in self.nodes]


def generate(seed: int, count: int, per_family: int = 0) -> list[Scenario]:
    """`count` scenarios of the seeded mix, then `per_family` of each family (from their own
    random stream, so that adding a family leaves the others' scenarios as they were)."""
    rng = random.Random(seed)
    scenarios = [_scenario(rng, i) for i in range(count)]
    for name, make in FAMILIES.items():
        family = random.Random(f"{seed}-{name}")
        for _ in range(per_family):
            scenario = _scenario(family, len(scenarios))
            scenario.family = name
            scenario.quota = None
            make(family, scenario)
            scenarios.append(scenario)
    return scenarios


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


# ---- families: the admission, validation and scheduling each one varies ----------------------

RANK: Final = "oracle.kge.test/rank"  # a label for Gt and Lt, with values Go reads its own way
RUNTIME_CLASSES: Final = "/apis/node.k8s.io/v1/runtimeclasses"
UNREACHABLE: Final = "node.kubernetes.io/unreachable"


def _main(scenario: Scenario) -> dict[str, Any]:
    container: dict[str, Any] = scenario.candidate["spec"]["containers"][0]
    return container


def _used(scenario: Scenario, resource: str) -> int:
    """What the bound pods request of `resource` (cpu in millicores, memory in GiB)."""
    total = 0
    for pod in scenario.background:
        text = pod["spec"]["containers"][0]["resources"]["requests"].get(resource, "0")
        total += int(text.removesuffix("m").removesuffix("Gi"))
    return total


def _quota(scenario: Scenario, hard: dict[str, str], **spec: Any) -> None:
    scenario.quotas.append(
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": f"quota-{len(scenario.quotas)}", "namespace": scenario.namespace},
            "spec": {"hard": hard, **spec},
        }
    )


def _quota_pods(rng: random.Random, scenario: Scenario) -> None:
    _quota(scenario, {"pods": str(len(scenario.background) + rng.choice((0, 0, 1, 3)))})


def _quota_cpu(rng: random.Random, scenario: Scenario) -> None:
    hard = _used(scenario, "cpu") + rng.choice((0, 500, 2000, 100000))
    _quota(scenario, {"requests.cpu": f"{hard}m"})
    requests = _main(scenario)["resources"]["requests"]
    if "cpu" not in requests and rng.random() < 0.7:  # without: refused, cpu not specified
        requests["cpu"] = rng.choice(("500m", "2"))


def _quota_memory(rng: random.Random, scenario: Scenario) -> None:
    hard = _used(scenario, "memory") + rng.choice((0, 4, 64, 1000))
    _quota(scenario, {"requests.memory": f"{hard}Gi"})
    requests = _main(scenario)["resources"]["requests"]
    if "memory" not in requests and rng.random() < 0.7:
        requests["memory"] = rng.choice(("4Gi", "32Gi"))


def _quota_scoped(rng: random.Random, scenario: Scenario) -> None:
    hard = rng.choice(({"pods": "0"}, {f"requests.{GPU}": "0"}, {f"requests.{GPU}": "1"}))
    selector = {"operator": "In", "scopeName": "PriorityClass", "values": [HIGH_PRIORITY]}
    _quota(scenario, hard, scopeSelector={"matchExpressions": [selector]})
    if rng.random() < 0.6:
        scenario.candidate["spec"]["priorityClassName"] = HIGH_PRIORITY
    else:
        scenario.candidate["spec"].pop("priorityClassName", None)


def _runtime_class(scenario: Scenario, **fields: Any) -> str:
    """A RuntimeClass of the scenario's own (and its twin with the same overhead and no
    scheduling, for the probe that lifts node selection); the candidate runs with it."""
    name = f"oracle-rc-{scenario.index}"
    scenario.objects.append(
        (RUNTIME_CLASSES, {"metadata": {"name": name}, "handler": "runc", **fields})
    )
    twin = {k: v for k, v in fields.items() if k != "scheduling"}
    scenario.objects.append(
        (RUNTIME_CLASSES, {"metadata": {"name": f"{name}-open"}, "handler": "runc", **twin})
    )
    scenario.candidate["spec"]["runtimeClassName"] = name
    return name


def _runtime_overhead(rng: random.Random, scenario: Scenario) -> None:
    cpu, memory = rng.choice(("250m", "2", "8", "30")), rng.choice(("1Gi", "16Gi", "100Gi"))
    _runtime_class(scenario, overhead={"podFixed": {"cpu": cpu, "memory": memory}})


def _runtime_selector(rng: random.Random, scenario: Scenario) -> None:
    zone = rng.choice(("zone-a", "zone-b"))
    _runtime_class(scenario, scheduling={"nodeSelector": {ZONE: zone}})
    if rng.random() < 0.2:  # the pod's own selector on the same key, another value: refused
        other = "zone-b" if zone == "zone-a" else "zone-a"
        scenario.candidate["spec"]["nodeSelector"] = {ZONE: other}


def _runtime_tolerations(rng: random.Random, scenario: Scenario) -> None:
    tolerations = [dict(t) for weight, t in TOLERATIONS[:4] if rng.random() < 0.6]
    _runtime_class(scenario, scheduling={"tolerations": tolerations})
    scenario.candidate["spec"].pop("tolerations", None)


def _limit_range(scenario: Scenario, limit: dict[str, Any]) -> None:
    scenario.objects.append(
        (
            f"/api/v1/namespaces/{scenario.namespace}/limitranges",
            {"metadata": {"name": "limits"}, "spec": {"limits": [{"type": "Container", **limit}]}},
        )
    )


def _limit_default(rng: random.Random, scenario: Scenario) -> None:
    _limit_range(scenario, {"default": {GPU: str(rng.choice((1, 2, 4)))}})
    resources = _main(scenario)["resources"]
    for part in ("requests", "limits"):  # a container that asks for no GPU is given one
        resources[part] = {k: v for k, v in resources[part].items() if "nvidia" not in k}


def _limit_max(rng: random.Random, scenario: Scenario) -> None:
    """A maximum, and so a default limit (a LimitRange's default is its max): a container
    asking no GPU is given the max. The candidate asks for whole GPUs alone (the probes
    tell reasons apart for one GPU resource)."""
    _limit_range(scenario, {"max": {GPU: str(rng.choice((1, 2, 4)))}})
    resources = _main(scenario)["resources"]
    amount = str(rng.choice((1, 2, 4, 8)))
    for part in ("requests", "limits"):
        resources[part] = {k: v for k, v in resources[part].items() if "nvidia" not in k}
        resources[part][GPU] = amount


def _invalid(rng: random.Random, scenario: Scenario) -> None:
    resources = _main(scenario)["resources"]
    spec = scenario.candidate["spec"]
    choice = rng.randrange(4)
    if choice == 0:
        resources["requests"][GPU] = resources["limits"][GPU] = "500m"
    elif choice == 1:
        resources["requests"][GPU], resources["limits"][GPU] = "1", "2"
    elif choice == 2:
        spec["tolerations"] = [
            {
                "key": "dedicated",
                "operator": "Exists",
                "effect": "NoSchedule",
                "tolerationSeconds": 60,
            }
        ]
    else:
        spec["tolerations"] = [{"key": GPU, "operator": "Exists", "value": "present"}]


def _node_name(rng: random.Random, scenario: Scenario) -> None:
    scenario.candidate["spec"]["nodeName"] = rng.choice(scenario.node_names)


def _gt_lt(rng: random.Random, scenario: Scenario) -> None:
    for node in scenario.nodes:  # valid label values all, read by Go's ParseInt or not
        node["metadata"]["labels"][RANK] = rng.choice(("1_0", "010", "0x10", "5", "12", "7"))
    operator = rng.choice(("Gt", "Lt"))
    bound = rng.choice(("5", "9", "010", "1_0", "+5", "-3", " 5"))
    terms = scenario.candidate["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    for term in terms:
        term.setdefault("matchExpressions", []).append(
            {"key": RANK, "operator": operator, "values": [bound]}
        )


def _ready_unknown(rng: random.Random, scenario: Scenario) -> None:
    """Nodes whose kubelet stopped posting: Ready Unknown, and the taints the node lifecycle
    controller sets for that (unreachable, NoSchedule and NoExecute) or not yet."""
    for node in scenario.nodes:
        if rng.random() < 0.7:
            node["status"]["conditions"] = [{"type": "Ready", "status": "Unknown"}]
            taints = [t for t in node["spec"]["taints"] if not t["key"].startswith("node.")]
            if rng.random() < 0.6:
                taints += [
                    {"key": UNREACHABLE, "effect": "NoSchedule"},
                    {"key": UNREACHABLE, "effect": "NoExecute"},
                ]
            node["spec"]["taints"] = taints
    if rng.random() < 0.4:
        tolerations = scenario.candidate["spec"].setdefault("tolerations", [])
        tolerations.append({"key": UNREACHABLE, "operator": "Exists", "effect": "NoSchedule"})


def _unjudged(rng: random.Random, scenario: Scenario) -> None:
    """Inter-pod affinity, anti-affinity, topology spread or host ports: what explain names
    as not judged."""
    spec = scenario.candidate["spec"]
    choice = rng.randrange(4)
    held = {"labelSelector": {"matchLabels": {ROLE: "background"}}}
    if choice == 0:
        term = {**held, "topologyKey": "kubernetes.io/hostname"}
        spec["affinity"]["podAntiAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [term]
        }
        scenario.limits = ("pod anti-affinity",)
    elif choice == 1:
        term = {**held, "topologyKey": ZONE}
        spec["affinity"]["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
        scenario.limits = ("pod affinity",)
    elif choice == 2:
        spec["topologySpreadConstraints"] = [
            {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule", **held}
        ]
        scenario.limits = ("topology spread",)
    else:
        for pod in scenario.background[:1]:
            pod["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
        _main(scenario)["ports"] = [{"containerPort": 80, "hostPort": 8080}]
        scenario.limits = ("host ports",)


def _preemption(rng: random.Random, scenario: Scenario) -> None:
    """A high-priority candidate that fits only once bound pods of priority 0 are gone."""
    spec = scenario.candidate["spec"]
    spec["priorityClassName"] = HIGH_PRIORITY
    spec["tolerations"] = [{"operator": "Exists"}]
    spec.pop("nodeSelector", None)
    held = [
        p
        for p in scenario.background
        if int(p["spec"]["containers"][0]["resources"]["requests"].get(GPU, "0")) > 0
    ]
    if held:
        pod = rng.choice(held)
        node = next(n for n in scenario.nodes if n["metadata"]["name"] == pod["spec"]["nodeName"])
        amount = node["status"]["allocatable"][GPU]
        _main(scenario)["resources"] = {
            "requests": {GPU: amount, "cpu": "100m"},
            "limits": {GPU: amount},
        }
    scenario.limits = ("preemption",)


FAMILIES: Final = {
    "quota: pods": _quota_pods,
    "quota: requests.cpu": _quota_cpu,
    "quota: requests.memory": _quota_memory,
    "quota: scoped": _quota_scoped,
    "RuntimeClass: overhead": _runtime_overhead,
    "RuntimeClass: nodeSelector": _runtime_selector,
    "RuntimeClass: tolerations": _runtime_tolerations,
    "LimitRange: default GPU limit": _limit_default,
    "LimitRange: max": _limit_max,
    "invalid manifest": _invalid,
    "spec.nodeName": _node_name,
    "Gt/Lt label values": _gt_lt,
    "Ready Unknown": _ready_unknown,
    "pod affinity, spread, host ports": _unjudged,
    "preemption": _preemption,
}
