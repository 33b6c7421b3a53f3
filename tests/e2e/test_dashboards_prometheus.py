"""Every dashboard query, variables filled in, run against Debian's Prometheus scraping the
exporter on the demo scenario, with a kubelet (podresources/v1 over gRPC) whose pods hold some
of its GPUs and with the generated recording rules loaded: each query returns data, and
where the scenario fixes its answer (EXPECTED: counts, utilization, power, temperatures,
clocks, allocations, quotas, pending pods, fragmentation, per-pod use), that answer.

The scheduling panels read the cluster view: `kube-gpu-exporter cluster` runs against the test
API server with a fragmented pending pod, a quota, two pods scheduled one after the other (so
the wait percentiles have a rate) and a preempted pod. The queries that read
kube-state-metrics (pending pods per pod) run against a fixed exposition of those series,
scraped as the `kube-state-metrics` job.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from cluster_objects import (
    A100,
    CREATED,
    H100,
    PRODUCT,
    disrupted,
    make_gpu_pod,
    make_node,
    make_quota,
    scheduled,
)
from kube_gpu_exporter.demo.kube_api import KubeApiServer
from kube_gpu_exporter.demo.kube_api.kueue_objects import (
    make_cluster_queue,
    make_local_queue,
    make_resource_flavor,
    make_workload,
)
from kube_gpu_exporter.grafana.dashboards import build_all
from kube_gpu_exporter.rules.config import Config
from kubelet_server import FakeKubelet, container, devices, pod
from prometheus_server import Generation, Prometheus, run_prometheus
from support import Exporter, run_exporter, serve_exposition, values, wait_until

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "exporter" / "simulated" / "scenarios" / "demo.yaml"
RULES = REPO / "deploy" / "rules.yaml"


def _queries() -> list[Any]:
    params = []
    for dashboard in build_all(Config()):
        for panel in dashboard.panels():
            for ref, target in zip("ABCDEFGH", panel.targets, strict=False):
                ident = f"{dashboard.uid}/{panel.title}/{ref}"
                params.append(pytest.param(target.expr, id=ident))
        for variable in dashboard.variables:
            if variable.kind == "query":
                ident = f"{dashboard.uid}/${variable.name}"
                params.append(pytest.param(variable.query, id=ident))
    return params


def fill(expr: str, target: str) -> str:
    """Grafana's variables as a test dashboard would set them."""
    expr = re.sub(r"label_values\((.*),\s*(\w+)\)$", r"count by (\2) (\1)", expr, flags=re.S)
    values = {
        "__rate_interval": "1m",
        "__rate_interval_ms": "60000",
        "__interval": "15s",
        "__range": "5m",
        "node": target,
        "cluster": ".*",
        "gpu": ".*",
        "namespace": ".*",
        "pod": ".*",
    }
    return re.sub(r"\$\{?(\w+)\}?", lambda m: values[m.group(1)], expr)


GPU = "GPU-{0:08x}-0000-4000-8000-{0:012x}".format  # the demo's uuids
MIG_3G = "MIG-00030001-0000-4000-8000-000000000000"
MIG_2G = "MIG-00030005-0000-4000-8000-000000000001"

# What kube-state-metrics says of the demo's pods: a pod Pending on a GPU.
KUBE_STATE_METRICS = "".join(
    f"{series} {value}\n"
    for series, value in (
        ('kube_pod_status_phase{namespace="ml",pod="trainer-1",phase="Pending"}', 1),
        ('kube_pod_status_phase{namespace="ml",pod="trainer-1",phase="Running"}', 0),
        (
            'kube_pod_container_resource_requests{namespace="ml",pod="trainer-1",'
            'container="main",resource="nvidia_com_gpu",unit="integer"}',
            2,
        ),
    )
)


@contextmanager
def cluster_view(tmp: Path) -> Iterator[tuple[KubeApiServer, Exporter]]:
    """The cluster view over three H100 nodes, two with one free GPU (the third's is the
    preempted pod's), a pod wanting two (fragmented) and a GPU quota."""
    with KubeApiServer(kueue_versions=("v1beta2",)) as api:
        queue_a_workload(api)
        for name in ("gpu-a", "gpu-b", "gpu-c"):
            api.put_node(make_node(name))
            api.put(make_gpu_pod(f"holder-{name}", 7, "batch", node=name))
        api.put(make_gpu_pod("train", 2, "frag"))
        api.put_quota(make_quota("gpu-quota", "ml", hard=8, used=2))
        api.put(
            disrupted(make_gpu_pod("victim", 1, "batch", node="gpu-a"), "PreemptionByScheduler")
        )
        kubeconfig = api.write_kubeconfig(tmp / "kubeconfig")
        args = [f"--kubernetes.kubeconfig={kubeconfig}", "--cluster.interval=200ms"]
        with run_exporter(args, tmp / "cluster", command="cluster") as view:
            yield api, view


