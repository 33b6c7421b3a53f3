"""Alertmanager inhibit rules: one notification per root cause.

A lost GPU also raises its Xid 79, its workload's idle alert and the node's "not advertised";
an overheating GPU also throttles; an uncorrectable ECC error comes with Xid 48; a node that
needs a restart makes its GPUs' resets moot, and a GPU reset its applications' restarts (the
actions of NVIDIA's Xid catalog, one alert each); an exporter
that is down or blind makes every GPU alert of its node meaningless. Each pair below lets the
cause silence its consequences while the cause fires, matched on the labels that tie them to
the same GPU (`uuid` and the node), the same node, or the same workload — and the cluster when
there are several, so one cluster's fault never silences another's. When the cause resolves,
the consequences that still hold notify as usual; a consequence silenced while its cause fired
sends no misleading "resolved".

A rule can only silence alerts that carry its `equal` labels. The idle alert is one per
workload, with no node or GPU: a lost GPU reaches it through its holders' labels, so GPULost
fires once per workload holding the GPU (`Query.per_workload`, its `workload` named as the
idle alert names it) — every sharer of a time-sliced GPU is reached; the routing example pages
once per GPU. The whole idle alert of such a workload is silenced, its other idle GPUs
included: they are most likely idle because of the loss (a job's ranks wait on the lost one),
and the idle alert notifies once GPULost no longer names the workload. A down exporter does
not silence the idle alerts of its node's workloads (they resolve after `keep_firing_for`).
tests/unit/test_inhibitions.py holds every rule to the labels the alerts really carry.

`generate` writes them to alertmanager-inhibit-rules.yaml for the `inhibit_rules:` section of
an Alertmanager configuration (kube-prometheus keeps its own there too); the demo's
Alertmanager runs with them.
"""

from __future__ import annotations

from typing import Any

from kube_gpu_exporter.rules.alerts import GROUPS
from kube_gpu_exporter.rules.alerts.workloads import GPU_ALLOCATED_IDLE
from kube_gpu_exporter.rules.promql import Query
from kube_gpu_exporter.rules.settings.view import ConfigView

DEVICE_GROUPS = ("kube-gpu-exporter.workloads", "kube-gpu-exporter.devices")
NODE_CAPACITY = ("GPUNotAdvertised", "GPUPartiallyAdvertised")
# Node alerts that only a seeing exporter can raise, and that no GPU alert causes: GPUMissing's
# GPU has no series left for GPULost to fire on.
NODE_COUNTS = ("GPUMissing",)
BLIND_EXPORTER = ("KubeGpuExporterDown", "KubeGpuExporterNvmlDown", "KubeGpuExporterStale")
# One alert per workload, keyed by its namespace and `workload` (and `owner_kind` where the
# exporter watches pods), not by node or GPU.
WORKLOAD_ALERTS = (GPU_ALLOCATED_IDLE.name,)
# Xids that an uncorrectable ECC error raises by itself (double-bit error, containment), and
# the Xid alerts that carry them by default.
ECC_XIDS = "48|94|95"
XID_ALERTS = ("GPUXidApplicationErrors", "GPUXidErrors", "GPUXidWorkflow", "GPUXidInvestigate")
# What an action of NVIDIA's Xid catalog makes moot: a node restart resets every GPU of the
# node (and restarts its applications); a GPU reset restarts the GPU's applications.
REBOOT_MOOTS = XID_ALERTS
RESET_MOOTS = ("GPUXidApplicationErrors", "GPUXidInvestigate")


def _names(names: tuple[str, ...] | list[str]) -> str:
    return "|".join(names)


def inhibit_rules(cfg: ConfigView) -> list[dict[str, Any]]:
    """The `inhibit_rules` entries, in Alertmanager's matcher syntax (0.22 and later)."""
    q = Query(cfg)
    node = [*q.cluster, q.node_label]
    device = [*node, "uuid"]
    on_a_gpu = [
        s.name
        for g, specs in GROUPS
        if g in DEVICE_GROUPS
        for s in specs
        if s.name not in WORKLOAD_ALERTS
    ]
    consequences = [name for name in on_a_gpu if name != "GPULost"]
    return [
        {
            "source_matchers": ['alertname="GPULost"'],
            "target_matchers": [f'alertname=~"{_names(consequences)}"'],
            "equal": list(device),
        },
        {
            "source_matchers": ['alertname="GPULost"'],
            "target_matchers": [f'alertname=~"{_names(WORKLOAD_ALERTS)}"'],
            "equal": [*q.cluster, "namespace", "workload"],
        },
        {
            "source_matchers": ['alertname="GPULost"'],
            "target_matchers": [f'alertname=~"{_names(NODE_CAPACITY)}"'],
            "equal": list(node),
        },
        {
            "source_matchers": ['alertname="GPUTemperatureHigh"'],
            "target_matchers": ['alertname="GPUThermalThrottling"'],
            "equal": list(device),
        },
        {
            "source_matchers": ['alertname="GPUEccUncorrectable"'],
            "target_matchers": [f'alertname=~"{_names(XID_ALERTS)}"', f'xid=~"{ECC_XIDS}"'],
            "equal": list(device),
        },
        {
            "source_matchers": ['alertname="GPUXidRebootRequired"'],
            "target_matchers": [f'alertname=~"{_names(REBOOT_MOOTS)}"'],
            "equal": list(node),
        },
        {
            "source_matchers": ['alertname="GPUXidErrors"'],
            "target_matchers": [f'alertname=~"{_names(RESET_MOOTS)}"'],
            "equal": list(device),
        },
        {
            "source_matchers": [f'alertname=~"{_names(BLIND_EXPORTER)}"'],
            "target_matchers": [
                f'alertname=~"{_names([*on_a_gpu, *NODE_CAPACITY, *NODE_COUNTS])}"'
            ],
            "equal": list(node),
        },
    ]
