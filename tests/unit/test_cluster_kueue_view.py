"""The Kueue part of the cluster view in units: ResourceFlavors, Cohorts and ClusterQueues
parsed, the nodes per flavor, Workloads in every state, one reason per waiting Workload
joining Kueue's and the node fit, the admission and preemption counters, the pods tied to
their Workloads, and the families served from them."""

from __future__ import annotations

from typing import Any

from kube_gpu_exporter.demo.kube_api.cluster_objects import GPU_TAINT, make_gpu_pod, make_node
from kube_gpu_exporter.exporter.cluster.kueue import parse_workload
from kube_gpu_exporter.exporter.cluster.kueue_counters import QueueCounters
from kube_gpu_exporter.exporter.cluster.kueue_fit import EmptyNodes
from kube_gpu_exporter.exporter.cluster.kueue_objects import (
    Flavor,
    flavor_nodes,
    parse_cohort,
    parse_flavor,
    parse_queue,
)
from kube_gpu_exporter.exporter.cluster.kueue_view import KueueJudge, KueueObjects
from kube_gpu_exporter.exporter.cluster.kueue_workloads import Workload, parse_kueue_workload
from kube_gpu_exporter.exporter.cluster.objects import Toleration
from kube_gpu_exporter.exporter.cluster.parse import parse_node, parse_pod
from kube_gpu_exporter.exporter.cluster.settings import ClusterSettings
from kube_gpu_exporter.exporter.cluster.view import ClusterView
from kube_gpu_exporter.exporter.exposition.cluster_families import ClusterState, cluster_families

SETTINGS = ClusterSettings()
GPU = "nvidia.com/gpu"
H100_LABELS = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
TOLERATE_GPU = [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}]
JOB_UID = "job-uid-1"


def _flavor(name: str, labels: dict[str, str], tolerations: Any = ()) -> dict[str, Any]:
    spec = {"nodeLabels": labels, "tolerations": list(tolerations)}
    return {"metadata": {"name": name}, "spec": spec}


def _queue(name: str, flavors: dict[str, int], cohort_field: str = "cohortName") -> dict[str, Any]:
    entries = [
        {"name": f, "resources": [{"name": GPU, "nominalQuota": n}]} for f, n in flavors.items()
    ]
    spec = {"resourceGroups": [{"coveredResources": [GPU], "flavors": entries}]}
    return {"metadata": {"name": name}, "spec": {**spec, cohort_field: "research"}}


def _condition(kind: str, status: str, reason: str = "", at: str = "2030-01-01T00:00:00Z") -> Any:
    return {"type": kind, "status": status, "reason": reason, "lastTransitionTime": at}


def _workload(
    name: str,
    gpus: int,
    *,
    count: int = 1,
    conditions: tuple[Any, ...] = (),
    admitted_to: str = "",
    owner: str = JOB_UID,
    gates: tuple[str, ...] = (),
) -> dict[str, Any]:
    template = make_gpu_pod("t", gpus, gates=gates)["spec"]
    status: dict[str, Any] = {"conditions": list(conditions)}
    if admitted_to:
        status["admission"] = {
            "clusterQueue": admitted_to,
            "podSetAssignments": [{"name": "main", "flavors": {GPU: "h100", "cpu": "other"}}],
        }
    return {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "creationTimestamp": "2029-12-31T23:00:00Z",
            "ownerReferences": [{"uid": owner, "kind": "Job", "controller": True}],
        },
        "spec": {
            "queueName": "lq",
            "podSets": [{"name": "main", "count": count, "template": {"spec": template}}],
        },
        "status": status,
    }


def _parsed(obj: dict[str, Any]) -> Workload:
    parsed = parse_kueue_workload(obj, SETTINGS)
    assert parsed is not None and parsed[1] is not None
    return parsed[1]


def _nodes(gpus: int = 4, count: int = 2) -> list[Any]:
    return [parse_node(make_node(f"n{i}", gpus)) for i in range(count)]


