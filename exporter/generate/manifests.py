"""The cluster manifests `generate` writes next to the rules: Namespace, ServiceAccount, RBAC,
a ResourceQuota for the priority class, the DaemonSet (daemonset.py), a headless Service, a
ServiceMonitor, the cluster view's Deployment and RBAC (cluster_deployment.py), when
configured a NetworkPolicy (network_policy.py), and a
kustomization.yaml that applies them with the PrometheusRule and the dashboard ConfigMaps in
one `kubectl apply -k deploy/`.

They are functions of the same config as the rules, so what the rules select (the job, the node
label) is what the ServiceMonitor produces, and a test can prove it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from kube_gpu_exporter.exporter.generate.cluster_deployment import (
    CLUSTER_LABELS,
    CLUSTER_NAME,
    CLUSTER_NOTES,
    cluster_dicts,
)
from kube_gpu_exporter.exporter.generate.daemonset import (
    NAME,
    PORT,
    PORT_NAME,
    SELECTOR_LABELS,
    commented,
    daemonset_dict,
    daemonset_notes,
)
from kube_gpu_exporter.exporter.generate.network_policy import (
    network_policy_dicts,
    network_policy_notes,
)
from kube_gpu_exporter.rules.config import Config
from kube_gpu_exporter.rules.render import HEADER, dump_yaml
from kube_gpu_exporter.rules.settings.values import selector_labels

KUSTOMIZATION = "kustomization.yaml"
PRIORITY_CLASS = "system-node-critical"
# Target labels the Prometheus operator sets from the exporter's own pod; the exporter's
# attribution series carry their own namespace/pod/container, which must not be renamed.
DROPPED_TARGET_LABELS = ("namespace", "pod", "container")


def exporter_job(cfg: Config) -> str:
    """The job label that `selectors.exporter` selects: the Service's name unless it names
    another, which the ServiceMonitor then sets."""
    return selector_labels(cfg.selectors.exporter).get("job", NAME)


def _metadata(cfg: Config, name: str = NAME, **extra_labels: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": cfg.deployment.namespace,
        "labels": {**SELECTOR_LABELS, **extra_labels},
    }


def namespace_dict(cfg: Config) -> dict[str, Any]:
    labels = {
        "app.kubernetes.io/name": NAME,
        "pod-security.kubernetes.io/enforce": "privileged",
    }
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": cfg.deployment.namespace, "labels": labels},
    }


def serviceaccount_dict(cfg: Config) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _metadata(cfg)}


def rbac_dicts(cfg: Config) -> list[dict[str, Any]]:
    labels = dict(SELECTOR_LABELS)
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": NAME, "labels": labels},
        "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]},
            {
                "apiGroups": ["resource.k8s.io"],
                "resources": ["resourceslices"],
                "verbs": ["list", "watch"],
            },
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": NAME, "labels": labels},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
        "subjects": [
            {"kind": "ServiceAccount", "name": NAME, "namespace": cfg.deployment.namespace}
        ],
    }
    return [role, binding]


def resourcequota_dict(cfg: Config) -> dict[str, Any]:
    scope = {"scopeName": "PriorityClass", "operator": "In", "values": [PRIORITY_CLASS]}
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": _metadata(cfg, f"{NAME}-{PRIORITY_CLASS}"),
        "spec": {"hard": {"pods": "1G"}, "scopeSelector": {"matchExpressions": [scope]}},
    }


def service_dict(cfg: Config) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(cfg),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": SELECTOR_LABELS,
            "ports": [
                {"name": PORT_NAME, "port": PORT, "targetPort": PORT_NAME, "protocol": "TCP"}
            ],
        },
    }


def servicemonitor_dict(cfg: Config) -> dict[str, Any]:
    """The node exporters' ServiceMonitor: every DaemonSet pod, its node as the node label."""
    node = {
        "sourceLabels": ["__meta_kubernetes_pod_node_name"],
        "targetLabel": cfg.labels.node,
        "action": "replace",
    }
    return _servicemonitor(
        cfg, NAME, SELECTOR_LABELS, cfg.selectors.exporter, [node], ("instance", cfg.labels.node)
    )


def cluster_servicemonitor_dict(cfg: Config) -> dict[str, Any]:
    """The cluster view's ServiceMonitor: one target, whose series carry their own namespace
    (the pods that wait) and no node."""
    return _servicemonitor(
        cfg, CLUSTER_NAME, CLUSTER_LABELS, cfg.selectors.cluster_view, [], ("instance",)
    )


def _servicemonitor(
    cfg: Config,
    name: str,
    labels: Mapping[str, str],
    selector: str,
    target_relabelings: list[dict[str, Any]],
    own_labels: tuple[str, ...],
) -> dict[str, Any]:
    """A ServiceMonitor for the Service `name`, whose series end up with every label that
    `selector` (the rules' selector for them) matches on."""
    relabelings: list[dict[str, Any]] = [
        {"action": "labeldrop", "regex": "|".join(DROPPED_TARGET_LABELS)},
        *target_relabelings,
    ]
    # Every label the rules select the series by must be on them: the job when it is not the
    # Service's name, and any other label of the selector (env="prod", ...), set to the value
    # the selector matches. `own_labels` come from the target itself.
    wanted = selector_labels(selector)
    wanted["job"] = wanted.get("job", name)
    for label, value in wanted.items():
        if (label, value) != ("job", name) and label not in own_labels:
            relabelings.append({"targetLabel": label, "replacement": value, "action": "replace"})
    endpoint = {
        "port": PORT_NAME,
        "path": "/metrics",
        "scheme": "http",
        "interval": cfg.deployment.scrape_interval,
        "relabelings": relabelings,
    }
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {
            "name": name,
            "namespace": cfg.deployment.namespace,
            "labels": {**labels, **dict(sorted(cfg.prometheus_rule.labels.items()))},
        },
        "spec": {
            "selector": {"matchLabels": dict(labels)},
            "namespaceSelector": {"matchNames": [cfg.deployment.namespace]},
            "endpoints": [endpoint],
        },
    }


