"""Least privilege, proven on the real kube-apiserver with RBAC: `deploy/` applied server-side
(every object of its kustomization, the prometheus-operator's CRDs installed for the
ServiceMonitor and PrometheusRule), a token minted for each of its ServiceAccounts by the
TokenRequest API, and the commands run with nothing else:

- the node exporter's token: `serve --kubernetes.enabled` watches its node's pods and
  ResourceSlices (`kube_gpu_exporter_kubernetes_api_up` 1, no refusal counted);
- the cluster view's token: `cluster` lists and watches nodes, pods, quotas and events (every
  `kube_gpu_cluster_watch_up` 1), and `explain` answers for a pending pod;
- and each token may do exactly what its command needs, nothing more: the API server's own
  SubjectAccessReview over a matrix of verbs and resources (secrets, writes, configmaps,
  deployments, ResourceClaims… all refused), and direct requests refused with 403.

RBAC cannot narrow a grant by field selector: the node exporter selects its own node's pods
by `spec.nodeName`, but its grant is to list every pod of the cluster (docs say so).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from control_plane import ControlPlane, run_control_plane
from operator_crds import install_crds
from service_account_token import mint_token, token_kubeconfig

from cluster_objects import make_gpu_pod, make_node
from kubelet_server import FakeKubelet, container, devices, kubelet_args, pod
from support import exporter_command, run_exporter, values, wait_until

pytestmark = pytest.mark.k8s

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
MANAGER = "kube-gpu-exporter-test"
NODE = "gpu-node-1"
GPU0 = "GPU-0a0a0a0a-0000-4000-8000-000000000000"

# What each command asks of the API (exporter/kubernetes, exporter/cluster/watches.py and
# explain/api.py): (API group, resource, verb).
NODE_NEEDS = {
    ("", "pods", "list"),
    ("", "pods", "watch"),
    ("resource.k8s.io", "resourceslices", "list"),
    ("resource.k8s.io", "resourceslices", "watch"),
}
CLUSTER_NEEDS = {
    ("", "pods", "get"),  # explain POD
    *{("", r, v) for r in ("pods", "nodes", "resourcequotas", "events") for v in ("list", "watch")},
    # Kueue's queues (exporter/cluster/kueue.py), where Kueue is installed
    *{
        ("kueue.x-k8s.io", r, v)
        for r in ("workloads", "localqueues", "clusterqueues", "resourceflavors", "cohorts")
        for v in ("list", "watch")
    },
}
PROBED_RESOURCES = [
    ("", "pods"),
    ("", "pods/log"),
    ("", "pods/exec"),
    ("", "nodes"),
    ("", "nodes/proxy"),
    ("", "resourcequotas"),
    ("", "events"),
    ("events.k8s.io", "events"),
    ("", "secrets"),
    ("", "configmaps"),
    ("", "serviceaccounts/token"),
    ("apps", "deployments"),
    ("apps", "daemonsets"),
    ("resource.k8s.io", "resourceslices"),
    ("resource.k8s.io", "resourceclaims"),
    ("rbac.authorization.k8s.io", "clusterroles"),
    ("kueue.x-k8s.io", "workloads"),
    ("kueue.x-k8s.io", "localqueues"),
    ("kueue.x-k8s.io", "clusterqueues"),
    ("kueue.x-k8s.io", "resourceflavors"),
    ("kueue.x-k8s.io", "cohorts"),
]
VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")


def _manifests() -> list[dict[str, Any]]:
    """Every object of deploy/kustomization.yaml's resources, in its order (what
    `kubectl kustomize deploy/` gives: no transformers are set there)."""
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    objects = []
    for resource in kustomization["resources"]:
        objects += [o for o in yaml.safe_load_all((DEPLOY / resource).read_text()) if o]
    return objects


def _resource_paths(plane: ControlPlane, objects: list[dict[str, Any]]) -> dict[str, Any]:
    """apiVersion/kind → (plural, namespaced), from the API server's discovery."""
    found: dict[str, Any] = {}
    for version in {o["apiVersion"] for o in objects}:
        base = "/api/v1" if version == "v1" else f"/apis/{version}"
        for resource in plane.ok("GET", base)["resources"]:
            if "/" not in resource["name"]:
                key = f"{version}/{resource['kind']}"
                found[key] = (base, resource["name"], resource["namespaced"])
    return found