def _kueue(*workloads: Workload, labels: dict[str, str] = H100_LABELS) -> KueueObjects:
    flavor = parse_flavor(_flavor("h100", labels, TOLERATE_GPU))
    queue = parse_queue(_queue("cq", {"h100": 8}), SETTINGS)
    assert flavor is not None and queue is not None and queue[1] is not None
    return KueueObjects(
        workloads={w.key: w for w in workloads},
        local_queues={"ml/lq": "cq"},
        queues={"cq": queue[1]},
        flavors={"h100": flavor[1]},
        cohorts={"research": ""},
    )


def test_flavors_cohorts_and_queues_are_parsed_on_either_version() -> None:
    assert parse_flavor(_flavor("h100", H100_LABELS, TOLERATE_GPU)) == (
        "h100",
        Flavor("h100", H100_LABELS, parse_pod(make_gpu_pod("p")).tolerations),  # type: ignore[union-attr]
    )
    assert parse_cohort({"metadata": {"name": "a"}, "spec": {"parentName": "root"}}) == (
        "a",
        "root",
    )
    assert parse_cohort({"metadata": {"name": "root"}}) == ("root", "")
    for field in ("cohortName", "cohort"):  # v1beta2, v1beta1
        parsed = parse_queue(_queue("cq", {"h100": 8}, field), SETTINGS)
        assert parsed is not None and parsed[1] is not None
        assert parsed[1].cohort == "research"
        assert [(q.flavor, q.nominal) for q in parsed[1].quotas] == [("h100", 8)]
    no_gpu = {"metadata": {"name": "cpu"}, "spec": {"resourceGroups": []}}
    assert parse_queue(no_gpu, SETTINGS) == ("cpu", None)
    assert parse_flavor({"metadata": {}}) is None


def test_flavor_nodes_need_its_labels_and_tolerations_and_keep_a_known_zero() -> None:
    """The GPU resource's own taint is tolerated by the pods that ask for it (their template
    or the ExtendedResourceToleration admission plugin); any other taint only by the
    flavor's tolerations."""
    dedicated = {"key": "dedicated", "value": "h100", "effect": "NoSchedule"}
    nodes = [
        parse_node(make_node("h1", 8)),  # H100, GPU taint
        parse_node(make_node("h2", 8, taints=())),
        parse_node(make_node("h3", 8, unschedulable=True, taints=())),  # cordoned
        parse_node(make_node("h4", 0, taints=())),  # advertises 0
        parse_node(make_node("h5", 8, taints=(GPU_TAINT, dedicated))),
        parse_node(make_node("a1", 8, product="NVIDIA-A100-SXM4-80GB", taints=())),
    ]
    tolerant = (Toleration("dedicated", "Equal", "h100", "NoSchedule"),)
    flavors = [
        Flavor("tolerant", H100_LABELS, tolerant),
        Flavor("plain", H100_LABELS),
        Flavor("b200", {"nvidia.com/gpu.product": "B200"}),
    ]
    wanted = {"tolerant": [GPU], "plain": [GPU, "nvidia.com/mig-1g.10gb"], "b200": [GPU]}
    assert flavor_nodes(flavors, [n for n in nodes if n], wanted) == {
        ("tolerant", GPU): 3,  # h1, h2, h5
        ("plain", GPU): 2,  # h1 (its GPU taint), h2; not h5 (dedicated)
        ("plain", "nvidia.com/mig-1g.10gb"): 0,
        ("b200", GPU): 0,
    }
    assert GPU_TAINT["key"] == GPU