def queue_a_workload(api: KubeApiServer) -> None:
    """Kueue's side: a flavor on the H100 nodes, a ClusterQueue with 4 of them (8 more to
    borrow) all used, and a Job of two 2-GPU pods waiting in it for quota; a second queue of
    1 GPU (no borrowing limit), used up by the Job whose pod is lab/notebook-a — the kubelet's
    idle notebook (bound to a node the view does not know, so its free GPUs stay as they
    are): KubeGpuQueueQuotaExhaustedWhileIdle's join on real series."""
    api.put_kueue("resourceflavors", make_resource_flavor("h100", {PRODUCT: H100}))
    quota = [("h100", "nvidia.com/gpu", 4, 8)]
    used = {("h100", "nvidia.com/gpu"): 4}
    api.put_kueue("clusterqueues", make_cluster_queue("batch-cq", quota, used=used))
    api.put_kueue("localqueues", make_local_queue("batch", "batch", "batch-cq"))
    waiting = ("Pending", "insufficient unused quota for nvidia.com/gpu in flavor h100")
    workload = make_workload("job-sweep", "batch", "batch", pods=2, gpus_each=2, waiting=waiting)
    api.put_kueue("workloads", workload)
    one = [("h100", "nvidia.com/gpu", 1, None)]
    used_up = make_cluster_queue("notebooks-cq", one, used={("h100", "nvidia.com/gpu"): 1})
    api.put_kueue("clusterqueues", used_up)
    api.put_kueue("localqueues", make_local_queue("notebooks", "lab", "notebooks-cq"))
    job_uid = "5e1c0b1e-0000-4000-8000-00000000a001"
    admitted = ("notebooks-cq", "h100", CREATED)
    notebook = make_workload(
        "job-notebook", "lab", "notebooks", waiting=None, admitted=admitted,
        owner=("notebook", job_uid),
    )  # fmt: skip
    api.put_kueue("workloads", notebook)
    pod = make_gpu_pod("notebook-a", 1, "lab", node="elsewhere")
    pod["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "notebook", "uid": job_uid,
         "controller": True},
    ]  # fmt: skip
    api.put(pod)
    # A flavor for A100s, which no node of this cluster is: its quota can never be used.
    api.put_kueue("resourceflavors", make_resource_flavor("a100", {PRODUCT: A100}))
    stranded = make_cluster_queue("a100-cq", [("a100", "nvidia.com/gpu", 2, None)])
    api.put_kueue("clusterqueues", stranded)


def schedule_one(api: KubeApiServer, view: Exporter, name: str, waited: int) -> None:
    """A GPU pod of namespace ml seen pending by the view, then bound `waited` s after its
    creation: one scheduling-wait observation. It is bound to a node the view does not
    know, so the free GPUs (and the fragmented pod's reason) stay as they are."""
    pending = make_gpu_pod(name, 1, "ml")
    api.put(pending)
    wait_until(
        lambda: values(view.metrics(), "kube_gpu_pending_pods", namespace="ml") or None,
        what=f"the view sees {name} pending",
    )
    at = CREATED.replace("10:00:00", f"10:00:{waited:02d}")
    api.put(scheduled(pending, "elsewhere", at))


