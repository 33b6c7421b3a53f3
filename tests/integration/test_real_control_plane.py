"""Smoke tests of the components `make real-bin` builds from their Go modules: the real
kube-apiserver with RBAC and ServiceAccount tokens, the real kube-scheduler's verdicts on GPU
pods, and the built promtool, amtool and helm. They prove the test bench the later tests stand
on: if one fails, the build or the fixture is broken, not the exporter."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from control_plane import ControlPlane, run_control_plane
from real_binaries import real_components, require

from support import free_port, http_get, wait_until

pytestmark = pytest.mark.k8s

GPU = "nvidia.com/gpu"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with run_control_plane(
        tmp_path_factory.mktemp("control-plane"),
        scheduler=True,
        controllers=("serviceaccount", "resourcequota"),
    ) as plane:
        yield plane


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _gpu_node(plane: ControlPlane, gpus: int) -> str:
    """A Node object as a kubelet would register it: GPU capacity and a Ready condition."""
    name = _name("gpu-node")
    resources = {"cpu": "16", "memory": "64Gi", "pods": "110", GPU: str(gpus)}
    plane.ok(
        "POST",
        "/api/v1/nodes",
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {
                "capacity": resources,
                "allocatable": resources,
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            },
        },
    )
    return name


def _gpu_pod(plane: ControlPlane, gpus: int, node_selector: dict[str, str] | None = None) -> str:
    name = _name("gpu-pod")
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "cuda",
                "image": "registry.invalid/cuda:none",  # no kubelet runs: never pulled
                "resources": {"limits": {GPU: str(gpus)}},
            }
        ]
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    plane.ok(
        "POST",
        "/api/v1/namespaces/default/pods",
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec},
    )
    return name


def _condition(pod: dict[str, Any], kind: str) -> dict[str, Any] | None:
    conditions = pod.get("status", {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == kind), None)


def test_api_server_is_ready_and_serves_resource_slices_v1(cluster: ControlPlane) -> None:
    status, body = cluster.request("GET", "/readyz")
    assert status == 200, body
    group = cluster.ok("GET", "/apis/resource.k8s.io")
    assert group["preferredVersion"]["groupVersion"] == "resource.k8s.io/v1", group
    resources = cluster.ok("GET", "/apis/resource.k8s.io/v1")["resources"]
    assert "resourceslices" in {r["name"] for r in resources}
    version = cluster.ok("GET", "/version")
    assert version["gitVersion"] == real_components.K8S, version


def test_admin_kubeconfig_works_with_the_official_client(cluster: ControlPlane) -> None:
    """What the exporter's --kubernetes.* flags will be pointed at: the kubeconfig's TLS (the
    API server's self-made CA) and token are accepted by the kubernetes client."""
    client = kubernetes.config.new_client_from_config(config_file=str(cluster.kubeconfig))
    with client:
        names = kubernetes.client.CoreV1Api(client).list_namespace(_preload_content=False)
        found = {item["metadata"]["name"] for item in json.loads(names.data)["items"]}
    assert {"default", "kube-system"} <= found


def test_scheduler_binds_a_gpu_pod_to_the_node_with_gpus(cluster: ControlPlane) -> None:
    node = _gpu_node(cluster, gpus=4)
    pod = _gpu_pod(cluster, gpus=2, node_selector={"kubernetes.io/hostname": node})

    def bound() -> dict[str, Any] | None:
        found = cluster.ok("GET", f"/api/v1/namespaces/default/pods/{pod}")
        return found if found["spec"].get("nodeName") else None

    found = wait_until(bound, timeout=60, what=f"{pod} bound")
    assert found["spec"]["nodeName"] == node
    assert (_condition(found, "PodScheduled") or {}).get("status") == "True"


def test_scheduler_refuses_more_gpus_than_any_node_has(cluster: ControlPlane) -> None:
    _gpu_node(cluster, gpus=2)
    pod = _gpu_pod(cluster, gpus=64)

    def refused() -> dict[str, Any] | None:
        found = cluster.ok("GET", f"/api/v1/namespaces/default/pods/{pod}")
        condition = _condition(found, "PodScheduled")
        return condition if condition and condition["status"] == "False" else None

    condition = wait_until(refused, timeout=60, what=f"{pod} judged unschedulable")
    assert condition["reason"] == "Unschedulable"
    assert f"Insufficient {GPU}" in condition["message"]

    def failed_scheduling() -> list[dict[str, Any]]:
        selector = f"involvedObject.name={pod},reason=FailedScheduling"
        events = cluster.ok("GET", f"/api/v1/namespaces/default/events?fieldSelector={selector}")
        return list(events["items"])

    events = wait_until(failed_scheduling, timeout=60, what=f"FailedScheduling event for {pod}")
    assert f"Insufficient {GPU}" in events[0]["message"], events[0]
    assert cluster.ok("GET", f"/api/v1/namespaces/default/pods/{pod}")["spec"].get("nodeName") in (
        None,
        "",
    )


def test_controller_manager_fills_a_quotas_status(cluster: ControlPlane) -> None:
    """The ResourceQuota controller, not the test, writes `status`: hard and used."""
    namespace = _name("team")
    cluster.ok("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
    cluster.ok(
        "POST",
        f"/api/v1/namespaces/{namespace}/resourcequotas",
        {"metadata": {"name": "gpus"}, "spec": {"hard": {f"requests.{GPU}": "2"}}},
    )

    def counted() -> dict[str, Any] | None:
        quota = cluster.ok("GET", f"/api/v1/namespaces/{namespace}/resourcequotas/gpus")
        return quota["status"] if quota.get("status", {}).get("used") else None

    status = wait_until(counted, timeout=60, what="the quota's status from the controller")
    assert status == {"hard": {f"requests.{GPU}": "2"}, "used": {f"requests.{GPU}": "0"}}


def test_service_account_token_gets_exactly_what_rbac_grants(cluster: ControlPlane) -> None:
    account = _name("reader")
    ns = "default"
    cluster.ok("POST", f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": account}})
    cluster.ok(
        "POST",
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
        {
            "metadata": {"name": account},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}],
        },
    )
    cluster.ok(
        "POST",
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
        {
            "metadata": {"name": account},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": ns}],
        },
    )
    minted = cluster.ok(
        "POST",
        f"/api/v1/namespaces/{ns}/serviceaccounts/{account}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    token = minted["status"]["token"]

    who = cluster.ok(
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        token=token,
    )
    assert who["status"]["userInfo"]["username"] == f"system:serviceaccount:{ns}:{account}"

    # RBAC's bootstrap roles settle shortly after /readyz: the grant may take a moment
    wait_until(
        lambda: cluster.request("GET", f"/api/v1/namespaces/{ns}/pods", token=token)[0] == 200,
        timeout=30,
        what="the granted list of pods",
    )
    denied = {
        "secrets": cluster.request("GET", f"/api/v1/namespaces/{ns}/secrets", token=token),
        "pods elsewhere": cluster.request(
            "GET", "/api/v1/namespaces/kube-system/pods", token=token
        ),
        "nodes": cluster.request("GET", "/api/v1/nodes", token=token),
        "create pod": cluster.request(
            "POST",
            f"/api/v1/namespaces/{ns}/pods",
            {"metadata": {"name": "x"}, "spec": {"containers": [{"name": "c", "image": "x"}]}},
            token=token,
        ),
    }
    assert {what: status for what, (status, _) in denied.items()} == dict.fromkeys(denied, 403)
    assert cluster.request("GET", "/api/v1/nodes", token="not-a-token")[0] == 401


def test_a_plane_serves_the_etcd_data_an_earlier_one_left(tmp_path: Path) -> None:
    """The bench's cached fleet: etcd's data dir kept after the plane stopped, then served by
    a new plane (new ports, certificate and admin token) with its objects intact."""
    data = tmp_path / "etcd-data"
    with run_control_plane(tmp_path / "first", etcd_data=data) as first:
        first.ok("POST", "/api/v1/namespaces", {"metadata": {"name": "kept"}})
        first.ok(
            "POST",
            "/api/v1/namespaces/kept/configmaps",
            {"metadata": {"name": "fleet"}, "data": {"pods": "150000"}},
        )
    with run_control_plane(tmp_path / "second", etcd_data=data) as second:
        assert second.token != first.token
        kept = second.ok("GET", "/api/v1/namespaces/kept/configmaps/fleet")
        assert kept["data"] == {"pods": "150000"}
        second.ok("POST", "/api/v1/namespaces/kept/configmaps", {"metadata": {"name": "new"}})


def _version_output(binary: str, *args: str) -> str:
    proc = subprocess.run(
        [str(require(binary)), *args], capture_output=True, text=True, timeout=60, check=True
    )
    return proc.stdout + proc.stderr


def test_built_promtool_is_prometheus_3() -> None:
    release = real_components.PROMETHEUS  # v0.316.0 is Prometheus 3.16.0
    expected = real_components.prometheus_release(release)
    assert expected.startswith("3.")
    assert f"promtool, version {expected}" in _version_output("promtool", "--version")
    assert f"prometheus, version {expected}" in _version_output("prometheus", "--version")


def test_built_amtool_and_alertmanager_report_their_release() -> None:
    expected = real_components.ALERTMANAGER.removeprefix("v")
    assert f"amtool, version {expected}" in _version_output("amtool", "--version")
    assert f"alertmanager, version {expected}" in _version_output("alertmanager", "--version")


def test_built_helm_reports_its_release() -> None:
    out = _version_output("helm", "version", "--short")
    assert out.strip().startswith(real_components.HELM), out


def test_built_prometheus_and_alertmanager_serve_their_apis(tmp_path: Path) -> None:
    """Built from modules without their npm-made web UIs, both still answer the APIs the
    live tests use: Prometheus evaluates a query, Alertmanager reports its config."""
    (tmp_path / "prometheus.yml").write_text("global:\n  scrape_interval: 15s\n")
    (tmp_path / "alertmanager.yml").write_text("route:\n  receiver: x\nreceivers:\n- name: x\n")
    prom_port, am_port = free_port(), free_port()
    commands = [
        [
            str(require("prometheus")),
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
        ],
        [
            str(require("alertmanager")),
            f"--config.file={tmp_path / 'alertmanager.yml'}",
            f"--storage.path={tmp_path / 'am'}",
            f"--web.listen-address=127.0.0.1:{am_port}",
            "--cluster.listen-address=",
        ],
    ]
    procs = [
        subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for c in commands
    ]
    try:

        def answer(url: str) -> Any:
            status, _, body = http_get(url)
            return json.loads(body) if status == 200 else None

        query = f"http://127.0.0.1:{prom_port}/api/v1/query?query=1%2B1"
        result = wait_until(lambda: answer(query), timeout=60, what="Prometheus 3's query API")
        assert result["data"]["result"][1] == "2"
        status_url = f"http://127.0.0.1:{am_port}/api/v2/status"
        status = wait_until(lambda: answer(status_url), timeout=60, what="Alertmanager's API")
        assert "receiver: x" in status["config"]["original"]
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=30)
