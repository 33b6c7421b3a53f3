"""The generated inhibit rules can reach what they claim to silence.

Alertmanager compares a rule's `equal` labels between a firing source and a target; a label
the target alert never carries makes the rule silence nothing (a missing label equals only a
missing label). The label sets here are the ones promtool proves the rules produce — each
alert's generated cases — so a rule is held to the alerts as Prometheus really raises them,
not to labels a test made up.
"""

from __future__ import annotations

import re
from collections import defaultdict

import pytest

from kube_gpu_exporter.rules.alerts import SPECS
from kube_gpu_exporter.rules.alerts.device_faults import (
    LOST_HOLDER,
    LOST_HOLDER_OWNER,
    LOST_REPLICAS,
    LOST_SHARERS,
)
from kube_gpu_exporter.rules.alerts.workloads import WORKLOAD
from kube_gpu_exporter.rules.config import Config, parse_config
from kube_gpu_exporter.rules.inhibitions import inhibit_rules
from kube_gpu_exporter.rules.promtool_cases import World
from kube_gpu_exporter.rules.settings.view import ConfigView

MULTI_CLUSTER = "labels: {cluster: k8s_cluster}"


def raised(cfg: ConfigView) -> dict[str, list[dict[str, str]]]:
    """Alert name → every label set its promtool cases expect it to fire with."""
    out: defaultdict[str, list[dict[str, str]]] = defaultdict(list)
    w = World(cfg)
    for spec in SPECS:
        for check in spec.case(w).checks:
            out[spec.name] += [dict(f.labels) for f in check.firing]
    return out


def names(matchers: list[str]) -> list[str]:
    (alertname,) = [m for m in matchers if m.startswith("alertname")]
    pattern = alertname.split("=", 1)[1].lstrip("~").strip('"')
    return [s.name for s in SPECS if re.fullmatch(pattern, s.name)]


@pytest.mark.parametrize("text", ["", MULTI_CLUSTER])
def test_every_rule_reaches_alerts_that_carry_its_equal_labels(text: str) -> None:
    cfg = parse_config(text) if text else Config()
    fired = raised(cfg)
    for rule in inhibit_rules(cfg):
        equal = set(rule["equal"])
        sources, targets = names(rule["source_matchers"]), names(rule["target_matchers"])
        assert sources and targets, rule
        for name in sources:  # a cause may fire without them (GPULost on a GPU nobody holds)
            assert any(equal <= a.keys() for a in fired[name]), f"{name} never fits {rule}"
        for name in targets:  # a consequence always carries them, or the rule misses it
            assert fired[name], f"{name} has no firing case to check {rule} against"
            for labels in fired[name]:
                missing = equal - labels.keys()
                assert not missing, f"{name} fires without {missing}: {rule} cannot reach it"


def test_a_lost_gpu_silences_its_holders_idle_workload_alert() -> None:
    """GPULost on a GPU one pod holds, and the idle alert of that pod's workload, as promtool
    proves them raised: some rule lets the first silence the second."""
    cfg = Config()
    fired = raised(cfg)
    (lost,) = [a for a in fired["GPULost"] if a.get("pod") == LOST_HOLDER["pod"]]
    owner = LOST_HOLDER_OWNER["owner_name"]
    idle = [a for a in fired["GPUAllocatedIdle"] if a.get("workload") == owner]
    assert idle
    assert any(
        "GPUAllocatedIdle" in names(rule["target_matchers"])
        and "GPULost" in names(rule["source_matchers"])
        and all(lost.get(k) == idle[0].get(k) for k in rule["equal"])
        for rule in inhibit_rules(cfg)
    )


@pytest.mark.parametrize("text", ["", MULTI_CLUSTER])
def test_a_lost_time_sliced_gpu_silences_every_sharers_idle_workload_alert(text: str) -> None:
    """GPULost on a GPU several pods share, as promtool proves it raised: once per sharing
    workload, so that the idle alert of each — the labels the idle rule aggregates by — is
    silenced by some rule, also where every sharer is a pod of one Deployment."""
    cfg = parse_config(text) if text else Config()
    lost = raised(cfg)["GPULost"]
    keys = (*World(cfg).scope, *WORKLOAD)
    for namespace, pod, owner in (*LOST_SHARERS, *LOST_REPLICAS):
        workload = owner.get("owner_name", pod)
        idle = {"namespace": namespace, "workload": workload} | {
            k: v for k, v in owner.items() if k == "owner_kind"
        }
        idle |= World(cfg).scope
        assert set(idle) <= set(keys)
        assert any(
            "GPUAllocatedIdle" in names(rule["target_matchers"])
            and "GPULost" in names(rule["source_matchers"])
            and all(a.get(k) == idle.get(k) for k in rule["equal"])
            for rule in inhibit_rules(cfg)
            for a in lost
        ), (namespace, pod)
