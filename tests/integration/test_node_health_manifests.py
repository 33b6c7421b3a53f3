"""deploy/node-health/, the opt-in kustomize Component of `serve --health.node-conditions`: the
chart's node-health objects (nodeHealth.conditions and nodeHealth.admissionPolicy on, released
as deploy/ is) object for object, so the admission policy's CEL cannot differ between the two;
its patch gives the DaemonSet a flag `serve` parses; deploy/'s own kustomization leaves it out.
test_k8s_node_health proves the objects themselves on the real API server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from test_helm_chart import (
    CHART,
    OPERATOR_APIS,
    helm,
    objects,
    rendered_values,
    without_helm_labels,
)

from kube_gpu_exporter.exporter.cli import build_parser

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
COMPONENT = DEPLOY / "node-health"
KINDS = {
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}


def _component() -> dict[str, Any]:
    found: dict[str, Any] = yaml.safe_load((COMPONENT / "kustomization.yaml").read_text())
    return found


def test_the_component_is_the_charts_node_health(tmp_path: Path) -> None:
    values = rendered_values(tmp_path, "")
    result = helm(
        "template", "kube-gpu-exporter", str(CHART), "-n", "kube-gpu-exporter",
        "-f", str(values), *OPERATOR_APIS,
        "--set", "nodeHealth.conditions=true", "--set", "nodeHealth.admissionPolicy=true",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    chart = {
        k: without_helm_labels(o)
        for k, o in objects(result.stdout).items()
        if k[0] in KINDS and k[2].endswith("-node-health")
    }
    text = "\n---\n".join((COMPONENT / name).read_text() for name in _component()["resources"])
    deploy = objects(text)
    assert {kind for kind, _, _ in deploy} == KINDS
    assert sorted(chart) == sorted(deploy)
    for key, obj in deploy.items():
        assert chart[key] == obj, key


def test_its_patch_gives_the_daemonset_a_flag_serve_parses() -> None:
    (patch,) = _component()["patches"]
    daemonset = yaml.safe_load((DEPLOY / "daemonset.yaml").read_text())
    assert patch["target"] == {"kind": "DaemonSet", "name": daemonset["metadata"]["name"]}
    (op,) = yaml.safe_load(patch["patch"])
    assert (op["op"], op["path"]) == ("add", "/spec/template/spec/containers/0/args/-")
    args = [*daemonset["spec"]["template"]["spec"]["containers"][0]["args"], op["value"]]
    parsed = build_parser().parse_args(args)
    assert parsed.health_conditions is True


def test_deploy_itself_does_not_write_to_nodes() -> None:
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    assert not any(r.startswith("node-health") for r in kustomization["resources"])
    assert "components" not in kustomization
