"""deploy/network-policy.yaml and cluster-network-policy.yaml: only the Prometheus that scrapes
(and the kubelet's probes) reach the exporters' ports, when the thresholds file says which
Prometheus that is.

Defence in depth beside the server's own per-address shares (httpd/client_shares.py): an
attacker the network never lets through can hold nothing at all. One NetworkPolicy per
workload (the node exporters' DaemonSet, the cluster view's Deployment), each admitting, on its
port only, pods matching `deployment.network_policy`'s namespace and pod labels, and the node
ranges it lists. Written only when a selector is given (`NetworkPolicySettings.enabled`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from kube_gpu_exporter.exporter.generate.cluster_deployment import (
    CLUSTER_LABELS,
    CLUSTER_NAME,
    CLUSTER_PORT,
)
from kube_gpu_exporter.exporter.generate.daemonset import NAME, PORT, SELECTOR_LABELS
from kube_gpu_exporter.rules.config import Config

NETWORK_POLICY: Final = "network-policy.yaml"
CLUSTER_NETWORK_POLICY: Final = "cluster-network-policy.yaml"


def network_policy_dicts(cfg: Config) -> dict[str, dict[str, Any]]:
    """The NetworkPolicies by file name; none when no Prometheus selector is configured."""
    if not cfg.deployment.network_policy.enabled:
        return {}
    return {
        NETWORK_POLICY: _policy(cfg, NAME, SELECTOR_LABELS, PORT),
        CLUSTER_NETWORK_POLICY: _policy(cfg, CLUSTER_NAME, CLUSTER_LABELS, CLUSTER_PORT),
    }


def _policy(cfg: Config, name: str, labels: Mapping[str, str], port: int) -> dict[str, Any]:
    settings = cfg.deployment.network_policy
    prometheus: dict[str, Any] = {}
    if settings.prometheus_namespace_labels:
        namespaces = dict(sorted(settings.prometheus_namespace_labels.items()))
        prometheus["namespaceSelector"] = {"matchLabels": namespaces}
    if settings.prometheus_pod_labels:
        pods = dict(sorted(settings.prometheus_pod_labels.items()))
        prometheus["podSelector"] = {"matchLabels": pods}
    sources: list[dict[str, Any]] = [prometheus]
    sources += [{"ipBlock": {"cidr": cidr}} for cidr in settings.node_cidrs]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": name,
            "namespace": cfg.deployment.namespace,
            "labels": dict(labels),
        },
        "spec": {
            "podSelector": {"matchLabels": dict(labels)},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": sources, "ports": [{"protocol": "TCP", "port": port}]}],
        },
    }


def network_policy_notes(cfg: Config) -> dict[str, str]:
    """The generated file's comments, by the line each goes above."""
    first = (
        "- namespaceSelector:"
        if cfg.deployment.network_policy.prometheus_namespace_labels
        else "- podSelector:"
    )
    return {
        "policyTypes:": (
            "Ingress only: what the exporter itself reaches (the API server, the kubelet's "
            "socket) is left alone. Nothing but the sources below reaches these pods once this "
            "applies."
        ),
        first: (
            "The Prometheus that scrapes (deployment.network_policy in the thresholds file); a "
            "namespace and a pod selector in one entry must both match."
        ),
        "ports:": (
            "The kubelet's liveness and readiness probes come from the node itself, which "
            "Kubernetes always lets reach the pods on it; node_cidrs admits node ranges "
            "explicitly for network plugins that do not. A NetworkPolicy does not apply to "
            "hostNetwork pods on most plugins."
        ),
    }
