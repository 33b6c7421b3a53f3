"""The chart's exporter on the real node, attributing pods that Kubernetes' own controllers made,
scraped by the Prometheus the prometheus-operator manages, through the node's lifecycle.

One module-scoped bench (the node start is the slow part): the control plane with the
scheduler and the controllers a cluster runs them with, the operator and its CRDs, the real
node with the device plugin (four whole GPUs, the A100's MIG devices under the mixed strategy,
its 1g.5gb time-sliced into four `nvidia.com/mig-1g.5gb.shared` replicas), `helm install` of
the chart with the built image and its ServiceMonitor, and GPU workloads: a Deployment of two
replicas sharing the 1g.5gb, a Job holding two whole GPUs, a bare pod whose two containers
hold the 2g.10gb and a whole GPU. The tests run in order; each leaves the bench as the next
expects it.
"""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import pytest
from chart_on_node import PORT, Bench, built_image, chart_values, helm_install
from control_plane import run_control_plane
from device_plugin import run_plugin
from gpu_workloads import (
    bare_pod,
    deployment,
    exported,
    id_resources,
    job,
    listed,
    metrics_at,
    queried,
    replica_ids,
)
from managed_prometheus import create, run_managed
from prometheus_operator import install_all_crds, run_operator
from real_node import run_node

from fakenvml import write_state
from kube_gpu_exporter.exporter.simulated.scenario import Scenario
from prometheus_server import Prometheus
from support import Samples, values, wait_until

pytestmark = [pytest.mark.k8s, pytest.mark.node, pytest.mark.image]

