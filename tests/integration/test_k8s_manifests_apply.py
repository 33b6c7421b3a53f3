"""Every manifest we ship, applied for real: `deploy/`, what `generate` writes for a thresholds
file that turns on every optional object (NetworkPolicies, a multi-cluster label, tolerations,
other namespaces, no hostPID, no RuntimeClass), and the Helm chart's `helm template` output
(default values, the AlertmanagerConfig, and values rendered from that thresholds file).

Each object goes through a server-side apply dry run on the real kube-apiserver with the
prometheus-operator's real CRDs installed, with `fieldValidation=Strict`: an unknown or
duplicated field, a value the built-in validation or the CRD's schema refuses, or a kind the
server does not serve fails here, where `kubernetes-validate` (the quick check in
test_manifests.py) reads only the published OpenAPI schemas, and knows no CRD."""

from __future__ import annotations

import copy
import json
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
import yaml
from control_plane import ControlPlane, run_control_plane
from operator_crds import install_crds
from real_binaries import require
from test_helm_chart import OPERATOR_APIS

from kube_gpu_exporter.exporter.generate.command import main as generate
from kube_gpu_exporter.exporter.generate.helm_chart import CHART_DIR

pytestmark = pytest.mark.k8s

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
CHART = REPO / CHART_DIR
FIELD_MANAGER = "kube-gpu-exporter-test"
# Every optional object and setting of the thresholds file on, and every namespace moved.
EVERYTHING_ON = """
labels: {node: node, cluster: cluster}
prometheus_rule:
  name: gpu-rules
  namespace: observability
  labels: {release: prom, team: ml-platform}
dashboards: {namespace: grafana, folder: GPUs, tags: [gpu]}
alert_labels: {team: ml-platform}
deployment:
  namespace: gpu-monitoring
  image: {repository: registry.example.com/kge, tag: "1.2.3"}
  per_process_attribution: false
  runtime_class_name: ""
  node_affinity: {key: cloud.google.com/gke-accelerator, values: []}
  extra_tolerations:
    - {key: dedicated, operator: Equal, value: gpu, effect: NoSchedule}
    - {key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute}
    - {operator: Exists}
  resources:
    requests: {cpu: 100m, memory: 200Mi}
    limits: {cpu: "1", memory: 1Gi}
  pod_resources_dir: /var/lib/k0s/kubelet/pod-resources
  scrape_interval: 15s
  network_policy:
    prometheus_namespace_labels: {kubernetes.io/metadata.name: observability}
    prometheus_pod_labels: {app.kubernetes.io/name: prometheus}
    node_cidrs: [10.0.0.0/16, "fd00::/64"]
"""


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with run_control_plane(tmp_path_factory.mktemp("control-plane")) as plane:
        install_crds(plane)
        yield plane


