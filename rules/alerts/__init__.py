"""Every alert, as specs grouped as they are deployed, in render order.

One file per area keeps each alert's settings, rule, promtool cases and runbook together
(kubernetes-mixin's alerts/<area>); an area too long for one file continues in a second. The
rule groups, the `alerts:` section of the thresholds file, the promtool file and
docs/runbooks.md all read the list below, so adding an alert is adding its spec to its area's
SPECS (`generate` writes it into the README's alert list too).
"""

from __future__ import annotations

from typing import Any

from kube_gpu_exporter.rules.alerts import (
    cluster_view,
    device_clocks,
    device_faults,
    device_health,
    device_links,
    device_xids,
    exporter,
    exporter_allocatable,
    memory_leaks,
    node_devices,
    nodes,
    queue_flavors,
    queue_quota,
    queues,
    scheduling,
    scheduling_disruptions,
    workload_memory,
    workload_xids,
    workloads,
)
from kube_gpu_exporter.rules.model import AlertRule, RuleGroup
from kube_gpu_exporter.rules.promql import Query
from kube_gpu_exporter.rules.settings.view import ConfigView
from kube_gpu_exporter.rules.spec import AlertSpec

# (deployed rule group, its alerts in order)
GROUPS: tuple[tuple[str, tuple[AlertSpec[Any], ...]], ...] = (
    (
        "kube-gpu-exporter.workloads",
        (
            *workloads.SPECS,
            *workload_memory.SPECS,
            *memory_leaks.SPECS,
            *workload_xids.SPECS,
        ),
    ),
    (
        "kube-gpu-exporter.devices",
        (
            *device_clocks.SPECS,
            *device_faults.SPECS,
            *device_xids.SPECS,
            *device_health.SPECS,
            *device_links.SPECS,
        ),
    ),
    ("kube-gpu-exporter.nodes", (*nodes.SPECS, *node_devices.SPECS)),
    (
        "kube-gpu-exporter.scheduling",
        (
            *scheduling.SPECS,
            *scheduling_disruptions.SPECS,
            *queues.SPECS,
            *queue_flavors.SPECS,
            *queue_quota.SPECS,
        ),
    ),
    (
        "kube-gpu-exporter.exporter",
        (*exporter.SPECS, *exporter_allocatable.SPECS, *cluster_view.SPECS),
    ),
)

SPECS: tuple[AlertSpec[Any], ...] = tuple(spec for _, specs in GROUPS for spec in specs)
BY_NAME: dict[str, AlertSpec[Any]] = {spec.name: spec for spec in SPECS}
GROUP_OF: dict[str, str] = {spec.name: group for group, specs in GROUPS for spec in specs}


def all_alerts(cfg: ConfigView) -> tuple[AlertRule, ...]:
    """Every alert the project defines, enabled or not (for runbooks and lint tests)."""
    q = Query(cfg)
    return tuple(spec.alert(q) for spec in SPECS)


def alert_groups(cfg: ConfigView) -> tuple[RuleGroup, ...]:
    """The enabled alerts, in their deployment groups; a group left empty is dropped."""
    q = Query(cfg)
    groups = []
    for name, specs in GROUPS:
        rules = tuple(spec.alert(q) for spec in specs if spec.of(cfg).enabled)
        if rules:
            groups.append(RuleGroup(name, rules))
    return tuple(groups)