@pytest.fixture(scope="module")
def prometheus(
    tmp_path_factory: pytest.TempPathFactory, generation: Generation
) -> Iterator[tuple[Prometheus, str]]:
    """The demo node scraped every second, with the generated rules evaluated every second.

    Added to the demo: Xids on two GPUs every 15 s (so the Xid panels, which count the events
    of the rate interval, have series however long the tests take) and a kubelet whose pods
    hold a busy GPU, an idle GPU and a MIG instance, leaving one GPU free.
    """
    tmp = tmp_path_factory.mktemp("dashboards")
    scenario = yaml.safe_load(DEMO.read_text())
    # The demo's node held still (its story's ramps and events would move the values EXPECTED
    # checks).
    for device in scenario["devices"]:
        device.pop("timeline", None)
    for device, xid in ((0, 13), (2, 79)):
        repeated = [{"at": at, "xid": [xid]} for at in range(0, 3600, 15)]
        scenario["devices"][device]["timeline"] = repeated
    path = tmp / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario))
    socket = tmp / "kubelet.sock"
    args = [
        "--simulate",
        str(path),
        "--collector.interval=1s",
        f"--kubelet.pod-resources-socket={socket}",
        "--kubelet.interval=1s",
    ]
    with FakeKubelet(socket) as kubelet:
        kubelet.pods = [
            pod("ml", "trainer-0", container("main", devices("nvidia.com/gpu", GPU(0)))),
            pod("lab", "notebook-a", container("jupyter", devices("nvidia.com/gpu", GPU(1)))),
            pod("ml", "mig-0", container("main", devices("nvidia.com/mig-3g.20gb", MIG_3G))),
        ]
        kubelet.allocatable = [
            devices("nvidia.com/gpu", GPU(0), GPU(1), GPU(2)),
            devices("nvidia.com/mig-3g.20gb", MIG_3G),
            devices("nvidia.com/mig-2g.10gb", MIG_2G),
        ]
        (tmp / "cluster").mkdir()
        with (
            run_exporter(args, tmp) as exporter,
            serve_exposition(KUBE_STATE_METRICS) as ksm,
            cluster_view(tmp) as (api, view),
        ):
            target = f"127.0.0.1:{exporter.port}"
            jobs = {
                "kube-state-metrics": [ksm],
                "kube-gpu-exporter-cluster": [f"127.0.0.1:{view.port}"],
            }
            with run_prometheus(
                tmp, [target], rule_files=[RULES], extra_jobs=jobs, generation=generation
            ) as prom:
                prom.wait_for('count_over_time(nvidia_gpu_up{job="kube-gpu-exporter"}[1m]) >= 3', 7)
                prom.wait_for("cluster:nvidia_gpu_utilization_ratio:avg")
                # Two waits, scraped apart, so that their histogram has a rate.
                schedule_one(api, view, "first", 30)
                prom.wait_for("kube_gpu_scheduling_wait_seconds_count == 1")
                schedule_one(api, view, "second", 50)
                prom.wait_for(
                    'cluster_quantile:kube_gpu_scheduling_wait_seconds:histogram_quantile{quantile="0.95"}'
                )
                # The idle-hours subquery steps on 15-second boundaries: wait for the first.
                prom.wait_for("cluster:nvidia_gpu_idle_cost:sum1h", timeout=45)
                yield prom, target


