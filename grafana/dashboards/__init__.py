"""The dashboards, one module each; `build_all` is what `generate` renders."""

from __future__ import annotations

from kube_gpu_exporter.grafana.dashboards import cluster, node, workload
from kube_gpu_exporter.grafana.model import Dashboard
from kube_gpu_exporter.rules.config import Config

BUILDERS = (cluster.build, node.build, workload.build)


def build_all(cfg: Config) -> tuple[Dashboard, ...]:
    return tuple(build(cfg) for build in BUILDERS)
