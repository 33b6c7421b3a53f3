"""The prometheus-operator's real CRDs (ServiceMonitor, PrometheusRule, AlertmanagerConfig),
read from its Go module and installed into a test control plane, so that the objects we
generate meet the schemas a cluster with the operator holds."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from control_plane import ControlPlane

from support import wait_until

# The operator's CRDs, from its Go module: the root module's newest version the proxy serves
# (later tags exist only for the API module, which holds no CRD manifests).
OPERATOR = "github.com/prometheus-operator/prometheus-operator@v0.85.0"
CRDS = ("servicemonitors", "prometheusrules", "alertmanagerconfigs")


class _CrdLoader(yaml.SafeLoader):
    """YAML 1.1 reads a bare `=` (the CRDs' matchType enum) as its `value` tag; Go reads it as
    the string "=", as the API server will."""


_CrdLoader.add_constructor("tag:yaml.org,2002:value", lambda loader, node: node.value)


def operator_crds() -> list[dict[str, Any]]:
    """The real CRDs of the objects the chart makes: a no-op download once cached."""
    go = shutil.which("go") or "/usr/local/go/bin/go"
    result = subprocess.run(
        [go, "mod", "download", "-json", OPERATOR],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "GOFLAGS": "-mod=mod"},
    )
    if result.returncode != 0:
        pytest.fail(f"go mod download {OPERATOR}: {result.stdout}{result.stderr}", pytrace=False)
    folder = Path(json.loads(result.stdout)["Dir"]) / "example" / "prometheus-operator-crd"
    return [
        yaml.load((folder / f"monitoring.coreos.com_{name}.yaml").read_text(), _CrdLoader)
        for name in CRDS
    ]


def install_crds(plane: ControlPlane) -> None:
    """Create the CRDs and wait until the API server serves them (Established)."""
    crds = operator_crds()
    for crd in crds:
        plane.ok("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    for crd in crds:
        path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd['metadata']['name']}"

        def established(path: str = path) -> bool:
            # `status.conditions` is null until the controller first looks at the CRD
            conditions = plane.ok("GET", path).get("status", {}).get("conditions") or []
            return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

        wait_until(established, timeout=60)