GIB = 2**30
# The demo node held still (fixture): whole GPUs 0-2 and 4 are H100s (utilization 0.93, 0,
# 0.55, 0.71; framebuffer 61, 1, 40, 45 GiB; 612, 72, 450, 380 W; 71, 33, 64, 58 °C; limit
# 700 W); GPU 3 an A100 in MIG mode (180 W, 44 °C, limit 400 W, no utilization) whose 3g.20gb
# holds 12 GiB. trainer-0 holds GPU 0, notebook-a GPU 1, mig-0 the 3g.20gb (3/7 of a GPU);
# the kubelet advertises GPUs 0-2 and the two MIG instances. `serve --simulate` says so.
# The cluster view: three nodes with one free GPU each but gpu-a (the preempted pod's), a pod
# asking for two, a quota of 8 with 2 used, waits of 30 s and 50 s; kube-state-metrics one
# pending pod asking for 2 GPUs.
# Per query: the expected value of a one-sample answer, or {label value: value} by `label`.
Expected = float | tuple[str, dict[str, float]]
EXPECTED: dict[str, Expected] = {
    "kube-gpu-cluster/Simulated exporters/A": 1,
    "kube-gpu-cluster/GPUs/A": 5,
    "kube-gpu-cluster/Lost GPUs/A": 0,
    "kube-gpu-cluster/Utilization/A": (0.93 + 0 + 0.55 + 0.71) / 4,
    "kube-gpu-cluster/Allocated GPUs/A": 2 + 3 / 7,
    "kube-gpu-cluster/Free whole GPUs/A": 1,  # GPU 2; GPU 4 is not advertised
    "kube-gpu-cluster/Power per node/A": 612 + 72 + 450 + 180 + 380,
    "kube-gpu-cluster/Allocated and idle GPUs/A": 2 + 3 / 7,
    "kube-gpu-cluster/GPUs held per namespace against its quota/A": (
        "namespace",
        {"ml": 1 + 3 / 7, "lab": 1},
    ),
    "kube-gpu-cluster/GPUs held per namespace against its quota/B": ("namespace", {"ml": 8}),
    "kube-gpu-cluster/GPUs held per namespace against its quota/C": ("namespace", {"ml": 2}),
    "kube-gpu-cluster/Pending GPU pods/A": ("pod", {"trainer-1": 2}),
    "kube-gpu-cluster/Pending GPU pods by reason/A": ("reason", {"fragmented": 1}),
    "kube-gpu-cluster/Largest request that could schedule now/A": 1,
    "kube-gpu-cluster/Fragmentation of free GPUs/A": 1 - 1 / 2,
    "kube-gpu-cluster/Pending GPU workloads by queue and reason/A": ("reason", {"Pending": 1}),
    "kube-gpu-cluster/GPUs asked by pending workloads/A": ("cluster_queue", {"batch-cq": 4}),
    "kube-gpu-cluster/GPU quota per queue and flavor/A": (
        "cluster_queue",
        {"batch-cq": 4, "notebooks-cq": 1, "a100-cq": 2},
    ),
    "kube-gpu-cluster/GPU quota per queue and flavor/B": ("cluster_queue", {"batch-cq": 8}),
    "kube-gpu-cluster/GPU quota per queue and flavor/C": (
        "cluster_queue",
        {"batch-cq": 4, "notebooks-cq": 1},
    ),
    "kube-gpu-cluster/Workloads admitted and preempted per hour/A": (
        "cluster_queue",
        # admitted before the view started: not counted
        {"batch-cq": 0, "notebooks-cq": 0, "a100-cq": 0},
    ),
    "kube-gpu-cluster/Hottest GPU per node/A": 71,
    "kube-gpu-cluster/Driver versions/A": (
        "model",
        {"NVIDIA H100 80GB HBM3": 4, "NVIDIA A100-SXM4-40GB": 1},
    ),
    "kube-gpu-node/Simulated exporters/A": 1,
    "kube-gpu-node/Lost GPUs/A": 0,
    "kube-gpu-node/NVML/A": 1,
    "kube-gpu-node/Pod resources/A": 1,
    "kube-gpu-node/Utilization/A": ("gpu", {"0": 0.93, "1": 0.0, "2": 0.55, "4": 0.71}),
    "kube-gpu-node/Temperature/A": ("gpu", {"0": 71, "1": 33, "2": 64, "3": 44, "4": 58}),
    "kube-gpu-node/Power/A": ("gpu", {"0": 612, "1": 72, "2": 450, "3": 180, "4": 380}),
    "kube-gpu-node/Power/B": ("gpu", {"0": 700, "1": 700, "2": 700, "3": 400, "4": 700}),
    "kube-gpu-node/SM clock/A": (
        "gpu",
        {"0": 1980e6, "1": 345e6, "2": 1755e6, "3": 1410e6, "4": 1830e6},
    ),
    # GPM and PCIe rates: a reading the scenario leaves out of a GPU is 0 there.
    "kube-gpu-node/SM active/A": ("gpu", {"0": 0.86, "1": 0, "2": 0.44, "4": 0.37}),
    "kube-gpu-node/Tensor active/A": ("gpu", {"0": 0.61, "1": 0, "2": 0.29, "4": 0.22}),
    "kube-gpu-node/PCIe traffic/A": ("gpu", {"0": 52428800, "1": 0, "2": 0, "4": 0}),
    "kube-gpu-node/PCIe traffic/B": ("gpu", {"0": 838860800, "1": 0, "2": 0, "4": 0}),
    "kube-gpu-node/Utilization per pod/A": ("pod", {"trainer-0": 0.93, "notebook-a": 0.0}),
    "kube-gpu-workload/Simulated exporters/A": 1,
    "kube-gpu-workload/GPUs held/A": 2 + 3 / 7,
    "kube-gpu-workload/GPU quota/A": 8,
    "kube-gpu-workload/GPUs requested by pending pods/A": 2,
    "kube-gpu-workload/Framebuffer used/A": (61 + 1 + 12) * GIB,
    "kube-gpu-workload/Framebuffer used per pod/A": (
        "pod",
        {"trainer-0": 61 * GIB, "notebook-a": 1 * GIB, "mig-0": 12 * GIB},
    ),
}


# Answers known to be wrong today, each with why; strict: one that comes right fails until it
# is taken off this list.
# None now.
KNOWN_WRONG: dict[str, str] = {}


def _ids() -> set[str]:
    return {param.id for param in _queries()}


