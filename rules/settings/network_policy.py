"""`deployment.network_policy`: which Prometheus may reach the exporters' ports.

Off unless a selector is given: a NetworkPolicy that guessed wrong would cut Prometheus off,
and only the operator knows where theirs runs. Read by exporter/generate/network_policy.py.
"""

from __future__ import annotations

import ipaddress

from pydantic import Field, field_validator

from kube_gpu_exporter.rules.settings.values import FrozenModel, LabelValue, QualifiedName


class NetworkPolicySettings(FrozenModel):
    """The Prometheus pods that scrape, by the labels of their namespace and of themselves
    (both must match when both are given), and the nodes' address ranges for the kubelet's
    probes where the network plugin does not already let a node reach its own pods."""

    # Field(): pydantic copies a mutable default for each instance, which ruff cannot see here.
    prometheus_namespace_labels: dict[QualifiedName, LabelValue] = Field(default={})
    prometheus_pod_labels: dict[QualifiedName, LabelValue] = Field(default={})
    node_cidrs: tuple[str, ...] = ()

    @property
    def enabled(self) -> bool:
        return bool(self.prometheus_namespace_labels or self.prometheus_pod_labels)

    @field_validator("node_cidrs")
    @classmethod
    def _cidrs(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for cidr in value:
            try:
                ipaddress.ip_network(cidr)
            except ValueError:
                raise ValueError(f"not an address range (CIDR): {cidr!r}") from None
        return value
