"""A Prometheus object for the running prometheus-operator, and the built Prometheus 3 run as a
process on exactly the configuration the operator generated for it (prometheus_operator.py's
pod_view: only what a pod would supply is rewritten).

Used where the targets are real pods: the operator's ServiceMonitor job discovers them through
EndpointSlices that the real EndpointSlice controller writes from the Service's selector, and
Prometheus scrapes the pods' addresses on the test node's own bridge (this process's network
namespace holds the bridge's other end).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from control_plane import ControlPlane
from prometheus_operator import check_with_promtool, pod_view, prometheus_config
from real_binaries import real_components

from prometheus_server import BUILT, Prometheus, binaries_of, start_prometheus, stop_prometheus
from support import free_port, wait_until


def create(
    plane: ControlPlane, namespace: str, name: str, selector: dict[str, str], **spec: Any
) -> None:
    """A Prometheus selecting ServiceMonitors of every namespace by `selector` (as
    kube-prometheus-stack's `release` label), discovering through EndpointSlices; `spec`
    adds to its spec (rules, alerting, an evaluation interval)."""
    plane.ok(
        "POST",
        f"/apis/monitoring.coreos.com/v1/namespaces/{namespace}/prometheuses",
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "Prometheus",
            "metadata": {"name": name},
            "spec": {
                "version": "v" + real_components.prometheus_release(real_components.PROMETHEUS),
                "serviceDiscoveryRole": "EndpointSlice",
                "serviceMonitorSelector": {"matchLabels": selector},
                "serviceMonitorNamespaceSelector": {},
                **spec,
            },
        },
    )


@contextmanager
def run_managed(
    plane: ControlPlane, namespace: str, name: str, job: str, workdir: Path
) -> Iterator[Prometheus]:
    """Prometheus on the operator's configuration for `name`, once it holds `job`; its rule
    files under `workdir/rules`, where the caller writes the ConfigMaps as the pod mounts them
    (prometheus_operator.write_rule_files)."""
    config = wait_until(
        lambda: (c := prometheus_config(plane, namespace, name)) and job in c and c,
        timeout=90,
        what=f"the operator's Prometheus configuration with {job}",
    )
    workdir.mkdir(parents=True, exist_ok=True)
    runnable = pod_view(config, plane, workdir / "rules", f"prometheus-{name}-0")
    (workdir / "prometheus.yaml").write_text(yaml.safe_dump(runnable))
    check = check_with_promtool(workdir / "prometheus.yaml")
    assert check.returncode == 0, check.stdout + check.stderr
    server = start_prometheus(
        workdir / "prometheus.yaml",
        workdir / "data",
        free_port(),
        workdir / "prometheus.log",
        generation=binaries_of(BUILT),
    )
    try:
        yield server
    finally:
        stop_prometheus(server)