def _file(documents: Iterable[Mapping[str, Any]], notes: Mapping[str, str] | None = None) -> str:
    """Documents → one YAML file. A JSON round trip first: objects shared between documents
    (the selector labels) would otherwise come out as YAML anchors and aliases."""
    text = HEADER + "---\n".join(dump_yaml(json.loads(json.dumps(d))) for d in documents)
    return commented(text, notes or {})


_NAMESPACE_NOTES = {
    "pod-security.kubernetes.io/enforce:": (
        "The exporter needs a hostPath (the kubelet's pod-resources directory) and, with "
        "per-process attribution, hostPID: both are beyond Pod Security 'baseline', hence a "
        "namespace of its own rather than relaxing the monitoring namespace."
    ),
}
_RBAC_NOTES = {
    "- pods": (
        "The exporter watches only its own node's pods (field selector "
        "spec.nodeName=$NODE_NAME), but RBAC cannot narrow a grant by field, so this reads "
        "every node's pods. Read-only, and only what the watch does: list/watch."
    ),
    "- resourceslices": (
        "DRA: the GPU driver's ResourceSlices give each device's NVML uuid, to attribute DRA "
        "claims (again only this node's, by field selector spec.nodeName)."
    ),
}


_QUOTA_NOTES = {
    "spec:": (
        "Some clusters (GKE among them) admit system-node-critical pods outside kube-system "
        "only where a ResourceQuota scoped to that priority class exists; elsewhere this quota "
        "is inert. 1G pods, as GKE's own quota in kube-system: no limit in effect."
    ),
}
_SERVICE_NOTES = {
    "clusterIP: None": (
        "Headless: Prometheus scrapes every pod (one per node); no virtual IP is needed."
    ),
    "publishNotReadyAddresses:": (
        "A pod is not ready while NVML does not answer; Prometheus must still scrape it to see "
        "kube_gpu_exporter_nvml_up 0 rather than lose the node."
    ),
}
_SERVICEMONITOR_NOTES = {
    "- action: labeldrop": (
        "The operator labels each target with the exporter pod's own namespace, pod and "
        "container; those would push the attribution labels of the GPU series aside as "
        "exported_namespace/exported_pod (dcgm-exporter's well-known wart). Dropped: the node "
        "label below names the target."
    ),
    "- sourceLabels:": (
        "The node name, in the target label that the rules and dashboards use (labels.node)."
    ),
}
_CLUSTER_SERVICEMONITOR_NOTES = {
    "- action: labeldrop": (
        "The cluster view's series carry the namespace of the pods they count; the operator's "
        "target labels (this pod's own namespace, pod, container) would rename it to "
        "exported_namespace. Dropped."
    ),
}
_JOB_NOTE = {
    "- targetLabel: job": (
        "The job that selectors.exporter selects, which is not the Service's name (the "
        "operator's default job)."
    ),
}


def kustomization(resources: Iterable[str]) -> str:
    data = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": list(resources),
    }
    notes = {
        "resources:": (
            "No `namespace:` here: the exporter's objects live in their own namespace, the "
            "PrometheusRule and the dashboard ConfigMaps in the monitoring namespace. The "
            "ServiceMonitor and the PrometheusRule need the Prometheus operator's CRDs."
        )
    }
    return _file([data], notes)


def manifest_files(cfg: Config) -> dict[str, str]:
    """The exporter's own manifests by file name, in the order they are applied; the
    NetworkPolicy only when a Prometheus selector is configured."""
    files = {
        "namespace.yaml": _file([namespace_dict(cfg)], _NAMESPACE_NOTES),
        "serviceaccount.yaml": _file([serviceaccount_dict(cfg)]),
        "rbac.yaml": _file(rbac_dicts(cfg), _RBAC_NOTES),
        "resourcequota.yaml": _file([resourcequota_dict(cfg)], _QUOTA_NOTES),
        "daemonset.yaml": _file([daemonset_dict(cfg)], daemonset_notes(cfg)),
        "service.yaml": _file([service_dict(cfg)], _SERVICE_NOTES),
        "servicemonitor.yaml": _file(
            [servicemonitor_dict(cfg)],
            _SERVICEMONITOR_NOTES | (_JOB_NOTE if exporter_job(cfg) != NAME else {}),
        ),
        "cluster.yaml": _file(
            [*cluster_dicts(cfg), cluster_servicemonitor_dict(cfg)],
            CLUSTER_NOTES | _CLUSTER_SERVICEMONITOR_NOTES,
        ),
    }
    for name, policy in network_policy_dicts(cfg).items():
        files[name] = _file([policy], network_policy_notes(cfg))
    return files
