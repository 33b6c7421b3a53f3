"""The Helm chart (charts/kube-gpu-exporter/), run through the real `helm` built from its Go
module: it lints clean, its defaults with the values `generate --helm-values` writes for the
default thresholds are deploy/ object for object, bad values are refused by its schema, and the
alerts change when upgraded with the values `generate --helm-values` renders from another
thresholds file — and only then. Each of the chart's own keys: test_helm_chart_keys.py; the
install lifecycle on a real API server: test_helm_install.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from real_binaries import require

from kube_gpu_exporter.exporter.generate.command import main as generate
from kube_gpu_exporter.exporter.generate.helm_chart import CHART_DIR, TEMPLATES, chart_files
from kube_gpu_exporter.rules.config import Config

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / CHART_DIR
DEPLOY = REPO / "deploy"
# What a cluster with the prometheus-operator serves: `helm template` knows no server.
OPERATOR_APIS = (
    "--api-versions",
    "monitoring.coreos.com/v1/ServiceMonitor",
    "--api-versions",
    "monitoring.coreos.com/v1/PrometheusRule",
)
# The labels Helm's conventions add, which deploy/ (no release) has not.
HELM_LABELS = frozenset(
    {
        "helm.sh/chart",
        "app.kubernetes.io/instance",
        "app.kubernetes.io/version",
        "app.kubernetes.io/managed-by",
    }
)


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(require("helm")), *args], capture_output=True, text=True, timeout=120, check=False
    )


def template(*args: str, release: str = "kge") -> subprocess.CompletedProcess[str]:
    return helm("template", release, str(CHART), "--namespace", "monitoring", *args)


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


def rendered_objects(*args: str) -> dict[tuple[str, str, str], dict[str, Any]]:
    result = template(*args)
    assert result.returncode == 0, result.stderr
    return objects(result.stdout)


def of_kind(objs: dict[tuple[str, str, str], dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for (k, _, _), o in objs.items() if k == kind]


def deploy_objects() -> dict[tuple[str, str, str], dict[str, Any]]:
    """What `kubectl apply -k deploy/` applies: every file its kustomization lists."""
    resources = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())["resources"]
    return objects("\n---\n".join((DEPLOY / name).read_text() for name in resources))


def without_helm_labels(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_helm_labels(v) for k, v in value.items() if k not in HELM_LABELS}
    if isinstance(value, list):
        return [without_helm_labels(v) for v in value]
    return value


def rendered_values(tmp_path: Path, thresholds: str) -> Path:
    config, values = tmp_path / "thresholds.yaml", tmp_path / "values.yaml"
    config.write_text(thresholds)
    assert generate(["--config", str(config), "--helm-values", str(values)]) == 0
    return values


def rule(objs: dict[tuple[str, str, str], dict[str, Any]], alert: str) -> dict[str, Any]:
    (prometheus_rule,) = of_kind(objs, "PrometheusRule")
    groups = prometheus_rule["spec"]["groups"]
    return next(r for g in groups for r in g["rules"] if r.get("alert") == alert)


def test_the_chart_on_disk_is_what_generate_writes_and_the_templates():
    """No file in the chart but the generated ones and the templates (a stale template would
    render)."""
    on_disk = {str(p.relative_to(CHART)) for p in CHART.rglob("*") if p.is_file()}
    assert on_disk == set(chart_files(Config())) | set(TEMPLATES)


@pytest.mark.parametrize(
    "args",
    [[], ["--set", "image.tag=0.2.0", "--set", "serviceMonitor.enabled=true"]],
    ids=["defaults", "set"],
)
def test_helm_lint_is_clean(args: list[str]):
    result = helm("lint", "--strict", str(CHART), *args)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout, result.stdout


def test_deploy_is_the_chart_with_the_default_thresholds_values(tmp_path: Path):
    """deploy/ and the chart's templates, one source of truth held by this test: the chart
    rendered with what `--helm-values` writes for the default thresholds, released as
    kube-gpu-exporter into kube-gpu-exporter, is deploy/ object for object, but for the
    Namespace (Helm's -n / --create-namespace) and Helm's own labels."""
    values = rendered_values(tmp_path, "")
    result = helm(
        "template", "kube-gpu-exporter", str(CHART), "-n", "kube-gpu-exporter",
        "-f", str(values), *OPERATOR_APIS,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    chart = {k: without_helm_labels(o) for k, o in objects(result.stdout).items()}
    deploy = {k: o for k, o in deploy_objects().items() if k[0] != "Namespace"}
    assert sorted(chart) == sorted(deploy)
    for key, obj in deploy.items():
        assert chart[key] == obj, key


def test_the_chart_ships_no_namespace():
    """Helm users create it with -n / --create-namespace; a chart's own Namespace object
    fails an install into an existing one, and an uninstall would delete it."""
    objs = rendered_objects(*OPERATOR_APIS)
    assert not of_kind(objs, "Namespace")
    assert {ns for (_, ns, _) in objs} == {"", "monitoring"}


def test_the_issue_command_renders_the_tag():
    """`--set deployment.image.tag=0.2.0` exited 1 (a threshold changed alone); the old path
    is kept as an alias of image.tag."""
    for key in ("deployment.image.tag", "image.tag"):
        objs = rendered_objects("--set", f"{key}=0.2.0")
        images = [
            c["image"]
            for kind in ("DaemonSet", "Deployment")
            for o in of_kind(objs, kind)
            for c in o["spec"]["template"]["spec"]["containers"]
        ]
        assert images and all(i.endswith(":0.2.0") for i in images), images


@pytest.mark.parametrize(
    ("args", "kinds"),
    [
        ([], set()),
        (list(OPERATOR_APIS), {"ServiceMonitor", "PrometheusRule"}),
        (["--set", "serviceMonitor.enabled=true"], {"ServiceMonitor"}),
        (["--set", "prometheusRule.enabled=true"], {"PrometheusRule"}),
        ([*OPERATOR_APIS, "--set", "serviceMonitor.enabled=false"], {"PrometheusRule"}),
        ([*OPERATOR_APIS, "--set", "prometheusRule.enabled=false"], {"ServiceMonitor"}),
    ],
    ids=["no-operator", "operator", "sm-on", "rule-on", "sm-off", "rule-off"],
)
def test_operator_objects_follow_the_api_server_or_the_switch(args: list[str], kinds: set[str]):
    """auto (the default): rendered only where monitoring.coreos.com/v1 is served, so an
    install without the operator's CRDs does not fail; true and false decide alone."""
    objs = rendered_objects(*args)
    found = {k for (k, _, _) in objs} & {"ServiceMonitor", "PrometheusRule"}
    assert found == kinds


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
        (["--set", "serviceMonitor.enabeld=true"], "enabeld"),
        (["--set", "image.tga=1"], "tga"),
        (["--set", "cluster.resource.limits.cpu=1"], "resource"),
        (["--set", "serviceMonitor.enabled=yes"], "/serviceMonitor/enabled"),
        (["--set", "hostPID=maybe"], "/hostPID"),
        (["--set", "image.pullPolicy=Sometimes"], "/image/pullPolicy"),
        (["--set", "tolerationz[0].key=x"], "tolerationz"),
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
    default = rule(rendered_objects(*OPERATOR_APIS), "GPUTemperatureHigh")
    values = rendered_values(tmp_path, "alerts:\n  GPUTemperatureHigh: {threshold: 80, for: 7m}\n")
    changed = rule(rendered_objects("-f", str(values), *OPERATOR_APIS), "GPUTemperatureHigh")
    assert "> 85" in default["expr"] and default["for"] == "5m"
    assert "> 80" in changed["expr"] and "> 85" not in changed["expr"]
    assert changed["for"] == "7m"


def test_the_default_labels_name_no_stack_release():
    """`release: kube-prometheus-stack` matched only a stack release of that exact name: the
    chart's defaults carry no such label; users set theirs (NOTES.txt says so)."""
    objs = rendered_objects(*OPERATOR_APIS, "--set", "alertmanagerConfig.enabled=true")
    for kind in ("ServiceMonitor", "PrometheusRule", "AlertmanagerConfig"):
        for obj in of_kind(objs, kind):
            assert "release" not in obj["metadata"]["labels"], (kind, obj["metadata"])


def test_rendered_values_carry_the_thresholds_labels(tmp_path: Path):
    """prometheus_rule.labels of a thresholds file become the chart's additionalLabels of the
    ServiceMonitors, the PrometheusRule and the AlertmanagerConfig, and nothing else."""
    values = rendered_values(tmp_path, "prometheus_rule:\n  labels: {prometheus: gpu}\n")
    objs = rendered_objects(
        "-f", str(values), *OPERATOR_APIS, "--set", "alertmanagerConfig.enabled=true"
    )
    for kind in ("ServiceMonitor", "PrometheusRule", "AlertmanagerConfig"):
        for obj in of_kind(objs, kind):
            assert obj["metadata"]["labels"].get("prometheus") == "gpu", kind
            assert "release" not in obj["metadata"]["labels"]


def test_network_policy_rendered_when_configured(tmp_path: Path):
    values = rendered_values(
        tmp_path,
        "deployment:\n  network_policy:\n"
        "    prometheus_namespace_labels: {kubernetes.io/metadata.name: monitoring}\n",
    )
    policies = of_kind(rendered_objects("-f", str(values)), "NetworkPolicy")
    assert len(policies) == 2
    assert policies[0]["spec"]["ingress"][0]["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    ]


def test_alertmanager_config_holds_the_inhibit_rules():
    objs = rendered_objects("--set", "alertmanagerConfig.enabled=true")
    (config,) = of_kind(objs, "AlertmanagerConfig")
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


def test_values_rendered_by_another_version_are_refused(tmp_path: Path):
    values = rendered_values(tmp_path, "")
    data = yaml.safe_load(values.read_text())
    data["rendered"]["version"] = "0.0.1"
    values.write_text(yaml.safe_dump(data))
    result = template("-f", str(values), *OPERATOR_APIS)
    assert result.returncode != 0
    assert "computed by kube-gpu-exporter 0.0.1" in result.stderr, result.stderr


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


def test_network_policy_without_a_prometheus_selector_is_one_clear_error():
    """An empty peer is refused by the API server at install (`must specify a peer`); the chart
    says which keys to set instead."""
    result = template("--set", "networkPolicy.enabled=true")
    assert result.returncode != 0
    assert "networkPolicy.enabled: set networkPolicy.prometheusNamespaceLabels" in result.stderr