def apply(plane: ControlPlane, objects: list[dict[str, Any]]) -> None:
    """Server-side apply of each object, as `kubectl apply --server-side` sends it."""
    paths = _resource_paths(plane, objects)
    for obj in objects:
        base, plural, namespaced = paths[f"{obj['apiVersion']}/{obj['kind']}"]
        metadata = obj["metadata"]
        where = f"/namespaces/{metadata['namespace']}" if namespaced else ""
        path = f"{base}{where}/{plural}/{metadata['name']}?fieldManager={MANAGER}&force=true"
        plane.ok("PATCH", path, obj, content_type="application/apply-patch+yaml")


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with run_control_plane(tmp_path_factory.mktemp("control-plane")) as running:
        install_crds(running)
        objects = _manifests()
        for namespace in {o["metadata"].get("namespace") for o in objects} - {None}:
            if not any(
                o["kind"] == "Namespace" and o["metadata"]["name"] == namespace for o in objects
            ):
                running.ok("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
        apply(running, objects)
        yield running


def _accounts() -> dict[str, tuple[str, str]]:
    """node | cluster → (namespace, name) of the ServiceAccount deploy/ runs each under."""
    objects = _manifests()
    daemonset = next(o for o in objects if o["kind"] == "DaemonSet")
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    return {
        role: (obj["metadata"]["namespace"], obj["spec"]["template"]["spec"]["serviceAccountName"])
        for role, obj in (("node", daemonset), ("cluster", deployment))
    }


def _allowed(plane: ControlPlane, user: str) -> set[tuple[str, str, str]]:
    """What RBAC lets `user` do, cluster-wide, over the probe matrix: SubjectAccessReview."""
    allowed = set()
    for group, resource in PROBED_RESOURCES:
        plural, _, sub = resource.partition("/")
        for verb in VERBS:
            attributes = {"group": group, "resource": plural, "verb": verb}
            if sub:
                attributes["subresource"] = sub
            review = plane.ok(
                "POST",
                "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                {
                    "apiVersion": "authorization.k8s.io/v1",
                    "kind": "SubjectAccessReview",
                    "spec": {"user": user, "resourceAttributes": attributes},
                },
            )
            if review["status"].get("allowed"):
                allowed.add((group, resource, verb))
    return allowed


@pytest.mark.parametrize("role", ["node", "cluster"])
def test_each_service_account_may_do_exactly_what_its_command_needs(
    plane: ControlPlane, role: str
) -> None:
    namespace, account = _accounts()[role]
    user = f"system:serviceaccount:{namespace}:{account}"
    needs = NODE_NEEDS if role == "node" else CLUSTER_NEEDS
    # RBAC's bootstrap roles settle shortly after /readyz: wait for the grant to be seen
    wait_until(lambda: needs <= _allowed(plane, user), timeout=30, what=f"{user}'s grants")
    assert _allowed(plane, user) == needs

    # the token itself, on the wire: its own review agrees, and beyond it is 403
    token = mint_token(plane, namespace, account)
    own = plane.ok(
        "POST",
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {"resource": "pods", "verb": "list"}},
        },
        token=token,
    )
    assert own["status"]["allowed"] is True
    refused = {
        "read secrets": plane.request("GET", "/api/v1/secrets", token=token),
        "read configmaps": plane.request("GET", "/api/v1/configmaps", token=token),
        "list deployments": plane.request("GET", "/apis/apps/v1/deployments", token=token),
        "create a pod": plane.request(
            "POST",
            "/api/v1/namespaces/default/pods",
            {"metadata": {"name": "x"}, "spec": {"containers": [{"name": "c", "image": "x"}]}},
            token=token,
        ),
        "label a node": plane.request(
            "PATCH",
            "/api/v1/nodes/any",
            {"metadata": {"labels": {"x": "y"}}},
            token=token,
            content_type="application/merge-patch+json",
        ),
        "delete pods": plane.request("DELETE", "/api/v1/namespaces/default/pods", token=token),
    }
    assert {what: status for what, (status, _) in refused.items()} == dict.fromkeys(refused, 403)
    assert (
        plane.request("GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dx", token=token)[0] == 200
    )


