"""The chart installed, upgraded, rolled back and uninstalled by the real `helm` on a real API
server: the install command users type (`-n monitoring --create-namespace --set image.tag=...
--set serviceMonitor.additionalLabels.release=...`) without the prometheus-operator's CRDs
(no ServiceMonitor or PrometheusRule, and no failure) and with them; every object the chart
made is gone after `helm uninstall`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from control_plane import ControlPlane, run_control_plane
from operator_crds import install_crds
from test_helm_chart import CHART, helm, objects, rendered_values

pytestmark = pytest.mark.k8s

RELEASE = "kube-gpu-exporter"
NAMESPACE = "monitoring"


def api_path(obj: dict[str, Any]) -> str:
    """Where the API server keeps an object (the plurals of the kinds the chart makes)."""
    api_version, kind, meta = obj["apiVersion"], obj["kind"], obj["metadata"]
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    where = f"/namespaces/{meta['namespace']}" if meta.get("namespace") else ""
    lower = kind.lower()
    plural = lower[:-1] + "ies" if lower.endswith("y") else lower + "s"
    return f"{base}{where}/{plural}/{meta['name']}"


def manifest(kube: list[str]) -> list[dict[str, Any]]:
    """The objects of the installed release, as Helm recorded them."""
    result = helm("get", "manifest", RELEASE, *kube)
    assert result.returncode == 0, result.stderr
    return list(objects(result.stdout).values())


def stored(plane: ControlPlane, obj: dict[str, Any]) -> dict[str, Any] | None:
    status, body = plane.request("GET", api_path(obj))
    assert status in (200, 404), (status, body)
    return body if status == 200 else None


def image(plane: ControlPlane) -> str:
    path = f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets/{RELEASE}"
    found: str = plane.ok("GET", path)["spec"]["template"]["spec"]["containers"][0]["image"]
    return found


def install(kube: list[str], *args: str) -> None:
    result = helm(
        "install", RELEASE, str(CHART), *kube, "--create-namespace",
        "--set", "image.tag=0.2.0", "--set", "serviceMonitor.additionalLabels.release=prom",
        *args,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def uninstall_leaves_nothing(plane: ControlPlane, kube: list[str]) -> None:
    made = manifest(kube)
    result = helm("uninstall", RELEASE, *kube, "--wait", "--timeout", "60s")
    assert result.returncode == 0, result.stdout + result.stderr
    left = [f"{o['kind']} {o['metadata']['name']}" for o in made if stored(plane, o)]
    assert left == []


def test_install_upgrade_rollback_uninstall(tmp_path: Path) -> None:
    with run_control_plane(tmp_path / "plane") as plane:
        kube = ["--kubeconfig", str(plane.kubeconfig), "--namespace", NAMESPACE]

        # No operator: the install succeeds, without the operator's kinds.
        install(kube)
        kinds = {o["kind"] for o in manifest(kube)}
        assert {"DaemonSet", "Deployment", "Service", "ClusterRole", "ConfigMap"} <= kinds
        assert not kinds & {"ServiceMonitor", "PrometheusRule", "Namespace"}
        assert image(plane).endswith(":0.2.0")
        uninstall_leaves_nothing(plane, kube)

        # With the operator's CRDs: the ServiceMonitors and the PrometheusRule, as rendered.
        install_crds(plane)
        install(kube, "--set", "prometheusRule.additionalLabels.release=prom")
        made = manifest(kube)
        for obj in made:
            found = stored(plane, obj)
            assert found is not None, obj["metadata"]["name"]
            if obj["kind"] in ("ServiceMonitor", "PrometheusRule"):
                assert found["spec"] == obj["spec"], f"the CRD's schema pruned {obj['kind']}"
                assert found["metadata"]["labels"]["release"] == "prom"
        assert {"ServiceMonitor", "PrometheusRule"} <= {o["kind"] for o in made}

        result = helm("upgrade", RELEASE, str(CHART), *kube, "--reuse-values",
                      "--set", "image.tag=0.3.0")  # fmt: skip
        assert result.returncode == 0, result.stdout + result.stderr
        assert image(plane).endswith(":0.3.0")
        result = helm("rollback", RELEASE, "1", *kube)
        assert result.returncode == 0, result.stdout + result.stderr
        assert image(plane).endswith(":0.2.0")

        # Thresholds: an upgrade with rendered values changes the rule; one alone is refused.
        values = rendered_values(tmp_path, "alerts:\n  GPUTemperatureHigh: {threshold: 80}\n")
        result = helm("upgrade", RELEASE, str(CHART), *kube, "-f", str(values))
        assert result.returncode == 0, result.stdout + result.stderr
        rule = next(o for o in manifest(kube) if o["kind"] == "PrometheusRule")
        assert "> 80" in str(stored(plane, rule))
        result = helm("upgrade", RELEASE, str(CHART), *kube, "-f", str(values),
                      "--set", "alerts.GPUTemperatureHigh.threshold=70")  # fmt: skip
        assert result.returncode != 0
        assert "alerts.GPUTemperatureHigh differ" in result.stderr

        uninstall_leaves_nothing(plane, kube)
