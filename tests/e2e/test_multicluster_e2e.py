"""Multi-cluster for real: two cluster Prometheus, each scraping a real exporter (simulated
backend) and a kube-state-metrics stand-in under `external_labels: {cluster: …}`, and a global
Prometheus that federates both and evaluates the rules generated with `labels.cluster`.

What the `cluster` label must buy is proved on Debian's Prometheus rather than on promtool
inputs that already carry the label: the federated series arrive with it (from the external
labels, with the exporters' own job and instance kept by `honor_labels`); recording rules
aggregate per cluster; an alert fires with the cluster of the series that crossed its threshold
and says so in its description; and KubeGpuExporterAbsent fires for the cluster that lost every
exporter target (file_sd emptied, as when a DaemonSet's pods are gone) while GPU nodes remain,
not for the cluster that keeps its exporter.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from kube_gpu_exporter.rules.alerts import alert_groups
from kube_gpu_exporter.rules.config import Config, parse_config
from kube_gpu_exporter.rules.promql import KSM_NODE_ALLOCATABLE
from kube_gpu_exporter.rules.recording import recording_groups
from kube_gpu_exporter.rules.render import rules_file
from prometheus_server import (
    Generation,
    Prometheus,
    federate,
    file_targets,
    run_prometheus,
    write_targets,
)
from support import run_exporter, serve_exposition, wait_until

# The rules as a multi-cluster user generates them, the two alerts under test without `for`.
THRESHOLDS = """
labels: {cluster: cluster}
alerts:
  GPUTemperatureHigh: {threshold: 85, for: 0s}
  KubeGpuExporterAbsent: {for: 0s}
"""
HOT, COOL, WEST = (f"GPU-{n:08x}-0000-4000-8000-{n:012x}" for n in (0xE0, 0xE1, 0x70))
SCENARIOS = {
    "east": f"""
devices:
  - {{uuid: {HOT}, readings: {{temperature_celsius: 91, utilization: 0.9}}}}
  - {{uuid: {COOL}, readings: {{temperature_celsius: 52, utilization: 0.2}}}}
""",
    "west": f"""
devices:
  - {{uuid: {WEST}, readings: {{temperature_celsius: 60, utilization: 0.5}}}}
""",
}
# What kube-state-metrics says of each cluster: one GPU node (and its CPUs, which do not count).
KUBE_STATE_METRICS = (
    f'{KSM_NODE_ALLOCATABLE}{{node="gpu-node-1",resource="nvidia_com_gpu",unit="integer"}} 8\n'
    f'{KSM_NODE_ALLOCATABLE}{{node="gpu-node-1",resource="cpu",unit="core"}} 64\n'
)
EXPORTER_JOB = "kube-gpu-exporter"
# Federated series keep their source's timestamps, so a vanished one gets no staleness marker
# in the global Prometheus: it ends when the lookback does (5m by default, 5s here).
LOOKBACK = "5s"
WAIT = 30.0


def _rules(cfg: Config, path: Path) -> Path:
    """The rules file `generate` writes for `cfg` (recording rules and alerts)."""
    path.write_text(rules_file(cfg, (*recording_groups(cfg), *alert_groups(cfg))))
    return path


@pytest.fixture(scope="module")
def clusters(
    tmp_path_factory: pytest.TempPathFactory, generation: Generation
) -> Iterator[tuple[Prometheus, Path]]:
    """The global Prometheus, and the file_sd file that holds west's exporter target."""
    tmp = tmp_path_factory.mktemp("multicluster")
    rules = _rules(parse_config(THRESHOLDS), tmp / "rules.yaml")
    with ExitStack() as stack:
        servers, discovered = [], {}
        for name, scenario in SCENARIOS.items():
            (tmp / f"{name}.yaml").write_text(scenario)
            args = ["--simulate", str(tmp / f"{name}.yaml"), "--collector.interval=1s"]
            exporter = stack.enter_context(run_exporter(args, tmp))
            ksm = stack.enter_context(serve_exposition(KUBE_STATE_METRICS))
            # Exporter targets come from a file, as from service discovery: the test can take
            # a cluster's away.
            discovered[name] = tmp / f"{name}-exporters.json"
            exporters = file_targets(EXPORTER_JOB, discovered[name], [f"127.0.0.1:{exporter.port}"])
            prom = run_prometheus(
                tmp,
                [ksm],
                job="kube-state-metrics",
                external_labels={"cluster": name},
                scrape_configs=[exporters],
                generation=generation,
            )
            servers.append(stack.enter_context(prom))
        # Both exporters are up before the global starts: KubeGpuExporterAbsent must not fire
        # at all until west loses its target (file_sd applies changes every 5 s).
        for server in servers:
            server.wait_for(f'up{{job="{EXPORTER_JOB}"}} == 1', timeout=WAIT)
        match = [f'{{job="{EXPORTER_JOB}"}}', '{job="kube-state-metrics"}']
        global_ = run_prometheus(
            tmp,
            [],
            rule_files=[rules],
            scrape_configs=[federate("federate", servers, match)],
            lookback_delta=LOOKBACK,
            generation=generation,
        )
        yield stack.enter_context(global_), discovered["west"]