SCENARIO = f"""
devices:
  - uuid: {GPU0}
    readings: {{utilization: 0.5, memory_used_bytes: 1GiB}}
"""


def test_serve_works_with_the_node_exporters_token(plane: ControlPlane, tmp_path: Path) -> None:
    namespace, account = _accounts()["node"]
    kubeconfig = token_kubeconfig(
        plane, tmp_path / "node.kubeconfig", mint_token(plane, namespace, account)
    )
    plane.ok("POST", "/api/v1/namespaces", {"metadata": {"name": "lab"}})
    obj = make_gpu_pod("notebook", 1, "lab", node=NODE)
    for key in ("uid", "creationTimestamp"):
        obj["metadata"].pop(key)
    obj["metadata"]["labels"] = {"team": "vision"}
    plane.ok("POST", "/api/v1/namespaces/lab/pods", obj)
    (tmp_path / "node.yaml").write_text(SCENARIO)
    socket = tmp_path / "kubelet.sock"
    with FakeKubelet(socket) as kubelet:
        kubelet.pods = [pod("lab", "notebook", container("main", devices("nvidia.com/gpu", GPU0)))]
        args = [
            "--simulate", str(tmp_path / "node.yaml"), *kubelet_args(socket),
            "--kubernetes.enabled", f"--kubernetes.kubeconfig={kubeconfig}",
            f"--kubernetes.node-name={NODE}", "--kubernetes.pod-labels=team",
        ]  # fmt: skip
        with run_exporter(args, tmp_path) as exporter:
            m = exporter.metrics_when(
                lambda m: bool(
                    values(m, "nvidia_gpu_allocation_info", pod="notebook", label_team="vision")
                ),
                "the pod's labels from the API with the exporter's own token",
            )
            assert values(m, "kube_gpu_exporter_kubernetes_api_up") == [1]
            errors = values(m, "kube_gpu_exporter_collection_errors_total", kind="kubernetes_other")
            assert errors in ([], [0])
            log = exporter.log()
    assert "403" not in log and "forbidden" not in log.lower(), log


def test_cluster_and_explain_work_with_the_cluster_views_token(
    plane: ControlPlane, tmp_path: Path
) -> None:
    namespace, account = _accounts()["cluster"]
    token = mint_token(plane, namespace, account)
    kubeconfig = token_kubeconfig(plane, tmp_path / "cluster.kubeconfig", token)
    plane.ok("POST", "/api/v1/namespaces", {"metadata": {"name": "ml"}})
    node = make_node("gpu-a", gpus=2)
    node["metadata"].pop("uid")
    plane.ok("POST", "/api/v1/nodes", node)
    waiting = make_gpu_pod("big", 4, "ml")
    for key in ("uid", "creationTimestamp"):
        waiting["metadata"].pop(key)
    plane.ok("POST", "/api/v1/namespaces/ml/pods", waiting)

    args = [f"--kubernetes.kubeconfig={kubeconfig}", "--cluster.interval=200ms"]
    with run_exporter(args, tmp_path, command="cluster") as exporter:
        m = exporter.metrics_when(
            lambda m: values(m, "kube_gpu_cluster_watch_up") == [1] * 9, "every watch up"
        )
        assert values(m, "kube_gpu_pending_pods", namespace="ml") == [1]
        assert sum(values(m, "kube_gpu_cluster_watch_errors_total")) == 0
        log = exporter.log()
    assert "403" not in log and "forbidden" not in log.lower(), log

    done = subprocess.run(
        exporter_command(
            "explain", "big", "-n", "ml", f"--kubeconfig={kubeconfig}", "--color=never"
        ),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stdout + done.stderr  # 1: it waits; 2 would be a refusal
    assert "ml/big" in done.stdout and "gpu-a" in done.stdout, done.stdout
