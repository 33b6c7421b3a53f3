"""`kube-gpu-exporter cluster` against the real Kueue v0.17.0 and the real scheduler: why a
Kueue-queued GPU job is not running, in one reason, and what each queue admitted, preempted
and runs.

The bench: two H100 nodes of 4 GPUs (the GPU Operator's taint), one A100 node of 4 also
tainted `dedicated=a100`; a ResourceFlavor for each (their tolerations cover the GPU taint,
not `dedicated`), a Cohort whose two ClusterQueues lend and borrow, a ClusterQueue that
preempts lower priorities within itself, one over the A100 flavor, one too small, one
without quota; Kueue's `batch/job` and `pod` integrations. Then, with the exporter running:

- a Job borrows its cohort's quota and is admitted (counted), its pod bound and tied to
  its queue (`kube_gpu_queue_pod_info`);
- a high-priority Job preempts a low one (one preemption, two admissions); the low one
  waits again, in Kueue's words (`Pending`);
- a Job admitted to the A100 flavor whose pod the scheduler cannot place: our reason,
  `taint_not_tolerated`, and the flavor counts 0 nodes;
- a Job asking 8 GPUs in one pod waits for quota, but no node has 8: `insufficient_gpus`;
- a plain pod gated by Kueue for want of quota counts under `Pending` in
  `kube_gpu_pending_pods`, not `gated`.

And on a server whose Kueue CRDs serve only v1beta1, the flavors, cohorts and queues (the
cohort in `spec.cohort`) are read on v1beta1."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from control_plane import ControlPlane, run_control_plane
from kueue import Kueue, install_v1beta1_only
from kueue_bench import (
    GPU,
    GPU_TOLERATION,
    PRODUCT,
    QUEUE_LABEL,
    V1BETA2,
    add_queues,
    cluster_queue_spec,
    flavor_quota,
    gpu_job,
    gpu_pod_spec,
    h100_and_a100,
    job_pods,
    kueue_bench,
    kueue_object,
    listed_once,
    wait_active,
    wait_default_service_account,
)

from kube_gpu_exporter.demo.kube_api.cluster_objects import A100, H100
from kube_gpu_exporter.exporter.cluster.kueue_objects import (
    Flavor,
    parse_cohort,
    parse_flavor,
    parse_queue,
)
from kube_gpu_exporter.exporter.cluster.settings import ClusterSettings
from support import run_exporter, samples, values, wait_until

pytestmark = pytest.mark.k8s

NAMESPACE = "research"
# ClusterQueue → (flavor, nominal GPUs, cohort, preemption within the queue)
QUEUES = {
    "cq-lender": ("h100", 4, "research", None),
    "cq-borrower": ("h100", 0, "research", None),
    "cq-prio": ("h100", 2, "", "LowerPriority"),
    "cq-a100": ("a100", 4, "", None),
    "cq-small": ("h100", 4, "", None),
    "cq-zero": ("h100", 0, "", None),
}

Series = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ControlPlane, Kueue]]:
    with kueue_bench(
        tmp_path_factory.mktemp("kueue-bench"), integrations=("batch/job", "pod")
    ) as bench:
        yield bench


def _setup(plane: ControlPlane) -> None:
    h100_and_a100(plane, h100_nodes=2)
    for name, value in (("low", 100), ("high", 1000)):
        plane.ok(
            "POST",
            "/apis/scheduling.k8s.io/v1/priorityclasses",
            {"metadata": {"name": name}, "value": value},
        )
    plane.ok("POST", f"{V1BETA2}/cohorts", kueue_object("Cohort", "research", {}))
    plane.ok("POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    for queue, (flavor, gpus, cohort, preemption) in QUEUES.items():
        spec = cluster_queue_spec(flavor_quota(flavor, gpus))
        if cohort:
            spec["cohortName"] = cohort
        if preemption:
            spec["preemption"] = {"withinClusterQueue": preemption}
        add_queues(plane, NAMESPACE, queue, _local(queue), spec)
    wait_active(plane, list(QUEUES))
    wait_default_service_account(plane, NAMESPACE)


def _local(queue: str) -> str:
    return queue.replace("cq-", "lq-")


def _job(plane: ControlPlane, queue: str, gpus: int, priority: str = "") -> str:
    name = f"job-{uuid.uuid4().hex[:6]}"
    plane.ok(
        "POST",
        f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs",
        gpu_job(name, _local(queue), gpu_pod_spec(gpus, priority=priority)),
    )
    return name


def _scrape(exporter: Any) -> Series:
    status, _, body = exporter.get()
    return samples(body) if status == 200 else {}


def _served(exporter: Any, what: str, name: str, want: float, **labels: str) -> Series:
    """Polls /metrics until `name{labels}` is `want`; returns that scrape."""

    def check() -> Series | None:
        parsed = _scrape(exporter)
        return parsed if values(parsed, name, **labels) == [want] else None

    try:
        return wait_until(check, timeout=90, what=what)  # type: ignore[no-any-return]
    except AssertionError:
        found = {k: v for k, v in _scrape(exporter).items() if k[0].startswith("kube_gpu_")}
        raise AssertionError(f"{what}: {name}{labels} != {want}; served: {found}") from None


def test_cluster_view_on_kueue_flavors_cohorts_admissions_preemptions_and_reasons(
    bench: tuple[ControlPlane, Kueue], tmp_path: Path
) -> None:
    plane, kueue = bench
    _setup(plane)
    args = [f"--kubernetes.kubeconfig={plane.kubeconfig}", "--cluster.interval=200ms"]
    with run_exporter(args, tmp_path, command="cluster") as exporter:
        # the flavors' nodes: both H100s; the A100 is tainted `dedicated`, untolerated
        parsed = _served(exporter, "flavor nodes", "kube_gpu_flavor_nodes", 2, flavor="h100")
        assert values(parsed, "kube_gpu_flavor_nodes", flavor="a100", resource=GPU) == [0.0]
        for queue, (_, _, cohort, _) in QUEUES.items():
            info = values(parsed, "kube_gpu_queue_info", cluster_queue=queue, cohort=cohort)
            assert info == [1.0], queue
        for resource in ("resourceflavors", "cohorts"):
            assert values(parsed, "kube_gpu_cluster_watch_up", resource=resource) == [1.0]
        assert values(parsed, "kube_gpu_cluster_watched_objects", resource="cohorts") == [1.0]
        assert values(parsed, "kube_gpu_queue_admissions_total", cluster_queue="cq-prio") == [0.0]

        # borrowing from the cohort: admitted on the lender's quota, its pod bound
        borrower = _job(plane, "cq-borrower", 2)
        [pod] = wait_until(
            lambda: (
                [p for p in job_pods(plane, NAMESPACE, borrower) if p["spec"].get("nodeName")]
                or None
            ),
            timeout=90,
            what="the borrowing Job's pod bound",
        )
        labels = {"cluster_queue": "cq-borrower", "local_queue": "lq-borrower"}
        pod_name = pod["metadata"]["name"]
        _served(exporter, "its pod tied", "kube_gpu_queue_pod_info", 1, pod=pod_name, **labels)
        parsed = _served(
            exporter, "borrowed use", "kube_gpu_queue_used_quota", 2, cluster_queue="cq-borrower"
        )
        assert values(parsed, "kube_gpu_queue_admissions_total", cluster_queue="cq-borrower") == [
            1.0
        ]
        assert values(parsed, "kube_gpu_queue_nominal_quota", cluster_queue="cq-borrower") == [0.0]

        # a high priority preempts a low one within cq-prio
        low = _job(plane, "cq-prio", 2, "low")
        wait_until(
            lambda: (
                [p for p in job_pods(plane, NAMESPACE, low) if p["spec"].get("nodeName")] or None
            ),
            timeout=90,
            what="the low-priority Job's pod bound",
        )
        _job(plane, "cq-prio", 2, "high")
        parsed = _served(
            exporter,
            "one preemption",
            "kube_gpu_queue_preemptions_total",
            1,
            cluster_queue="cq-prio",
        )
        _served(
            exporter,
            "two admissions",
            "kube_gpu_queue_admissions_total",
            2,
            cluster_queue="cq-prio",
        )
        # the preempted one waits again for quota, in Kueue's words (it would fit a node)
        _served(
            exporter,
            "the preempted Job waiting",
            "kube_gpu_pending_workloads",
            1,
            cluster_queue="cq-prio",
            reason="Pending",
        )

        # admitted to the A100 flavor, but its pod cannot be placed: our reason (the same
        # before Kueue admits it: no node of the flavor could ever take it)
        a100 = _job(plane, "cq-a100", 1)
        _served(
            exporter,
            "the A100 admission",
            "kube_gpu_queue_admissions_total",
            1,
            cluster_queue="cq-a100",
        )
        [pod] = wait_until(
            lambda: job_pods(plane, NAMESPACE, a100) or None, what="the A100 Job's pod"
        )
        assert pod["spec"]["nodeSelector"] == {PRODUCT: A100}, "the flavor's labels, by Kueue"
        pod_labels = {"namespace": NAMESPACE, "pod": pod["metadata"]["name"]}
        _served(exporter, "the A100 pod tied", "kube_gpu_queue_pod_info", 1, **pod_labels)
        parsed = _served(
            exporter,
            "admitted, unplaceable",
            "kube_gpu_pending_workloads",
            1,
            cluster_queue="cq-a100",
            reason="taint_not_tolerated",
        )
        # the pod itself, as kube_gpu_pending_pods counts it, says the same
        assert values(parsed, "kube_gpu_pending_pods", reason="taint_not_tolerated") == [1.0]
        assert values(parsed, "kube_gpu_queue_pod_info", cluster_queue="cq-a100") == [1.0]

        # waits for quota, yet no node has 8 GPUs: quota will never help
        _job(plane, "cq-small", 8)
        _served(
            exporter,
            "never fits",
            "kube_gpu_pending_workloads",
            1,
            cluster_queue="cq-small",
            reason="insufficient_gpus",
        )

        # a plain pod Kueue gates for want of quota: its Workload's reason, not `gated`
        plain = f"plain-{uuid.uuid4().hex[:6]}"
        made = plane.ok(
            "POST",
            f"/api/v1/namespaces/{NAMESPACE}/pods",
            {
                "metadata": {"name": plain, "labels": {QUEUE_LABEL: "lq-zero"}},
                "spec": gpu_pod_spec(1),
            },
        )
        gates = [g["name"] for g in made["spec"].get("schedulingGates") or []]
        # v0.17.0 adds its topology gate beside the admission one, Kueue's both
        assert set(gates) == {"kueue.x-k8s.io/admission", "kueue.x-k8s.io/topology"}, gates
        parsed = _served(
            exporter,
            "the gated pod under its Workload's reason",
            "kube_gpu_pending_pods",
            1,
            namespace=NAMESPACE,
            reason="Pending",
        )
        assert values(parsed, "kube_gpu_pending_pods", namespace=NAMESPACE, reason="gated") == []
        assert values(
            parsed, "kube_gpu_pending_workloads", cluster_queue="cq-zero", reason="Pending"
        ) == [1.0]
        assert kueue.version == "v0.17.0"


def test_flavors_cohorts_and_queues_on_a_server_with_only_v1beta1(tmp_path: Path) -> None:
    """Kueue before v1beta2: ResourceFlavors, Cohorts and ClusterQueues served as v1beta1
    only, a ClusterQueue's cohort in `spec.cohort`; the watches fall back and read them."""
    with run_control_plane(tmp_path / "plane") as plane:
        install_v1beta1_only(plane, ("resourceflavors", "cohorts", "clusterqueues"))
        old = "/apis/kueue.x-k8s.io/v1beta1"
        where = {"nodeLabels": {PRODUCT: H100}, "tolerations": [GPU_TOLERATION]}
        plane.ok("POST", f"{old}/resourceflavors", _v1beta1("ResourceFlavor", "h100", where))
        plane.ok("POST", f"{old}/cohorts", _v1beta1("Cohort", "research", {"parentName": "all"}))
        group = {"name": "h100", "resources": [{"name": GPU, "nominalQuota": 8}]}
        spec = {
            "cohort": "research",
            "namespaceSelector": {},
            "resourceGroups": [{"coveredResources": [GPU], "flavors": [group]}],
        }
        plane.ok("POST", f"{old}/clusterqueues", _v1beta1("ClusterQueue", "cq", spec))

        settings = ClusterSettings()
        parsers: dict[str, Any] = {
            "resourceflavors": parse_flavor,
            "cohorts": parse_cohort,
            "clusterqueues": lambda obj: parse_queue(obj, settings),
        }
        held, versions = listed_once(plane, parsers)
        assert set(versions.values()) == {"v1beta1"}
        [flavor] = held["resourceflavors"].values()
        assert isinstance(flavor, Flavor) and flavor.node_labels == {PRODUCT: H100}
        assert held["cohorts"] == {"research": "all"}
        queue = held["clusterqueues"]["cq"]
        assert queue.cohort == "research"
        assert [(q.flavor, q.resource, q.nominal) for q in queue.quotas] == [("h100", GPU, 8)]


def _v1beta1(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": spec,
    }