def test_workloads_in_each_state() -> None:
    waiting = _parsed(
        _workload("w", 2, count=3, conditions=(_condition("QuotaReserved", "False", "Pending"),))
    )
    assert (waiting.gpus, waiting.quota_reason, waiting.reserved, waiting.admitted) == (
        6,
        "Pending",
        False,
        False,
    )
    assert waiting.owners == (JOB_UID,) and waiting.cluster_queue == ""
    admitted = _parsed(
        _workload(
            "a",
            1,
            conditions=(_condition("QuotaReserved", "True"), _condition("Admitted", "True")),
            admitted_to="cq",
        )
    )
    assert admitted.admitted and admitted.cluster_queue == "cq"
    assert admitted.flavors == {"main": "h100"} and admitted.admitted_at == 1893456000.0
    preempted = _parsed(_workload("p", 1, conditions=(_condition("Evicted", "True", "Preempted"),)))
    assert preempted.preempted_at == 1893456000.0 and not preempted.admitted
    other_eviction = _parsed(
        _workload("e", 1, conditions=(_condition("Evicted", "True", "PodsReadyTimeout"),))
    )
    assert other_eviction.preempted_at is None
    finished = _workload("f", 1, conditions=(_condition("Finished", "True"),))
    assert parse_kueue_workload(finished, SETTINGS) == ("ml/f", None)
    assert parse_kueue_workload(_workload("c", 0), SETTINGS) == ("ml/c", None)
    gated = _parsed(_workload("g", 1, gates=("kueue.x-k8s.io/admission",)))
    assert gated.pod_sets[0].pod.scheduling_gates == (), "the pods let go carry no gate"
    # the waiting-only view kept for its callers: the admitted one dropped
    assert parse_workload(
        _workload("a", 1, conditions=(_condition("Admitted", "True"),)), SETTINGS
    ) == ("ml/a", None)


def test_counters_count_new_transitions_since_start_once() -> None:
    counters = QueueCounters(started=1893455000.0)
    admitted = _workload("a", 1, conditions=(_condition("Admitted", "True"),), admitted_to="cq")
    before = _workload(
        "old", 1, conditions=(_condition("Admitted", "True", at="2029-01-01T00:00:00Z"),)
    )
    for obj in (admitted, admitted, before):  # a repeated event, one admitted before the start
        counters.observe(f"ml/{obj['metadata']['name']}", _parsed(obj), "cq")
    preempted = _workload(
        "a", 1, conditions=(_condition("Evicted", "True", "Preempted", "2030-01-01T00:01:00Z"),)
    )
    counters.observe("ml/a", _parsed(preempted), "")  # admission gone: the queue it had
    again = _workload(
        "a",
        1,
        conditions=(_condition("Admitted", "True", at="2030-01-01T00:02:00Z"),),
        admitted_to="cq",
    )
    counters.observe("ml/a", _parsed(again), "cq")
    assert counters.snapshot() == ({"cq": 2}, {"cq": 1})
    new = _parsed(_workload("new", 1, conditions=(_condition("Admitted", "True"),)))
    counters.observe("ml/new", new, "cq")
    counters.forget_except({"ml/a"})  # "ml/new" observed, not yet held by the watch
    counters.observe("ml/new", new, "cq")
    assert counters.snapshot()[0] == {"cq": 3}, "observed again: not counted again"
    counters.forget_except({"ml/a", "ml/new"})
    counters.observe("ml/a", None)
    assert counters.snapshot() == ({"cq": 3}, {"cq": 1}), "counters never go down"


def _view(pods: list[Any], nodes: list[Any] | None = None) -> ClusterView:
    parsed = [parse_pod(p) for p in pods]
    return ClusterView.build(
        nodes if nodes is not None else _nodes(), [p for p in parsed if p], (), SETTINGS
    )


def _pending(view: ClusterView, kueue: KueueObjects) -> dict[tuple[str, str, str, str], Any]:
    return dict(KueueJudge().judge(view, kueue).pending)


def test_waiting_for_quota_keeps_kueues_reason_unless_no_node_ever_fits() -> None:
    quota = (_condition("QuotaReserved", "False", "Pending"),)
    fits_later = _parsed(_workload("small", 4, conditions=quota))
    too_big = _parsed(_workload("big", 8, count=2, conditions=quota))
    pending = _pending(_view([]), _kueue(fits_later, too_big))
    assert pending == {
        ("cq", "ml", "lq", "Pending"): (1, 4, fits_later.created),
        ("cq", "ml", "lq", "insufficient_gpus"): (1, 16, too_big.created),
    }
    # the flavor's nodes are of a type no node has: ours again, never Kueue's
    pending = _pending(_view([]), _kueue(fits_later, labels={"nvidia.com/gpu.product": "B200"}))
    assert list(pending) == [("cq", "ml", "lq", "gpu_type_unavailable")]
    # a flavor not seen: unknown is not never
    unknown = _kueue(too_big)
    unknown = KueueObjects(unknown.workloads, unknown.local_queues, unknown.queues, {}, {})
    assert list(_pending(_view([]), unknown)) == [("cq", "ml", "lq", "Pending")]