def test_every_expected_value_belongs_to_a_query() -> None:
    assert not set(EXPECTED) - _ids(), set(EXPECTED) - _ids()
    assert set(KNOWN_WRONG) <= set(EXPECTED)


@pytest.mark.parametrize("expr", _queries())
def test_every_dashboard_query_returns_data(
    prometheus: tuple[Prometheus, str], expr: str, request: pytest.FixtureRequest
) -> None:
    """Every query answers; where the scenario fixes its answer (EXPECTED), it is that."""
    prom, target = prometheus
    query = fill(expr, target)
    ident = request.node.callspec.id
    if ident in KNOWN_WRONG:
        request.applymarker(pytest.mark.xfail(reason=KNOWN_WRONG[ident], strict=True))
    result = answer(prom, query, EXPECTED.get(ident))
    assert result, f"no data for {query}"
    if ident not in EXPECTED:
        return
    expected = EXPECTED[ident]
    if isinstance(expected, tuple):
        assert by_label(result, expected[0]) == pytest.approx(expected[1], rel=1e-6), query
    else:
        assert [r["value"] for r in result] == pytest.approx([expected], rel=1e-6), query


SETTLED = 60.0  # seconds a query may take to answer as expected (a loaded machine's rules)


def answer(prom: Prometheus, query: str, expected: Expected | None) -> list[dict[str, Any]]:
    """`query`'s result once it has data and, where EXPECTED fixes it, that answer; after
    SETTLED seconds the last result, for the assertions to report. A recorded series only
    exists once its group has been evaluated after the inputs arrived, and each group runs
    on its own timer: the fixture's waits cannot promise every rule's output."""

    def settled() -> list[dict[str, Any]] | None:
        result = prom.query(query)
        return result if result and matches(result, expected) else None

    try:
        return wait_until(settled, SETTLED, f"{query} to answer as expected")
    except AssertionError:
        return prom.query(query)


def by_label(result: list[dict[str, Any]], label: str) -> dict[str, float]:
    return {r["metric"].get(label, ""): r["value"] for r in result}


def matches(result: list[dict[str, Any]], expected: Expected | None) -> bool:
    if expected is None:
        return True
    if isinstance(expected, tuple):
        return bool(by_label(result, expected[0]) == pytest.approx(expected[1], rel=1e-6))
    return bool([r["value"] for r in result] == pytest.approx([expected], rel=1e-6))


def test_the_variables_are_filled() -> None:
    for param in _queries():
        assert "$" not in fill(param.values[0], "127.0.0.1:19400")


# The Kueue alerts' conditions on the real series (their `for` aside): the exporter's
# allocations, the idle recording rules and the cluster view over the Kueue objects above.
KUEUE_ALERTS = {
    # batch/job-sweep has waited since CREATED: its 4 GPUs, under Kueue's reason
    "KubeGpuWorkloadPendingTooLong": (("cluster_queue", "reason"), {("batch-cq", "Pending"): 4}),
    # lab/notebook-a idles GPU 1 in notebooks-cq, whose one GPU is used up
    "KubeGpuQueueQuotaExhaustedWhileIdle": (("cluster_queue",), {("notebooks-cq",): 1}),
    # a100-cq's 2 GPUs of a flavor no node is
    "KubeGpuFlavorCannotFit": (("flavor", "resource"), {("a100", "nvidia.com/gpu"): 2}),
}


@pytest.mark.parametrize("alert", list(KUEUE_ALERTS))
def test_the_kueue_alerts_hold_on_real_series(
    prometheus: tuple[Prometheus, str], alert: str
) -> None:
    prom, _ = prometheus
    rules = yaml.safe_load(RULES.read_text())["groups"]
    (expr,) = (r["expr"] for g in rules for r in g["rules"] if r.get("alert") == alert)
    labels, expected = KUEUE_ALERTS[alert]

    def found() -> dict[tuple[str, ...], float] | None:
        answer = {
            tuple(r["metric"].get(k, "") for k in labels): r["value"] for r in prom.query(expr)
        }
        return answer if answer == expected else None

    assert wait_until(found, SETTLED, f"{alert}'s condition") == expected


def test_every_rule_evaluates_without_error(prometheus: tuple[Prometheus, str]) -> None:
    """The generated rules on real exporter output (pods, MIG, Xids): no rule errors, e.g. a
    join that turns many-to-many on labels the promtool inputs lacked."""
    prom, _ = prometheus
    rules = prom.evaluated_rules()
    assert len(rules) == len(
        [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    )
    broken = [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"]
    assert not broken, broken
