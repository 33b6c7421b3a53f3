"""The real prometheus-operator (built from its Go module by `make prom-bin`) as a process
against a test control plane, and what it writes there.

No kubelet runs, so the StatefulSets it makes for a Prometheus or an Alertmanager never get a
pod. What a pod would have run is the operator's output, and that is what the tests take: the
Prometheus configuration Secret (`prometheus-<name>`, `prometheus.yaml.gz`), the rule
ConfigMaps (`prometheus-<name>-rulefiles-<n>`) and the Alertmanager configuration Secret
(`alertmanager-<name>-generated`, `alertmanager.yaml.gz`). `pod_view` rewrites in the
Prometheus configuration only what a pod would have provided: the mounted rule files' folder,
`$(POD_NAME)` and `$(SHARD)` (the config reloader substitutes them from the pod's environment)
and, Prometheus running outside the cluster, the API server's address and credentials for
Kubernetes service discovery (a kubeconfig where a pod uses its ServiceAccount)."""

from __future__ import annotations

import base64
import gzip
import os
import subprocess
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from control_plane import ControlPlane
from netns_host import netns_host
from operator_crds import _CrdLoader
from real_binaries import real_components, require

from kube_gpu_exporter.demo.children import ended_with_parent
from support import free_port, stop_process, wait_until

# where the operator mounts what it generates into the Prometheus pod (pkg/prometheus)
POD_RULES_DIR = "/etc/prometheus/rules/"


def host_address() -> str:
    """Where processes standing in for pods listen: the address of this process's test host
    (netns_host.py), since an Endpoints or EndpointSlice address may not be a loopback one."""
    return netns_host().address


def crd_dir() -> Path:
    """The operator's CRD manifests, copied from its module beside the binary by the build."""
    return Path(require("prometheus-operator")).parent / "crds"


def install_all_crds(plane: ControlPlane) -> None:
    """Every CRD of the operator's release (it watches Prometheus, Alertmanager, … as well as
    the ServiceMonitor, PrometheusRule and AlertmanagerConfig we ship), once Established."""
    names = []
    for name in real_components.OPERATOR_CRDS:
        crd = yaml.load((crd_dir() / name).read_text(), _CrdLoader)
        plane.ok("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        names.append(crd["metadata"]["name"])
    for name in names:
        path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"

        def established(path: str = path) -> bool:
            conditions = plane.ok("GET", path).get("status", {}).get("conditions") or []
            return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

        wait_until(established, timeout=60, what=f"CRD {name} established")


@contextmanager
def run_operator(plane: ControlPlane, workdir: Path, *args: str) -> Iterator[Path]:
    """The operator on the plane's admin kubeconfig (it reads $KUBECONFIG), every namespace
    watched; yields its log once it answers /healthz, and stops it afterwards."""
    binary = require("prometheus-operator")
    port = free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / "prometheus-operator.log"
    argv = [str(binary), f"--web.listen-address=127.0.0.1:{port}", "--log-level=debug", *args]
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            ended_with_parent(argv),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "KUBECONFIG": str(plane.kubeconfig)},
        )

    def healthy() -> bool:
        if proc.poll() is not None:
            tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-30:])
            pytest.fail(f"prometheus-operator exited with {proc.returncode}:\n{tail}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    try:
        wait_until(healthy, timeout=120, what=f"prometheus-operator ready (log: {log_path})")
        yield log_path
    finally:
        stop_process(proc, 20)


def _secret_file(plane: ControlPlane, namespace: str, name: str, key: str) -> str | None:
    status, secret = plane.request("GET", f"/api/v1/namespaces/{namespace}/secrets/{name}")
    if status != 200 or key not in (secret.get("data") or {}):
        return None
    return gzip.decompress(base64.b64decode(secret["data"][key])).decode()


def prometheus_config(plane: ControlPlane, namespace: str, name: str) -> str | None:
    """The configuration the operator generated for Prometheus `name`, None before it has."""
    return _secret_file(plane, namespace, f"prometheus-{name}", "prometheus.yaml.gz")


def alertmanager_config(plane: ControlPlane, namespace: str, name: str) -> str | None:
    """The configuration the operator generated for Alertmanager `name` (its base
    configuration with every selected AlertmanagerConfig merged in), None before it has."""
    return _secret_file(plane, namespace, f"alertmanager-{name}-generated", "alertmanager.yaml.gz")


def rule_files(plane: ControlPlane, namespace: str, name: str) -> dict[str, dict[str, str]]:
    """The operator's rule ConfigMaps of Prometheus `name`: ConfigMap name -> {file: text}."""
    found = plane.ok("GET", f"/api/v1/namespaces/{namespace}/configmaps")["items"]
    prefix = f"prometheus-{name}-rulefiles-"
    return {
        c["metadata"]["name"]: c.get("data") or {}
        for c in found
        if c["metadata"]["name"].startswith(prefix)
    }


def pod_view(config: str, plane: ControlPlane, rules_dir: Path, pod_name: str) -> dict[str, Any]:
    """The generated configuration as the first Prometheus pod would run it, from outside the
    cluster: what the config reloader substitutes from the pod's environment (`$(POD_NAME)`
    in the replica label, `$(SHARD)`, 0, in each job's sharding filter), rule files under
    `rules_dir` (where the test writes the ConfigMaps, one folder each, as the pod mounts
    them), and every Kubernetes service discovery reaching the API server through the plane's
    kubeconfig, where a pod uses its ServiceAccount."""
    text = config.replace("$(POD_NAME)", pod_name).replace("$(SHARD)", "0")
    parsed: dict[str, Any] = yaml.safe_load(text)
    parsed["rule_files"] = [
        str(rules_dir / p.removeprefix(POD_RULES_DIR)) for p in parsed.get("rule_files") or []
    ]
    sections = [*(parsed.get("scrape_configs") or [])]
    sections += (parsed.get("alerting") or {}).get("alertmanagers") or []
    for section in sections:
        for sd in section.get("kubernetes_sd_configs") or []:
            assert "api_server" not in sd, sd  # in a pod: the ServiceAccount's in-cluster access
            sd["kubeconfig_file"] = str(plane.kubeconfig)
    return parsed


def write_rule_files(files: dict[str, dict[str, str]], rules_dir: Path) -> None:
    """Each rule ConfigMap as the pod mounts it: a folder named after it, a file per key."""
    for configmap, data in files.items():
        folder = rules_dir / configmap
        folder.mkdir(parents=True, exist_ok=True)
        for key, text in data.items():
            (folder / key).write_text(text)


def check_with_promtool(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(require("promtool")), "check", "config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
