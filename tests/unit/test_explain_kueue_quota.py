"""explain's model of Kueue's flavor assigner (v0.17): quota left in a queue and its cohort,
flavor order, taints and node labels of flavors, and the reading of Kueue's objects."""

from __future__ import annotations

from typing import Any

from kube_gpu_exporter.exporter.cluster.explain.kueue_objects import (
    parse_cluster_queue,
    parse_flavor,
    pod_sets_of_job,
    queue_name,
    usage_of,
    with_flavor,
    workload_state,
)
from kube_gpu_exporter.exporter.cluster.explain.kueue_quota import (
    ClusterQueue,
    Limit,
    ResourceGroup,
    assign,
    room,
)

GPU = "nvidia.com/gpu"


def _cq(name: str, flavors: dict[str, Limit], cohort: str = "", **extra: Any) -> ClusterQueue:
    group = ResourceGroup((GPU,), tuple((f, {GPU: limit}) for f, limit in flavors.items()))
    return ClusterQueue(name, cohort, (group,), **extra)


def _flavor(name: str, labels: dict[str, str] | None = None, **spec: Any) -> Any:
    flavor = parse_flavor(
        {"metadata": {"name": name}, "spec": {"nodeLabels": labels or {}, **spec}}
    )
    assert flavor is not None
    return flavor


