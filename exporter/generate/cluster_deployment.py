"""`kube-gpu-exporter cluster`'s manifests: a one-replica Deployment, its ServiceAccount, a
read-only ClusterRole with its binding, and a Service for its port.

The cluster view is one process per cluster (every node, pod and quota watched once), unlike
the node exporter's DaemonSet, so it has its own name, component label and RBAC: the node
exporter's ServiceMonitor (component `exporter`) does not select it. Reasons for the
settings that are not obvious are comments in the generated file.
"""

from __future__ import annotations

from typing import Any, Final

from kube_gpu_exporter.exporter.generate.daemonset import (
    NAME,
    POD_SECURITY_CONTEXT,
    PORT_NAME,
    PROBE_TIMING,
    image,
)
from kube_gpu_exporter.rules.config import Config

CLUSTER_NAME: Final = f"{NAME}-cluster"
CLUSTER_PORT: Final = 19401  # exporter/cluster_app.py DEFAULT_PORT (a test ties them)
CLUSTER_LABELS: Final = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/component": "cluster"}
CONTAINER: Final = "cluster"
WATCHED: Final = ["pods", "nodes", "resourcequotas", "events"]  # pods first: also `get`
KUEUE_WATCHED: Final = ["workloads", "localqueues", "clusterqueues", "resourceflavors", "cohorts"]
# The watches hold slim values, so memory grows slowly with the pods; the limit leaves room
# for the cluster bench's largest fleet (bench/README.md, "Cluster view").
RESOURCES: Final = {
    "requests": {"cpu": "100m", "memory": "256Mi"},
    "limits": {"memory": "512Mi"},
}
SECURITY_CONTEXT: Final = {
    "runAsNonRoot": True,
    "runAsUser": 65534,
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}


def cluster_args() -> list[str]:
    """`cluster` and its flags, in the form a test parses with the exporter's own parser."""
    return ["cluster", f"--web.listen-address=:{CLUSTER_PORT}"]


def _metadata(cfg: Config, namespaced: bool = True) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": CLUSTER_NAME}
    if namespaced:
        metadata["namespace"] = cfg.deployment.namespace
    return metadata | {"labels": dict(CLUSTER_LABELS)}


def _probe(path: str) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": PORT_NAME}, **PROBE_TIMING}


def cluster_dicts(cfg: Config) -> list[dict[str, Any]]:
    """ServiceAccount, ClusterRole, ClusterRoleBinding, Deployment, Service."""
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _metadata(cfg)}
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": _metadata(cfg, namespaced=False),
        "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": WATCHED[1:], "verbs": ["list", "watch"]},
            # Kueue's queues, where Kueue is installed (without it: nothing to list)
            {
                "apiGroups": ["kueue.x-k8s.io"],
                "resources": KUEUE_WATCHED,
                "verbs": ["list", "watch"],
            },
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": _metadata(cfg, namespaced=False),
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": CLUSTER_NAME,
        },
        "subjects": [
            {"kind": "ServiceAccount", "name": CLUSTER_NAME, "namespace": cfg.deployment.namespace}
        ],
    }
    container = {
        "name": CONTAINER,
        "image": image(cfg),
        "imagePullPolicy": "IfNotPresent",
        "args": cluster_args(),
        "ports": [{"name": PORT_NAME, "containerPort": CLUSTER_PORT, "protocol": "TCP"}],
        "livenessProbe": _probe("/healthz"),
        "readinessProbe": _probe("/readyz"),
        "resources": RESOURCES,
        "securityContext": SECURITY_CONTEXT,
    }
    pod = {
        "serviceAccountName": CLUSTER_NAME,
        "enableServiceLinks": False,
        "securityContext": POD_SECURITY_CONTEXT,
        "containers": [container],
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(cfg),
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": CLUSTER_LABELS},
            "template": {"metadata": {"labels": CLUSTER_LABELS}, "spec": pod},
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(cfg),
        "spec": {
            "selector": CLUSTER_LABELS,
            "ports": [
                {
                    "name": PORT_NAME,
                    "port": CLUSTER_PORT,
                    "targetPort": PORT_NAME,
                    "protocol": "TCP",
                }
            ],
        },
    }
    return [account, role, binding, deployment, service]


CLUSTER_NOTES: Final = {
    "rules:": (
        "Read-only, cluster-wide, and only what is used: the view lists and watches every "
        "node, every pod that has not ended and every ResourceQuota, and the FailedCreate "
        "events (quota refusals); `explain POD` gets one pod. RBAC cannot narrow a grant by "
        "field selector, so the events grant reads every event, not only FailedCreate. "
        "Nothing is written."
    ),
    "replicas: 1": (
        "One replica: two would serve every cluster series twice. Recreate, not a rolling "
        "update, for the same reason; a restart costs one relist (seconds)."
    ),
    "runAsNonRoot:": "Only the API is read: no host path, no capability, no root.",
    "limits:": (
        "What the watches hold is about 2 KiB per pod whatever its spec; the view is "
        "rebuilt every 15 s from them."
    ),
}
