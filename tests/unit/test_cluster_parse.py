"""Kubernetes objects into slim values: quantities in scheduler units, a pod's effective
requests, and malformed objects that parse to something safe instead of raising."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from cluster_objects import make_gpu_pod, make_node, make_quota, scenarios
from kube_gpu_exporter.exporter.cluster import (
    ClusterView,
    Requirement,
    SelectorTerm,
    Taint,
    Toleration,
    check_node,
    classify,
    effective_requests,
    parse_node,
    parse_pod,
    parse_quota,
)
from kube_gpu_exporter.exporter.cluster.quantities import parse_quantity, show


@pytest.mark.parametrize(
    ("text", "resource", "units"),
    [
        ("2", "cpu", 2000),
        ("1500m", "cpu", 1500),
        ("0.5", "cpu", 500),
        ("2e-3", "cpu", 2),
        ("64Gi", "memory", 64 << 30),
        ("131072Ki", "memory", 128 << 20),
        ("1G", "memory", 10**9),
        ("1.5", "memory", 2),  # whole units, rounded up, as Quantity.Value()
        ("100m", "memory", 1),
        (8, "nvidia.com/gpu", 8),  # a YAML number
        (0.5, "cpu", 500),
        ("1E", "memory", 10**18),  # exa, not an exponent
        ("-1", "cpu", 0),
        ("9999999Ei", "memory", 2**63 - 1),
    ],
)
def test_quantities_in_scheduler_units(text: Any, resource: str, units: int) -> None:
    assert parse_quantity(text, resource) == units


@pytest.mark.parametrize("text", ["", "1.2.3", "Gi", "1 Gi", "1e99999", "x" * 100, True, None, []])
def test_what_is_not_a_quantity(text: Any) -> None:
    assert parse_quantity(text, "memory") is None


def test_amounts_read_as_a_person_writes_them() -> None:
    assert [show("cpu", 2000), show("cpu", 1500), show("memory", 4 << 30)] == ["2", "1500m", "4Gi"]
    assert show("nvidia.com/gpu", 3) == "3"


def container(name: str, restart: str | None = None, **requests: str) -> dict[str, Any]:
    item: dict[str, Any] = {"name": name, "resources": {"requests": requests}}
    if restart:
        item["restartPolicy"] = restart
    return item


def test_effective_requests_take_the_init_peak_sidecars_and_overhead() -> None:
    spec = {
        "initContainers": [
            container("setup", cpu="4", memory="1Gi"),
            container("proxy", "Always", cpu="500m", memory="256Mi"),
            container("migrate", cpu="3", memory="2Gi"),  # runs beside the proxy: 3.5 cpu
        ],
        "containers": [
            container("main", cpu="2", memory="8Gi", **{"nvidia.com/gpu": "2"}),
            container("log", cpu="250m", memory="128Mi"),
        ],
        "overhead": {"cpu": "100m", "memory": "64Mi"},
    }
    assert effective_requests(spec) == {
        "cpu": 4000 + 100,  # the first init container's 4 beats 2.25 + 0.5 and 3 + 0.5
        "memory": (8 << 30) + (128 << 20) + (256 << 20) + (64 << 20),
        "nvidia.com/gpu": 2,
    }


def test_pod_level_requests_replace_the_containers_cpu_and_memory() -> None:
    spec = {
        "containers": [container("main", cpu="8", memory="1Gi", **{"nvidia.com/gpu": "1"})],
        "resources": {"requests": {"cpu": "2"}, "limits": {"memory": "4Gi"}},
    }
    assert effective_requests(spec) == {"cpu": 2000, "memory": 4 << 30, "nvidia.com/gpu": 1}


def test_a_pod_keeps_what_placement_and_the_metrics_need() -> None:
    obj = make_gpu_pod(
        "train",
        2,
        node_selector={"nvidia.com/gpu.product": "A100"},
        affinity_terms=[
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]},
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
        ],
        gates=["kueue.x-k8s.io/admission"],
        nominated="gpu-a",
    )
    obj["metadata"]["deletionTimestamp"] = "2024-05-01T11:00:00Z"
    obj["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "c"}]
    obj["status"]["conditions"].append(
        {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
    )
    pod = parse_pod(obj)
    assert pod is not None
    assert (pod.namespace, pod.name, pod.phase, pod.node_name) == ("ml", "train", "Pending", "")
    assert dict(pod.requests) == {"cpu": 1000, "memory": 4 << 30, "nvidia.com/gpu": 2}
    assert pod.tolerations == (Toleration("nvidia.com/gpu", "Exists", "", "NoSchedule"),)
    assert dict(pod.node_selector) == {"nvidia.com/gpu.product": "A100"}
    assert pod.affinity == (
        SelectorTerm(match_expressions=(Requirement("zone", "In", ("a", "b")),)),
        SelectorTerm(match_fields=(Requirement("metadata.name", "In", ("n1",)),)),
    )
    assert pod.scheduling_gates == ("kueue.x-k8s.io/admission",)
    assert (pod.nominated_node, pod.scheduled_reason) == ("gpu-a", "SchedulingGated")
    assert pod.created_at == pod.scheduled_at == 1714557600.0
    assert (pod.disruption, pod.deleting, pod.has_claims) == ("PreemptionByScheduler", True, True)
    assert pod.unscheduled and not pod.terminated


def test_a_node_and_a_quota() -> None:
    obj = make_node("gpu-a", gpus=0, unschedulable=True, ready=False)
    node = parse_node(obj)
    assert node is not None
    assert node.allocatable["nvidia.com/gpu"] == 0  # advertised at 0 is kept: evidence
    assert (node.ready, node.unschedulable) == (False, True)
    assert node.taints == (Taint("nvidia.com/gpu", "present", "NoSchedule"),)
    assert [str(t) for t in node.effective_taints] == [  # not ready: no taint invented
        "nvidia.com/gpu=present:NoSchedule",
        "node.kubernetes.io/unschedulable:NoSchedule",
    ]
    quota_obj = make_quota("q", hard=0, used=0)
    quota_obj["spec"]["hard"]["requests.cpu"] = "10"
    quota = parse_quota(quota_obj)
    assert quota is not None and dict(quota.hard) == {"nvidia.com/gpu": 0}
    assert not quota.scoped


def test_objects_without_identity_parse_to_none() -> None:
    assert parse_node({}) is None
    assert parse_pod({"metadata": {"name": "x"}}) is None
    assert parse_pod({"metadata": {"name": "x"}}, "default") is not None
    assert parse_quota({"metadata": {"name": "q"}}) is None


def _copy(obj: dict[str, Any]) -> Any:
    return json.loads(json.dumps(obj))


def _mutations(obj: Any, rng: random.Random) -> Any:
    """`obj` with one value somewhere replaced by something of the wrong type (or removed)."""
    junk: list[Any] = [None, 7, -1.5, "", "x", [], {}, [1, "a", None], {"a": [None]}, True]
    path: list[Any] = []
    node = obj
    while isinstance(node, dict | list) and node and rng.random() < 0.8:
        key = rng.choice(list(node.keys()) if isinstance(node, dict) else range(len(node)))
        path.append(key)
        node = node[key]
    if not path:
        return rng.choice(junk)
    parent = obj
    for key in path[:-1]:
        parent = parent[key]
    if isinstance(parent, dict) and rng.random() < 0.2:
        del parent[path[-1]]
    else:
        parent[path[-1]] = rng.choice(junk)
    return obj


def test_malformed_objects_parse_to_something_safe() -> None:
    """Thousands of objects with fields missing or of the wrong type: parsing never raises,
    and the cluster view and classification built from what parses never raise either."""
    rng = random.Random(11)
    cases = scenarios()
    for _ in range(2000):
        scenario = rng.choice(cases)
        nodes = [_mutations(_copy(n), rng) for n in scenario.nodes]
        pods = [_mutations(_copy(p), rng) for p in (*scenario.bound, scenario.subject)]
        quotas = [_mutations(_copy(q), rng) for q in scenario.quotas]
        parsed_nodes = [n for n in (parse_node(o) for o in nodes if isinstance(o, dict)) if n]
        parsed_pods = [p for p in (parse_pod(o) for o in pods if isinstance(o, dict)) if p]
        parsed_quotas = [q for q in (parse_quota(o) for o in quotas if isinstance(o, dict)) if q]
        view = ClusterView.build(parsed_nodes, parsed_pods, parsed_quotas)
        for pod in parsed_pods:
            classify(view, pod, admitted=rng.random() < 0.5)


# Nodes that tell the operators apart: every label an affinity below names has some nodes with
# it, some with another value and some without it.
LABELLED_NODES = [
    make_node(f"gpu-{i}", product=product, labels=labels)
    for i, (product, labels) in enumerate(
        [
            ("NVIDIA-H100-80GB-HBM3", {"zone": "a", "pool": "train", "gen": "9", "tier": "1"}),
            ("NVIDIA-H100-80GB-HBM3", {"zone": "b", "gen": "9", "tier": "1"}),
            ("NVIDIA-A100-SXM4-40GB", {"zone": "a", "pool": "serve", "gen": "8", "tier": "1"}),
            ("NVIDIA-A100-SXM4-40GB", {"zone": "c", "tier": "1"}),
            ("NVIDIA-L4", {"zone": "b", "pool": "train", "gen": "8", "tier": "1"}),
            ("NVIDIA-L4", {}),
        ]
    )
]
PRODUCT_KEY = "nvidia.com/gpu.product"
AFFINITIES: list[list[dict[str, Any]]] = [
    [
        {
            "matchExpressions": [
                {"key": PRODUCT_KEY, "operator": "In", "values": ["NVIDIA-H100-80GB-HBM3"]},
                {"key": "zone", "operator": "NotIn", "values": ["c", "b"]},
            ]
        },
        {"matchExpressions": [{"key": "pool", "operator": "DoesNotExist"}]},
    ],
    [
        {
            "matchExpressions": [
                {"key": "gen", "operator": "Gt", "values": ["8"]},
                {"key": "pool", "operator": "Exists"},
            ],
            "matchFields": [
                {"key": "metadata.name", "operator": "NotIn", "values": ["gpu-3", "gpu-5"]}
            ],
        },
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-4"]}]},
    ],
    [
        {
            "matchExpressions": [
                {"key": "zone", "operator": "NotIn", "values": ["a"]},
                {"key": "gen", "operator": "Lt", "values": ["9"]},
            ]
        }
    ],
]


def _json_type(value: Any) -> type:
    return type(None) if value is None else dict if isinstance(value, dict) else type(value)


def _broken(pod: dict[str, Any], rng: random.Random) -> dict[str, Any] | None:
    """The pod with one value under its required node affinity or its nodeSelector replaced
    by junk of another JSON type (a string by a number, a list by a mapping, a term by a
    string…): what the API server would refuse, never a valid pod with another constraint.
    None when the junk drawn is of the value's own type."""
    junk: list[Any] = [None, 7, -1.5, "x", [], {}, [1, "a", None], {"a": [None]}, True]
    spec = pod["spec"]
    parent: Any = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    key: Any = "nodeSelectorTerms"
    if rng.random() < 0.2:
        parent, key = spec, "nodeSelector"
    while rng.random() < 0.75 and isinstance(parent[key], dict | list) and parent[key]:
        parent = parent[key]
        key = rng.choice(list(parent) if isinstance(parent, dict) else range(len(parent)))
    new = rng.choice(junk)
    old = parent[key]
    if _json_type(new) is _json_type(old) or (new is None and isinstance(old, dict | list)):
        return None  # same type, or null for a list or mapping: absent, a valid pod
    parent[key] = new
    return pod