def _job(gpus: int, parallelism: int = 1, completions: int | None = None, **pod: Any) -> Any:
    spec: dict[str, Any] = {
        "parallelism": parallelism,
        "template": {
            "spec": {
                "containers": [{"name": "c", "resources": {"limits": {GPU: str(gpus)}}}],
                **pod,
            }
        },
    }
    if completions is not None:
        spec["completions"] = completions
    return {
        "metadata": {"name": "j", "namespace": "ns", "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
        "spec": spec,
    }


FLAVORS = {"a": _flavor("a", {"pool": "a"}), "b": _flavor("b", {"pool": "b"})}


def test_a_queue_alone_fits_within_nominal_and_says_how_many_more() -> None:
    cq = _cq("cq", {"a": Limit(4)})
    queues = {"cq": cq}
    fits = assign(pod_sets_of_job(_job(2, 2)), cq, queues, FLAVORS, {("cq", "a", GPU): 0})
    assert fits.fits and fits.flavors == ({GPU: "a"},) and not fits.borrows
    full = assign(pod_sets_of_job(_job(2, 2)), cq, queues, FLAVORS, {("cq", "a", GPU): 1})
    assert full.message == (
        "couldn't assign flavors to pod set main: insufficient unused quota for "
        f"{GPU} in flavor a, 1 more needed"
    )


def test_completions_below_parallelism_count_and_flavor_order() -> None:
    assert pod_sets_of_job(_job(1, 4, completions=2))[0].count == 2
    cq = _cq("cq", {"a": Limit(2), "b": Limit(8)})
    usage = {("cq", "a", GPU): 1}
    result = assign(pod_sets_of_job(_job(2)), cq, {"cq": cq}, FLAVORS, usage)
    assert result.flavors == ({GPU: "b"},), "the first flavor with room"
    assert "insufficient unused quota for nvidia.com/gpu in flavor a" in result.tried[0]


def test_cohort_lends_within_the_borrowing_limit() -> None:
    mine = _cq("mine", {"a": Limit(2, borrowing_limit=1)}, cohort="c")
    other = _cq("other", {"a": Limit(4)}, cohort="c")
    queues = {"mine": mine, "other": other}
    usage = {("other", "a", GPU): 1}
    space = room(mine, queues, usage, "a", GPU)
    assert (space.available, space.potential, space.lendable) == (3, 3, 1)
    assert assign(pod_sets_of_job(_job(3)), mine, queues, FLAVORS, usage).borrows
    over = assign(pod_sets_of_job(_job(4)), mine, queues, FLAVORS, usage)
    assert "> maximum capacity (3)" in over.message
    unlimited = _cq("mine", {"a": Limit(2)}, cohort="c")
    queues["mine"] = unlimited
    assert room(unlimited, queues, usage, "a", GPU).available == 5
    assert room(unlimited, queues, {**usage, ("other", "a", GPU): 4}, "a", GPU).available == 2


def test_a_lending_limit_keeps_part_of_a_queue_to_itself() -> None:
    mine = _cq("mine", {"a": Limit(2)}, cohort="c")
    other = _cq("other", {"a": Limit(4, lending_limit=1)}, cohort="c")
    queues = {"mine": mine, "other": other}
    assert room(mine, queues, {}, "a", GPU).available == 3
    assert room(other, queues, {}, "a", GPU).available == 6


def test_try_next_flavor_prefers_a_flavor_without_borrowing() -> None:
    cq = _cq("cq", {"a": Limit(1), "b": Limit(4)}, cohort="c")
    lender = _cq("lender", {"a": Limit(4)}, cohort="c")
    queues = {"cq": cq, "lender": lender}
    job = pod_sets_of_job(_job(2))
    assert assign(job, cq, queues, FLAVORS, {}).flavors == ({GPU: "a"},)
    picky = _cq("cq", {"a": Limit(1), "b": Limit(4)}, "c", when_can_borrow="TryNextFlavor")
    queues["cq"] = picky
    assert assign(job, picky, queues, FLAVORS, {}).flavors == ({GPU: "b"},)


def test_flavor_taints_and_labels_pass_over_a_flavor() -> None:
    taint = {"key": "gpu-pool", "value": "a", "effect": "NoSchedule"}
    flavors = {"a": _flavor("a", {"pool": "a"}, nodeTaints=[taint]), "b": FLAVORS["b"]}
    cq = _cq("cq", {"a": Limit(8), "b": Limit(8)})
    queues = {"cq": cq}
    result = assign(pod_sets_of_job(_job(1)), cq, queues, flavors, {})
    assert result.flavors == ({GPU: "b"},)
    assert result.tried == ("untolerated taint {gpu-pool a NoSchedule <nil>} in flavor a",)
    toleration = [{"key": "gpu-pool", "operator": "Exists"}]
    tolerant = assign(pod_sets_of_job(_job(1, tolerations=toleration)), cq, queues, flavors, {})
    assert tolerant.flavors == ({GPU: "a"},)
    flavors["a"] = _flavor("a", {"pool": "a"}, nodeTaints=[taint], tolerations=toleration)
    assert assign(pod_sets_of_job(_job(1)), cq, queues, flavors, {}).flavors == ({GPU: "a"},)
    wants_b = pod_sets_of_job(_job(1, nodeSelector={"pool": "b", "zone": "x"}))
    assert assign(wants_b, cq, queues, FLAVORS, {}).flavors == ({GPU: "b"},), (
        "zone is no flavor's label: not matched"
    )
    nowhere = pod_sets_of_job(_job(1, nodeSelector={"pool": "c"}))
    assert assign(nowhere, cq, queues, FLAVORS, {}).message == (
        "couldn't assign flavors to pod set main: flavor a doesn't match node affinity, "
        "flavor b doesn't match node affinity"
    )


def test_an_uncovered_resource_or_an_inactive_queue_admits_nothing() -> None:
    cq = _cq("cq", {"a": Limit(8)})
    asks_cpu = pod_sets_of_job(
        _job(1, containers=[{"name": "c", "resources": {"requests": {"cpu": "1", GPU: "1"}}}])
    )
    assert (
        "resource cpu unavailable in ClusterQueue"
        in assign(asks_cpu, cq, {"cq": cq}, FLAVORS, {}).message
    )
    stopped = _cq("cq", {"a": Limit(8)}, active=False)
    assert not assign(pod_sets_of_job(_job(1)), stopped, {"cq": stopped}, FLAVORS, {}).fits


def test_kueue_objects_are_read_as_kueue_writes_them() -> None:
    cq = parse_cluster_queue(
        {
            "metadata": {"name": "cq"},
            "spec": {
                "cohortName": "c",
                "preemption": {"withinClusterQueue": "LowerPriority"},
                "resourceGroups": [
                    {
                        "coveredResources": [GPU],
                        "flavors": [
                            {
                                "name": "a",
                                "resources": [
                                    {"name": GPU, "nominalQuota": 4, "borrowingLimit": "2"}
                                ],
                            }
                        ],
                    }
                ],
            },
            "status": {"conditions": [{"type": "Active", "status": "True"}]},
        }
    )
    assert cq is not None and cq.cohort == "c" and cq.active
    assert cq.limit("a", GPU) == Limit(4, 2, None)
    assert cq.preempting == ("withinClusterQueue LowerPriority",)
    admitted = {
        "metadata": {"namespace": "ns", "name": "w1"},
        "status": {
            "conditions": [{"type": "QuotaReserved", "status": "True"}],
            "admission": {
                "clusterQueue": "cq",
                "podSetAssignments": [{"flavors": {GPU: "a"}, "resourceUsage": {GPU: "3"}}],
            },
        },
    }
    finished = {
        **admitted,
        "metadata": {"namespace": "ns", "name": "w2"},
        "status": {
            **admitted["status"],
            "conditions": [
                {"type": "QuotaReserved", "status": "True"},
                {"type": "Finished", "status": "True"},
            ],
        },
    }
    assert usage_of([admitted, finished]) == {("cq", "a", GPU): 3}
    assert usage_of([admitted], skip="ns/w1") == {}
    assert workload_state(admitted).flavors == ({GPU: "a"},)
    assert queue_name(_job(1)) == "lq"
    flavored = with_flavor({"spec": {"nodeSelector": {"x": "1"}}}, _flavor("f", {"pool": "f"}))
    assert flavored["spec"]["nodeSelector"] == {"x": "1", "pool": "f"}
