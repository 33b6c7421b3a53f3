"""Dashboards → provisioning-ready JSON files and one ConfigMap per dashboard.

The ConfigMap carries the label the Grafana sidecar (kube-prometheus-stack) watches,
`grafana_dashboard: "1"`, and the folder as an annotation (the sidecar's
`folderAnnotation`). It must stay under 256 KiB: `kubectl apply` stores the whole object in
an annotation, which the API server caps at that size.
"""

from __future__ import annotations

import json

from kube_gpu_exporter.grafana.model import Dashboard
from kube_gpu_exporter.rules.config import Config
from kube_gpu_exporter.rules.render import HEADER, dump_yaml

CONFIGMAP_LIMIT = 256 * 1024
SIDECAR_LABEL = {"grafana_dashboard": "1"}


def dashboard_json(dashboard: Dashboard) -> str:
    return json.dumps(dashboard.to_json(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def configmap(cfg: Config, dashboard: Dashboard) -> str:
    settings = cfg.dashboards
    resource = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"{dashboard.uid}-dashboard",
            "namespace": settings.namespace,
            "labels": {
                "app.kubernetes.io/name": "kube-gpu-exporter",
                "app.kubernetes.io/component": "dashboard",
                **SIDECAR_LABEL,
            },
            "annotations": {settings.folder_annotation: settings.folder},
        },
        "data": {f"{dashboard.uid}.json": dashboard_json(dashboard)},
    }
    return HEADER + dump_yaml(resource)
