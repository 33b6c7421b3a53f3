"""The Helm chart that `generate` writes (charts/kube-gpu-exporter/), run through the real `helm`
built from its Go module: it lints clean, renders deploy/ object for object with its default
values, refuses bad values through its schema, and changes the alerts when upgraded with the
values `generate --helm-values` renders from another thresholds file — and only then."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from control_plane import ControlPlane, run_control_plane
from operator_crds import install_crds
from real_binaries import require

from kube_gpu_exporter.exporter.generate.command import main as generate
from kube_gpu_exporter.exporter.generate.helm_chart import CHART_DIR, chart_files
from kube_gpu_exporter.rules.config import Config

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / CHART_DIR
DEPLOY = REPO / "deploy"


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(require("helm")), *args], capture_output=True, text=True, timeout=120, check=False
    )


def template(*args: str) -> subprocess.CompletedProcess[str]:
    return helm("template", "kge", str(CHART), "--namespace", "monitoring", *args)


def objects(text: str) -> dict[tuple[str, str, str], dict[str, Any]]:
    """The Kubernetes objects of a multi-document YAML text, by kind, namespace and name."""
    found: dict[tuple[str, str, str], dict[str, Any]] = {}
    for doc in yaml.safe_load_all(text):
        if doc is None:
            continue
        meta = doc["metadata"]
        key = (doc["kind"], meta.get("namespace", ""), meta["name"])
        assert key not in found, f"{key} twice"
        found[key] = doc
    return found


def deploy_objects() -> dict[tuple[str, str, str], dict[str, Any]]:
    """What `kubectl apply -k deploy/` applies: every file its kustomization lists."""
    resources = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())["resources"]
    return objects("\n---\n".join((DEPLOY / name).read_text() for name in resources))


def rendered_values(tmp_path: Path, thresholds: str) -> Path:
    config, values = tmp_path / "thresholds.yaml", tmp_path / "values.yaml"
    config.write_text(thresholds)
    assert generate(["--config", str(config), "--helm-values", str(values)]) == 0
    return values


def rule(objs: dict[tuple[str, str, str], dict[str, Any]], alert: str) -> dict[str, Any]:
    (prometheus_rule,) = (o for k, o in objs.items() if k[0] == "PrometheusRule")
    groups = prometheus_rule["spec"]["groups"]
    return next(r for g in groups for r in g["rules"] if r.get("alert") == alert)


def test_the_chart_on_disk_is_what_generate_writes():
    """No file in the chart that generate does not write (a stale template would render)."""
    on_disk = {str(p.relative_to(CHART)) for p in CHART.rglob("*") if p.is_file()}
    assert on_disk == set(chart_files(Config()))


def test_helm_lint_is_clean():
    result = helm("lint", "--strict", str(CHART))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout, result.stdout


def test_default_values_render_deploy_object_for_object():
    result = template()
    assert result.returncode == 0, result.stderr
    rendered = objects(result.stdout)
    assert sorted(rendered) == sorted(deploy_objects())
    assert rendered == deploy_objects()
    kinds = {kind for kind, _, _ in rendered}
    assert {"DaemonSet", "Deployment", "ClusterRole", "Service", "ServiceMonitor"} <= kinds
    dashboards = [o for (kind, _, _), o in rendered.items() if kind == "ConfigMap"]
    assert len(dashboards) == 3
    assert all(d["metadata"]["labels"]["grafana_dashboard"] == "1" for d in dashboards)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--set", "alerts.GPUTemperatureHigh.threshold=-5"],
            "/alerts/GPUTemperatureHigh/threshold",
        ),
        (["--set", "alerts.GPUTemperatureHig.threshold=90"], "GPUTemperatureHig"),
        (["--set", "deployment.imagee.tag=1.0"], "imagee"),
        (["--set", "alerts.GPUAllocatedIdle.severity=page"], "/alerts/GPUAllocatedIdle/severity"),
        (["--set", "alerts.GPULost.labels.bad-name=x"], "bad-name"),
    ],
)
def test_bad_values_are_refused_by_the_schema(args: list[str], message: str):
    result = template(*args)
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr, result.stderr
    assert message in result.stderr, result.stderr


def test_a_threshold_changed_in_values_alone_is_refused_naming_it():
    """Helm cannot recompute the rule: silently keeping the old one would be the bug."""
    result = template("--set", "alerts.GPUTemperatureHigh.threshold=80")
    assert result.returncode != 0
    assert "thresholds alerts.GPUTemperatureHigh differ" in result.stderr, result.stderr
    assert "--helm-values FILE" in result.stderr


def test_rendered_values_change_the_alerts(tmp_path: Path):
    default = rule(objects(template().stdout), "GPUTemperatureHigh")
    values = rendered_values(tmp_path, "alerts:\n  GPUTemperatureHigh: {threshold: 80, for: 7m}\n")
    result = template("-f", str(values))
    assert result.returncode == 0, result.stderr
    changed = rule(objects(result.stdout), "GPUTemperatureHigh")
    assert "> 85" in default["expr"] and default["for"] == "5m"
    assert "> 80" in changed["expr"] and "> 85" not in changed["expr"]
    assert changed["for"] == "7m"


def test_rendered_values_delete_a_default_label(tmp_path: Path):
    """prometheus_rule.labels replaced: the default `release` label must go, which a values
    file can only say with a null; the objects then carry the new labels alone."""
    values = rendered_values(tmp_path, "prometheus_rule:\n  labels: {prometheus: gpu}\n")
    result = template("-f", str(values))
    assert result.returncode == 0, result.stderr
    for (kind, _, _), obj in objects(result.stdout).items():
        if kind in ("PrometheusRule", "ServiceMonitor"):
            assert obj["metadata"]["labels"].get("prometheus") == "gpu"
            assert "release" not in obj["metadata"]["labels"]


def test_network_policy_rendered_when_configured(tmp_path: Path):
    values = rendered_values(
        tmp_path,
        "deployment:\n  network_policy:\n"
        "    prometheus_namespace_labels: {kubernetes.io/metadata.name: monitoring}\n",
    )
    result = template("-f", str(values))
    assert result.returncode == 0, result.stderr
    policies = [k for k in objects(result.stdout) if k[0] == "NetworkPolicy"]
    assert len(policies) == 2


def test_alertmanager_config_holds_the_inhibit_rules():
    result = template("--set", "alertmanagerConfig.enabled=true")
    assert result.returncode == 0, result.stderr
    (config,) = (o for k, o in objects(result.stdout).items() if k[0] == "AlertmanagerConfig")
    inhibit = yaml.safe_load((DEPLOY / "alertmanager-inhibit-rules.yaml").read_text())

    def written(matchers: list[dict[str, str]]) -> list[str]:
        """The operator's matchers in Alertmanager's syntax, as deploy/ writes them."""
        return [f"{m['name']}{m['matchType']}{json.dumps(m['value'])}" for m in matchers]

    assert [
        (written(r["sourceMatch"]), written(r["targetMatch"]), r["equal"])
        for r in config["spec"]["inhibitRules"]
    ] == [
        (r["source_matchers"], r["target_matchers"], r["equal"]) for r in inhibit["inhibit_rules"]
    ]
    assert config["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_values_rendered_by_another_version_are_refused(tmp_path: Path):
    values = rendered_values(tmp_path, "")
    data = yaml.safe_load(values.read_text())
    data["rendered"]["version"] = "0.0.1"
    values.write_text(yaml.safe_dump(data))
    result = template("-f", str(values))
    assert result.returncode != 0
    assert "computed by kube-gpu-exporter 0.0.1" in result.stderr, result.stderr


def api_path(api_version: str, kind: str, namespace: str, name: str) -> str:
    """Where the API server keeps an object (the plurals of the kinds the chart makes)."""
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    where = f"/namespaces/{namespace}" if namespace else ""
    lower = kind.lower()
    plural = lower[:-1] + "ies" if lower.endswith("y") else lower + "s"
    return f"{base}{where}/{plural}/{name}"


def prometheus_rule_expr(plane: ControlPlane, alert: str) -> str:
    path = "/apis/monitoring.coreos.com/v1/namespaces/monitoring/prometheusrules/kube-gpu-exporter"
    groups = plane.ok("GET", path)["spec"]["groups"]
    found: str = next(r for g in groups for r in g["rules"] if r.get("alert") == alert)["expr"]
    return found


@pytest.mark.k8s
def test_helm_install_and_upgrade_into_a_real_api_server(tmp_path: Path):
    """helm install with the defaults creates deploy/'s objects as the API server keeps them
    (the real CRDs prune nothing: what the server holds is what was rendered); an upgrade with
    rendered values changes the PrometheusRule; one with a threshold set alone is refused and
    leaves it."""
    with run_control_plane(tmp_path / "plane") as plane:
        install_crds(plane)
        plane.ok("POST", "/api/v1/namespaces", {"metadata": {"name": "monitoring"}})
        kube = ["--kubeconfig", str(plane.kubeconfig), "--namespace", "monitoring"]
        enabled = ["--set", "alertmanagerConfig.enabled=true"]
        result = helm("install", "kge", str(CHART), *kube, *enabled)
        assert result.returncode == 0, result.stdout + result.stderr
        for (kind, namespace, name), obj in objects(template(*enabled).stdout).items():
            stored = plane.ok("GET", api_path(obj["apiVersion"], kind, namespace, name))
            if kind in ("ServiceMonitor", "PrometheusRule", "AlertmanagerConfig"):
                assert stored["spec"] == obj["spec"], f"the CRD's schema pruned {kind} {name}"
            if kind == "ConfigMap":
                assert stored["data"] == obj["data"]
        assert "> 85" in prometheus_rule_expr(plane, "GPUTemperatureHigh")

        values = rendered_values(tmp_path, "alerts:\n  GPUTemperatureHigh: {threshold: 80}\n")
        result = helm("upgrade", "kge", str(CHART), *kube, *enabled, "-f", str(values))
        assert result.returncode == 0, result.stdout + result.stderr
        assert "> 80" in prometheus_rule_expr(plane, "GPUTemperatureHigh")

        result = helm(
            "upgrade", "kge", str(CHART), *kube, "-f", str(values),
            "--set", "alerts.GPUTemperatureHigh.threshold=70",
        )  # fmt: skip
        assert result.returncode != 0
        assert "alerts.GPUTemperatureHigh differ" in result.stderr
        assert "> 80" in prometheus_rule_expr(plane, "GPUTemperatureHigh")


def test_helm_values_into_a_folder_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    assert generate(["--helm-values", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--helm-values {tmp_path}: is a directory" in err, err


def test_helm_values_check_says_when_the_file_is_stale(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    values = rendered_values(tmp_path, "alerts:\n  GPUTemperatureHigh: {threshold: 80}\n")
    config = str(tmp_path / "thresholds.yaml")
    assert generate(["--config", config, "--helm-values", str(values), "--check"]) == 0
    assert generate(["--helm-values", str(values), "--check"]) == 1  # the defaults differ
    err = capsys.readouterr().err
    assert f"differs: {values}" in err and "--helm-values" in err, err
    assert values.read_text().count("threshold: 80") == 2, "--check wrote nothing"