@pytest.fixture(scope="module")
def everything_on(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The thresholds file with every optional object on."""
    path = tmp_path_factory.mktemp("thresholds") / "thresholds.yaml"
    path.write_text(EVERYTHING_ON)
    return path


def manifests(folder: Path) -> dict[str, list[dict[str, Any]]]:
    """Every Kubernetes object of every YAML file under `folder`, by file (relative path).
    Files that hold none (promtool tests, plain rule files, Alertmanager's inhibit rules) and
    kustomize's own files (a Kustomization, a Component: read by kubectl, never sent to a
    server) are left out."""
    found: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(folder.rglob("*.yaml")):
        docs = [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
        objects = [d for d in docs if "apiVersion" in d and "kind" in d]
        objects = [d for d in objects if not d["apiVersion"].startswith("kustomize.config.k8s.io/")]
        if objects:
            found[str(path.relative_to(folder))] = objects
    return found


def kustomized(folder: Path) -> list[str]:
    resources: list[str] = yaml.safe_load((folder / "kustomization.yaml").read_text())["resources"]
    return resources


def rendered(*args: str) -> dict[str, list[dict[str, Any]]]:
    """`helm template` of the chart: its objects by the template that made them."""
    result = subprocess.run(
        [
            str(require("helm")),
            "template",
            "kge",
            str(CHART),
            "--namespace",
            "monitoring",
            *OPERATOR_APIS,
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    found: dict[str, list[dict[str, Any]]] = {}
    source = "?"
    for text in result.stdout.split("\n---"):
        for line in text.splitlines():
            if line.startswith("# Source: "):
                source = line.removeprefix("# Source: ")
        doc = yaml.safe_load(text)
        if isinstance(doc, dict) and "kind" in doc:
            found.setdefault(source, []).append(doc)
    return found


class Server:
    """Where the API server keeps each kind, from its own discovery documents."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self._kinds: dict[str, dict[str, tuple[str, bool]]] = {}

    def resource(self, api_version: str, kind: str) -> tuple[str, bool] | None:
        """(plural, namespaced) of the kind, or None when the server does not serve it."""
        if api_version not in self._kinds:
            base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            status, body = self.plane.request("GET", base)
            listed = body.get("resources", []) if status == 200 else []
            self._kinds[api_version] = {
                r["kind"]: (r["name"], r["namespaced"]) for r in listed if "/" not in r["name"]
            }
        return self._kinds[api_version].get(kind)

    def ensure_namespace(self, name: str) -> None:
        status, body = self.plane.request(
            "POST", "/api/v1/namespaces", {"metadata": {"name": name}}
        )
        assert status in (201, 409), body

    def apply_dry_run(self, obj: dict[str, Any]) -> str | None:
        """A server-side apply dry run of `obj`; None when the server takes it, else why not."""
        api_version, kind, meta = obj["apiVersion"], obj["kind"], obj["metadata"]
        found = self.resource(api_version, kind)
        if found is None:
            return f"{api_version} {kind} is not served"
        plural, namespaced = found
        namespace = meta.get("namespace", "")
        if namespaced and not namespace:
            return "namespaced, but names no namespace"
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        where = f"/namespaces/{namespace}" if namespaced else ""
        query = urlencode(
            {"dryRun": "All", "fieldManager": FIELD_MANAGER, "fieldValidation": "Strict"}
        )
        request = urllib.request.Request(
            f"{self.plane.url}{base}{where}/{plural}/{meta['name']}?{query}",
            data=json.dumps(obj).encode(),  # JSON is YAML
            method="PATCH",
            headers={
                "Authorization": f"Bearer {self.plane.token}",
                "Content-Type": "application/apply-patch+yaml",
                "Accept": "application/json",
            },
        )
        try:
            with urllib.request.urlopen(
                request, context=self.plane.ssl_context(), timeout=30
            ) as response:
                warnings = response.headers.get_all("Warning") or []
        except urllib.error.HTTPError as error:
            body = json.loads(error.read() or b"{}")
            return f"{error.code}: {body.get('message', body)}"
        # a warning (a deprecated API or field, a value the server only tolerates) is a
        # defect too: users see it on every apply
        return f"warnings: {warnings}" if warnings else None


def refused(plane: ControlPlane, files: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Every object of `files` applied (dry run), their namespaces created first for real (a
    dry-run Namespace does not exist for the objects in it); what the server refused."""
    server = Server(plane)
    objects = [obj for objs in files.values() for obj in objs]
    for obj in objects:
        if obj["kind"] == "Namespace":
            server.ensure_namespace(obj["metadata"]["name"])
        elif obj["metadata"].get("namespace"):
            server.ensure_namespace(obj["metadata"]["namespace"])
    problems = []
    for name, objs in files.items():
        for obj in objs:
            why = server.apply_dry_run(obj)
            if why is not None:
                problems.append(f"{name}: {obj['kind']} {obj['metadata']['name']}: {why}")
    return problems


def test_deploy_folder_applies_to_the_real_api_server(plane: ControlPlane) -> None:
    files = manifests(DEPLOY)
    assert set(kustomized(DEPLOY)) <= set(files), "a kustomization resource holds no object"
    assert refused(plane, files) == []


def test_generate_with_every_optional_object_applies(
    plane: ControlPlane, everything_on: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    assert generate(["--config", str(everything_on), "--out", str(out)]) == 0
    files = manifests(out)
    assert set(kustomized(out)) <= set(files)
    kinds = {obj["kind"] for objs in files.values() for obj in objs}
    assert {"NetworkPolicy", "DaemonSet", "Deployment", "ServiceMonitor", "PrometheusRule"} <= kinds
    assert refused(plane, files) == []


@pytest.mark.parametrize(
    "values",
    [
        [],
        ["--set", "alertmanagerConfig.enabled=true"],
        [
            "--set",
            "networkPolicy.enabled=true",
            "--set-json",
            'networkPolicy.prometheusPodLabels={"app":"prometheus"}',
            "--set",
            "webConfig.existingSecret=web",
            "--set",
            "webConfig.tls=true",
            "--set",
            "hostNetwork=true",
            "--set",
            "podLabelAllowlist={team}",
            "--set",
            "service.clusterIP=",
        ],
    ],
    ids=["defaults", "alertmanager-config", "keys-set"],
)
def test_helm_template_applies(plane: ControlPlane, values: list[str]) -> None:
    files = rendered(*values)
    kinds = {o["kind"] for objs in files.values() for o in objs}
    assert {"ServiceMonitor", "PrometheusRule"} <= kinds
    if "alertmanagerConfig.enabled=true" in values:
        assert "AlertmanagerConfig" in kinds
    if "networkPolicy.enabled=true" in values:
        assert "NetworkPolicy" in kinds
    assert refused(plane, files) == []


def test_helm_template_with_every_optional_object_applies(
    plane: ControlPlane, everything_on: Path, tmp_path: Path
) -> None:
    values = tmp_path / "values.yaml"
    assert generate(["--config", str(everything_on), "--helm-values", str(values)]) == 0
    files = rendered("-f", str(values), "--set", "alertmanagerConfig.enabled=true")
    kinds = {obj["kind"] for objs in files.values() for obj in objs}
    assert {"NetworkPolicy", "AlertmanagerConfig"} <= kinds
    assert refused(plane, files) == []


def test_the_check_refuses_what_a_cluster_refuses(plane: ControlPlane) -> None:
    """The dry run is strict, and the CRDs' schemas are enforced: an unknown field in a
    DaemonSet's pod template, a ServiceMonitor endpoint's unknown field and a value its pattern
    refuses are refused, as `kubectl apply --server-side` would refuse them."""
    files = manifests(DEPLOY)
    (daemonset,) = files["daemonset.yaml"]
    daemonset["spec"]["template"]["spec"]["containers"][0]["resource"] = {}
    (monitor,) = (o for o in files["servicemonitor.yaml"] if o["kind"] == "ServiceMonitor")
    unknown = copy.deepcopy(monitor)
    unknown["spec"]["endpoints"][0]["scrapeEvery"] = "30s"
    mistyped = copy.deepcopy(monitor)
    mistyped["spec"]["endpoints"][0]["interval"] = "every 30s"
    problems = refused(
        plane, {"daemonset.yaml": [daemonset], "servicemonitor.yaml": [unknown, mistyped]}
    )
    assert len(problems) == 3, problems
    assert '.containers[name="exporter"].resource: field not declared in schema' in problems[0]
    assert ".spec.endpoints[0].scrapeEvery: field not declared in schema" in problems[1]
    assert 'spec.endpoints[0].interval: Invalid value: "every 30s"' in problems[2], problems[2]