GPUS = Path(__file__).resolve().parents[1] / "fakes" / "node_gpus.yaml"
EXPORTER_NS, RELEASE = "gpu-monitoring", "kge"
APPS = "ml"
MONITORING, PROMETHEUS, SELECT = "monitoring", "k8s", {"release": "gpu-monitoring"}
JOB = f"serviceMonitor/{EXPORTER_NS}/{RELEASE}-kube-gpu-exporter/0"
ALLOCATED = "nvidia_gpu_allocation_info"
ADVERTISED = "nvidia_gpu_node_advertised_devices"
ALLOCATED_N = "nvidia_gpu_node_allocated_devices"
OFFERED = "nvidia_gpu_kubelet_allocatable"
UP = "kube_gpu_exporter_pod_resources_up"
SHARED_MIG = "nvidia.com/mig-1g.5gb.shared"
CONTROLLERS = (
    "daemonset", "deployment", "replicaset", "job",
    "serviceaccount", "root-ca-cert-publisher",  # the pods' ServiceAccount token volume
    "endpointslice",  # the Service's EndpointSlices: what Prometheus discovers
)  # fmt: skip
PLUGIN = {
    "version": "v1",
    "flags": {"migStrategy": "mixed"},
    "sharing": {
        "timeSlicing": {
            "resources": [{"name": "nvidia.com/mig-1g.5gb", "replicas": 4, "rename": True}]
        }
    },
}


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory, fake_nvml_dir: Path) -> Iterator[Bench]:
    missing = [cmd for cmd in ("buildah", "debootstrap") if shutil.which(cmd) is None]
    if missing:
        pytest.fail(f"{' and '.join(missing)} not installed: run `make image`", pytrace=False)
    built = built_image()
    tmp = tmp_path_factory.mktemp("workloads")
    state_dir = tmp / "nvml"
    state_dir.mkdir()
    state = Scenario.load(GPUS).state_at(0)
    write_state(state_dir / "state", state)
    nvml_env = {"LD_LIBRARY_PATH": str(fake_nvml_dir), "FAKE_NVML_STATE": str(state_dir / "state")}
    with ExitStack() as stack:
        plane = stack.enter_context(
            run_control_plane(tmp / "plane", scheduler=True, controllers=CONTROLLERS)
        )
        install_all_crds(plane)  # before the operator, which starts only what is served
        stack.enter_context(run_operator(plane, tmp / "operator"))
        node = stack.enter_context(run_node(plane, tmp / "node", node_ip_on_bridge=True))
        stack.enter_context(run_plugin(tmp / "plugin", nvml_env, PLUGIN))
        bench = Bench(plane, node, state, state_dir / "state", tmp, EXPORTER_NS)
        loaded = node.ctr("images", "import", built["archive"])
        assert loaded.returncode == 0, loaded.stderr
        for namespace in (MONITORING, APPS):
            plane.ok("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
        plane.ok(
            "PATCH",
            f"/api/v1/nodes/{node.name}",
            {"metadata": {"labels": {"nvidia.com/gpu.present": "true"}}},
            content_type="application/merge-patch+json",
        )
        wanted = {"nvidia.com/gpu": "4", "nvidia.com/mig-2g.10gb": "1", SHARED_MIG: "4"}
        wait_until(
            lambda: all(node.allocatable().get(k) == v for k, v in wanted.items()),
            timeout=120,
            what=f"the plugin's resources {wanted}",
        )
        chart = chart_values(built["name"], node, fake_nvml_dir, state_dir, SELECT)
        helm_install(plane, RELEASE, EXPORTER_NS, chart, tmp)
        wait_until(
            lambda: (
                plane.request("GET", f"/api/v1/namespaces/{APPS}/serviceaccounts/default")[0] == 200
            ),
            what="the ml namespace's default ServiceAccount",
        )
        apps = f"/apis/apps/v1/namespaces/{APPS}"
        plane.ok("POST", f"{apps}/deployments", deployment("infer", 2, {SHARED_MIG: 1}))
        plane.ok(
            "POST", f"/apis/batch/v1/namespaces/{APPS}/jobs", job("train", {"nvidia.com/gpu": 2})
        )
        notebook = {"main": {"nvidia.com/mig-2g.10gb": 1}, "side": {"nvidia.com/gpu": 1}}
        plane.ok("POST", f"/api/v1/namespaces/{APPS}/pods", bare_pod("notebook", notebook))

        def running() -> bool:
            pods = plane.ok("GET", f"/api/v1/namespaces/{APPS}/pods")["items"]
            phases = [p.get("status", {}).get("phase") for p in pods]
            return len(pods) == 4 and phases == ["Running"] * 4 and bench.exporter_pod() is not None

        try:
            wait_until(running, timeout=240, what="four GPU pods and the exporter Running")
        except BaseException:
            for namespace in (APPS, EXPORTER_NS):
                print(plane.ok("GET", f"/api/v1/namespaces/{namespace}/events"))
            print(node.log_tail("kubelet", 40))
            raise
        try:
            yield bench
        finally:
            # no controller may put the node's pods back while the node deletes them
            for path in (f"{apps}/deployments", f"{apps}/replicasets",
                         f"/apis/batch/v1/namespaces/{APPS}/jobs"):  # fmt: skip
                for item in plane.ok("GET", path)["items"]:
                    plane.request("DELETE", f"{path}/{item['metadata']['name']}")


@pytest.fixture(scope="module")
def prometheus(bench: Bench) -> Iterator[Prometheus]:
    """The Prometheus the operator configured from the chart's ServiceMonitor."""
    create(bench.plane, MONITORING, PROMETHEUS, SELECT)
    with run_managed(bench.plane, MONITORING, PROMETHEUS, JOB, bench.workdir / "prom") as server:
        yield server


def test_every_pods_devices_as_the_kubelet_lists_them(bench: Bench) -> None:
    """The exporter's pod → container → resource → devices mapping is the kubelet's List,
    for the pods of a Deployment, a Job and a bare pod of two containers."""
    parsed, answer = bench.wait_agreed()
    held = listed(answer)
    infer = sorted(p["metadata"]["name"] for p in bench.pods(APPS, "infer"))
    (train,) = [p["metadata"]["name"] for p in bench.pods(APPS, "train")]
    devices = bench.state.devices
    mig_1g = {m.uuid for d in devices for m in d.mig if m.profile == "1g.5gb"}
    mig_2g = {m.uuid for d in devices for m in d.mig if m.profile == "2g.10gb"}
    assert {key[1:] for key in held} == {
        *((pod, "main", SHARED_MIG) for pod in infer),
        (train, "main", "nvidia.com/gpu"),
        ("notebook", "main", "nvidia.com/mig-2g.10gb"),
        ("notebook", "side", "nvidia.com/gpu"),
    }, held
    for pod in infer:  # two replicas of the one 1g.5gb, each pod its own
        assert held[(APPS, pod, "main", SHARED_MIG)] == mig_1g
        assert values(parsed, ALLOCATED, pod=pod, sharing="shared") == [1.0]
    replicas = [i for i in replica_ids(answer) if "::" in i]
    assert len(set(replicas)) == 2, replicas
    assert held[(APPS, "notebook", "main", "nvidia.com/mig-2g.10gb")] == mig_2g
    whole = {d.uuid for d in devices if not d.mig}
    gpus = held[(APPS, train, "main", "nvidia.com/gpu")]
    assert len(gpus) == 2 and gpus <= whole
    assert not gpus & held[(APPS, "notebook", "side", "nvidia.com/gpu")]
    assert values(parsed, ALLOCATED, pod=train, sharing="exclusive") == [1.0, 1.0]
    # advertised: the ids GetAllocatableResources lists, per resource (replicas each)
    advertised = {dict(k[1])["resource"]: v for k, v in parsed.items() if k[0] == ADVERTISED}
    assert advertised == {r: len(ids) for r, ids in bench.allocatable_ids().items()}
    assert advertised[SHARED_MIG] == 4 and advertised["nvidia.com/gpu"] == 4
    # allocated: the List's ids per resource (replicas each); one whole GPU left free
    allocated = {dict(k[1])["resource"]: v for k, v in parsed.items() if k[0] == ALLOCATED_N}
    assert {r: n for r, n in allocated.items() if n} == dict(Counter(id_resources(answer)))
    assert values(parsed, "nvidia_gpu_node_free_gpus") == [1.0]
    # every device the plugin offers (four GPUs, three MIG instances), per device
    assert values(parsed, OFFERED) == [1.0] * 7


def test_the_operators_prometheus_scrapes_the_daemonset(
    bench: Bench, prometheus: Prometheus
) -> None:
    """The ServiceMonitor's job finds the exporter pod through the EndpointSlice the real
    controller wrote, scrapes it over the bridge, and PromQL sees the kubelet's mapping."""
    pod = bench.exporter_pod()
    assert pod is not None
    address = pod["status"]["podIP"]
    (up,) = prometheus.wait_for('up{job="kube-gpu-exporter"} == 1', timeout=120)
    assert up["metric"]["instance"] == bench.node.name, up
    targets = prometheus.api("targets")["activeTargets"]
    (target,) = [t for t in targets if t["scrapePool"] == JOB]
    assert target["scrapeUrl"] == f"http://{address}:{PORT}/metrics", target
    slices = bench.plane.ok(
        "GET", f"/apis/discovery.k8s.io/v1/namespaces/{EXPORTER_NS}/endpointslices"
    )
    (written,) = slices["items"]
    assert written["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"] == (
        "endpointslice-controller.k8s.io"
    )
    assert [e["addresses"] for e in written["endpoints"]] == [[address]]

    def same() -> bool:
        return queried(prometheus.query(ALLOCATED)) == listed(bench.listed())

    wait_until(same, timeout=60, what="PromQL's allocations = the kubelet's List")
    (count,) = prometheus.query(f'count({ALLOCATED}{{sharing="shared"}})')
    assert count["value"] == 2
    (advertised,) = prometheus.query(f'{ADVERTISED}{{resource="{SHARED_MIG}"}}')
    assert advertised["value"] == 4


def test_a_deleted_pods_series_go(bench: Bench, prometheus: Prometheus) -> None:
    bench.plane.ok(
        "DELETE",
        f"/api/v1/namespaces/{APPS}/pods/notebook",
        {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 1},
    )

    def gone() -> Samples | None:
        agreed = bench.agreed()
        if agreed and not any(key[1] == "notebook" for key in listed(agreed[1])):
            return agreed[0]
        return None

    parsed = wait_until(gone, timeout=120, what="the notebook gone from the kubelet and exporter")
    assert not values(parsed, ALLOCATED, pod="notebook")
    assert len(exported(parsed)) == 3
    wait_until(
        lambda: not prometheus.query(f'{ALLOCATED}{{pod="notebook"}}'),
        timeout=60,
        what="the notebook's series stale in Prometheus",
    )


def test_a_kubelet_restart(bench: Bench) -> None:
    """pod_resources_up 1 → 0 while the kubelet is down → 1, and the same allocations after,
    each once."""
    parsed, answer = bench.wait_agreed()
    before = listed(answer)
    allocated = _family(parsed, ALLOCATED_N)
    assert values(parsed, UP) == [1.0]
    pod = bench.exporter_pod()
    assert pod is not None

    def down() -> None:  # the kubelet stays down until the exporter has seen it
        wait_until(
            lambda: (now := metrics_at(pod["status"]["podIP"], PORT)) and values(now, UP) == [0.0],
            timeout=60,
            what="pod_resources_up 0 while the kubelet is down",
        )

    bench.node.restart_kubelet(while_down=down)
    # the new kubelet lists nothing until it has read its checkpoint and pods back: polled
    parsed, answer = wait_until(
        lambda: (agreed := bench.agreed()) and listed(agreed[1]) == before and agreed,
        timeout=120,
        what="the restarted kubelet's List and the exporter back to the same allocations",
    )
    wait_until(
        lambda: values(bench.metrics() or {}, UP) == [1.0], timeout=60, what="pod_resources_up 1"
    )
    assert listed(answer) == before
    assert exported(parsed) == before
    assert _family(parsed, ALLOCATED_N) == allocated
    assert set(values(parsed, ALLOCATED)) == {1.0}


def test_the_daemonset_replaces_a_deleted_exporter(bench: Bench) -> None:
    old = bench.exporter_pod()
    assert old is not None
    name = old["metadata"]["name"]
    bench.plane.ok(
        "DELETE",
        f"/api/v1/namespaces/{EXPORTER_NS}/pods/{name}",
        {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 1},
    )
    new = wait_until(
        lambda: (p := bench.exporter_pod()) and p["metadata"]["name"] != name and p,
        timeout=180,
        what="the DaemonSet's new pod Running",
    )
    parsed, _ = bench.wait_agreed()
    assert bench.exporter_pod()["metadata"]["name"] == new["metadata"]["name"]
    assert len(exported(parsed)) == 3


def test_an_unhealthy_gpu(bench: Bench) -> None:
    """A critical Xid on a GPU the Job holds: the plugin reports it Unhealthy; the kubelet
    drops it from the Node's allocatable and from GetAllocatableResources (1.37 lists healthy
    devices only) but keeps it in the pod's List entry, and reports it in the pod's
    allocatedResourcesStatus; the exporter's advertised count drops, the Job keeps it."""
    (train,) = [p["metadata"]["name"] for p in bench.pods(APPS, "train")]
    held = listed(bench.listed())[(APPS, train, "main", "nvidia.com/gpu")]
    uuid = sorted(held)[0]
    index = next(d.index for d in bench.state.devices if d.uuid == uuid)
    devices = tuple(
        replace(d, xids=(*d.xids, 79)) if d.index == index else d for d in bench.state.devices
    )
    write_state(bench.state_file, replace(bench.state, devices=devices))

    wait_until(
        lambda: bench.node.allocatable().get("nvidia.com/gpu") == "3",
        timeout=90,
        what="the unhealthy GPU out of allocatable",
    )
    assert bench.node.node()["status"]["capacity"]["nvidia.com/gpu"] == "4"
    allocatable = bench.allocatable_ids()["nvidia.com/gpu"]
    assert uuid not in allocatable and len(allocatable) == 3

    def dropped() -> Samples | None:
        agreed = bench.agreed()
        if agreed and values(agreed[0], ADVERTISED, resource="nvidia.com/gpu") == [3.0]:
            return agreed[0]
        return None

    parsed = wait_until(dropped, timeout=60, what="the exporter's advertised GPUs 3")
    assert values(parsed, ALLOCATED, pod=train, uuid=uuid) == [1.0]
    assert values(parsed, OFFERED, uuid=uuid) == [0.0]
    assert sorted(values(parsed, OFFERED)) == [0.0] + [1.0] * 6
    assert listed(bench.listed())[(APPS, train, "main", "nvidia.com/gpu")] == held

    def reported() -> dict[str, str] | None:
        pod = bench.plane.ok("GET", f"/api/v1/namespaces/{APPS}/pods/{train}")
        (status,) = pod["status"]["containerStatuses"]
        health = {
            r["resourceID"]: r.get("health", "")
            for entry in status.get("allocatedResourcesStatus") or []
            for r in entry.get("resources") or []
        }
        return health if health.get(uuid) == "Unhealthy" else None

    health = wait_until(reported, timeout=60, what="the pod's allocatedResourcesStatus")
    assert health == {u: "Unhealthy" if u == uuid else "Healthy" for u in held}, health


def test_api_access_from_a_pod(bench: Bench, fake_nvml_dir: Path) -> None:
    """No kube-proxy: the `kubernetes` Service's ClusterIP leads nowhere, so the chart's
    default pod (its own network namespace) never reaches the API server. A second release
    with hostNetwork and the API server's address in KUBERNETES_SERVICE_HOST/PORT (extraEnv:
    a container's own variables win over the kubelet's) does, with its ServiceAccount token
    and the chart's RBAC: owners appear on the allocations."""
    parsed, _ = bench.wait_agreed()
    assert values(parsed, "kube_gpu_exporter_kubernetes_api_up") == [0.0]
    host, port = bench.plane.url.removeprefix("https://").rsplit(":", 1)
    image = built_image()["name"]
    chart = chart_values(image, bench.node, fake_nvml_dir, bench.state_file.parent, SELECT)
    chart["extraEnv"] += [
        {"name": "KUBERNETES_SERVICE_HOST", "value": host},
        {"name": "KUBERNETES_SERVICE_PORT", "value": port},
    ]
    chart["extraArgs"] += [f"--web.listen-address={bench.node.bridge_address}:{PORT}"]
    chart.update(
        hostNetwork=True,
        service={"enabled": False},
        serviceMonitor={"enabled": False},
        prometheusRule={"enabled": False},
        grafanaDashboards={"enabled": False},
    )
    helm_install(bench.plane, "api", "gpu-api", chart, bench.workdir)
    pod = wait_until(lambda: bench.exporter_pod("gpu-api"), timeout=180, what="hostNetwork pod")
    assert pod["status"]["podIP"] == bench.node.bridge_address

    def owned() -> Samples | None:
        now = metrics_at(bench.node.bridge_address, PORT)
        up = now and values(now, "kube_gpu_exporter_kubernetes_api_up") == [1.0]
        return now if up and values(now, ALLOCATED, owner_kind="Job", owner_name="train") else None

    try:
        parsed = wait_until(owned, timeout=120, what="the API watch up, owners attributed")
    except BaseException:
        print(bench.exporter_log("gpu-api"))
        raise
    assert exported(parsed) == listed(bench.listed())
    for pod in bench.pods(APPS, "infer"):
        name = pod["metadata"]["name"]
        assert values(parsed, ALLOCATED, pod=name, owner_kind="Deployment", owner_name="infer")


def _family(parsed: Samples, name: str) -> dict[frozenset[tuple[str, str]], float]:
    return {labels: value for (n, labels), value in parsed.items() if n == name}