def _alerts(prom: Prometheus, name: str) -> list[dict[str, Any]]:
    return [
        a
        for a in prom.api("alerts")["alerts"]
        if a["labels"]["alertname"] == name and a["state"] == "firing"
    ]


def _by_cluster(prom: Prometheus, expr: str) -> dict[str, float]:
    return {r["metric"].get("cluster", ""): r["value"] for r in prom.query(expr)}


def test_recording_rules_alerts_and_absence_are_per_cluster(
    clusters: tuple[Prometheus, Path],
) -> None:
    prom, west_targets = clusters
    # Federated series carry their cluster and keep the exporter's own job and instance.
    up = prom.wait_for(f'up{{job="{EXPORTER_JOB}"}} == 1', count=2, timeout=WAIT)
    assert sorted(r["metric"]["cluster"] for r in up) == ["east", "west"]
    assert all(r["metric"]["instance"].startswith("127.0.0.1:") for r in up)

    # Recording rules aggregate per cluster: east has two GPUs, west one.
    wait_until(
        lambda: _by_cluster(prom, "cluster:nvidia_gpu_gpus:count") == {"east": 2, "west": 1},
        WAIT,
        "cluster:nvidia_gpu_gpus:count per cluster",
    )
    wait_until(
        lambda: (
            _by_cluster(prom, "cluster:nvidia_gpu_utilization_ratio:avg")
            == pytest.approx({"east": 0.55, "west": 0.5})
        ),
        WAIT,
        "cluster:nvidia_gpu_utilization_ratio:avg per cluster",
    )

    # East's hot GPU alone crosses 85 °C: the alert carries east, and says so.
    hot = wait_until(lambda: _alerts(prom, "GPUTemperatureHigh"), WAIT, "GPUTemperatureHigh")
    assert [(a["labels"]["cluster"], a["labels"]["uuid"]) for a in hot] == [("east", HOT)]
    assert " in cluster east" in hot[0]["annotations"]["description"]
    assert "91" in hot[0]["annotations"]["description"]

    # Every cluster has its exporter: nothing is absent, once the rules have read both
    # (KubeGpuExporterAbsent's group runs on its own timer, not GPUTemperatureHigh's).
    prom.evaluated_rules(WAIT, since=time.time())
    assert _alerts(prom, "KubeGpuExporterAbsent") == []

    # West loses every exporter target while kube-state-metrics still shows its GPU node.
    write_targets(west_targets, [])
    absent = wait_until(
        lambda: _alerts(prom, "KubeGpuExporterAbsent"), WAIT, "KubeGpuExporterAbsent for west"
    )
    assert [a["labels"]["cluster"] for a in absent] == ["west"]
    assert float(absent[0]["value"]) == 1  # west's one GPU node
    assert " in cluster west" in absent[0]["annotations"]["description"]
    assert _by_cluster(prom, f'count by (cluster) (up{{job="{EXPORTER_JOB}"}})') == {"east": 1}
    # East kept its exporter and its alert.
    assert [a["labels"]["cluster"] for a in _alerts(prom, "GPUTemperatureHigh")] == ["east"]


def test_every_rule_evaluates_on_federated_series(clusters: tuple[Prometheus, Path]) -> None:
    """The multi-cluster rules on real federated input: no rule errors (say, a join that
    turns many-to-many once series carry a cluster label)."""
    prom, _ = clusters
    rules = prom.evaluated_rules(WAIT)
    broken = [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"]
    assert not broken, broken