def test_admitted_workloads_wait_for_their_pods_placement_and_name_their_pods() -> None:
    admitted = (_condition("QuotaReserved", "True"), _condition("Admitted", "True"))
    workload = _parsed(_workload("a", 4, conditions=admitted, admitted_to="cq"))
    pod = make_gpu_pod("a-0", 4, node_selector=H100_LABELS)
    pod["metadata"]["ownerReferences"] = [{"uid": JOB_UID, "controller": True}]
    busy = make_gpu_pod("other", 4, node="n0"), make_gpu_pod("other2", 4, node="n1")
    judged = KueueJudge().judge(_view([pod, *busy]), _kueue(workload))
    assert dict(judged.pending) == {
        ("cq", "ml", "lq", "insufficient_gpus"): (1, 4, workload.created)
    }
    assert judged.queue_pods == (("ml", "a-0", "cq", "lq"),)
    assert judged.admissions == {"cq": 0} and judged.queue_cohorts == {"cq": "research"}
    # room on a node: not waiting
    judged = KueueJudge().judge(_view([pod, busy[0]]), _kueue(workload))
    assert judged.pending == {}
    # no pod yet: its pod set in the assigned flavor stands in, judged as its pods would be
    big = _parsed(_workload("b", 8, conditions=admitted, admitted_to="cq", owner="other-job"))
    assert list(KueueJudge().judge(_view([]), _kueue(big)).pending) == [
        ("cq", "ml", "lq", "fragmented")  # 8 free in all, 4 per node: what its pods would get
    ]


def test_a_kueue_gated_plain_pod_counts_under_its_workloads_reason() -> None:
    gate = "kueue.x-k8s.io/admission"
    plain = make_gpu_pod("plain", 1, gates=(gate, "kueue.x-k8s.io/topology"), uid="pod-uid")
    other = make_gpu_pod("held", 1, gates=("example.com/other",))
    workload = _parsed(
        _workload(
            "pod-plain",
            1,
            conditions=(_condition("QuotaReserved", "False", "Pending"),),
            owner="pod-uid",
        )
    )
    view = _view([plain, other])
    judged = KueueJudge().judge(view, _kueue(workload))
    assert judged.pod_reasons == {("ml", "plain"): "Pending"}
    state = ClusterState(view, {}, 1893456000.0, kueue=judged)
    families = {f.name: f for f in cluster_families(state)}
    reasons = {s.labels["reason"]: s.value for s in families["kube_gpu_pending_pods"].samples}
    assert reasons == {"Pending": 1.0, "gated": 1.0}
    nodes = {tuple(s.labels.values()): s.value for s in families["kube_gpu_flavor_nodes"].samples}
    assert nodes == {("h100", GPU): 2.0}
    info = [s.labels for s in families["kube_gpu_queue_info"].samples]
    assert info == [{"cluster_queue": "cq", "cohort": "research"}]
    for counter in ("kube_gpu_queue_admissions", "kube_gpu_queue_preemptions"):
        assert [
            (s.labels, s.value) for s in families[counter].samples if s.name.endswith("_total")
        ] == [({"cluster_queue": "cq"}, 0.0)]


def test_the_empty_nodes_view_is_kept_while_no_node_changes() -> None:
    """Its cache of classifications then serves every cycle's pod sets again."""
    nodes = _nodes()
    empty = EmptyNodes()
    first = empty.view(_view([make_gpu_pod("a", 1, node="n0")], nodes))
    assert all(state.free_of(GPU) == 4 for state in first.nodes.values()), "nothing bound"
    assert empty.view(_view([], nodes)) is first
    changed = [nodes[0], parse_node(make_node("n1", 2))]
    again = empty.view(_view([], changed))
    assert again is not first and again.nodes["n1"].free_of(GPU) == 2
    assert again.nodes["n0"] is first.nodes["n0"], "an unchanged node's state is kept"