def _placeable(pod: dict[str, Any]) -> set[str]:
    """The nodes the parsed pod may be placed on: placement's own check of each node."""
    parsed = parse_pod(pod)
    assert parsed is not None
    view = ClusterView.build([n for n in map(parse_node, LABELLED_NODES) if n], [parsed])
    requested = view.gpu_requests(parsed)
    return {
        name
        for name, state in view.nodes.items()
        if check_node(parsed, state, requested, view.settings.gpu_type_labels).open
    }


@pytest.mark.parametrize("terms", AFFINITIES, ids=["in-notin-doesnotexist", "gt-fields", "lt"])
def test_a_broken_affinity_never_widens_placement(terms: list[dict[str, Any]]) -> None:
    """2,000 pods whose required node affinity or nodeSelector has one value of the wrong
    type: each may be placed on a subset of the nodes the intact pod may use. A requirement
    the parser could not read must exclude nodes, never drop out of its term (which would let
    more nodes in); so must a selector entry."""
    rng = random.Random(13)
    intact = make_gpu_pod("train", 1, node_selector={"tier": "1"}, affinity_terms=terms)
    allowed = _placeable(intact)
    assert set() < allowed < {f"gpu-{i}" for i in range(len(LABELLED_NODES))}  # it selects
    tried = 0
    while tried < 2000:
        broken = _broken(_copy(intact), rng)
        if broken is None:
            continue
        tried += 1
        widened = _placeable(broken) - allowed
        assert not widened, f"{json.dumps(broken['spec']['affinity'])} lets in {widened}"


def test_pods_alike_share_their_tolerations_and_requests() -> None:
    """A cluster's pods repeat a few toleration sets and request sizes: each is held once
    (frozen values, so sharing is safe), not once per pod — 150,000 pods held ~45 MiB of
    identical Tolerations."""
    first, second = (parse_pod(make_gpu_pod(name, 2)) for name in ("a", "b"))
    assert first is not None and second is not None
    assert first.tolerations == (Toleration("nvidia.com/gpu", "Exists", "", "NoSchedule"),)
    assert first.tolerations is second.tolerations
    assert first.requests is second.requests
    other = parse_pod(make_gpu_pod("c", 4))
    assert other is not None and other.requests is not first.requests
    assert other.requests["nvidia.com/gpu"] == 4
