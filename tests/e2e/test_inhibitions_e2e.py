"""The generated inhibit rules on a real Alertmanager of both generations (Debian's 0.25, the
current one built), routed as docs/examples/alertmanager-routing.yaml: one notification per cause.

Alerts are posted to Alertmanager's API as Prometheus would send them; the webhook receiver
records what reaches people. A lost GPU with its Xid 79, its holder's idle workload alert and
its node's missing device must notify once; an overheating GPU's throttling, an ECC error's
Xid 48 and a down exporter's GPU alerts stay silent; the same kind of alert on another GPU,
node or workload still comes. The lost GPU and the idle workload carry exactly the labels
their promtool cases prove the generated rules give them — the idle alert is one per
workload, with no node or GPU label to match on.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kube_gpu_exporter.rules.alerts import SPECS
from kube_gpu_exporter.rules.alerts.device_faults import LOST_HOLDER
from kube_gpu_exporter.rules.config import Config
from kube_gpu_exporter.rules.inhibitions import inhibit_rules
from kube_gpu_exporter.rules.promtool_cases import World
from prometheus_server import Generation, ready
from support import free_port, wait_until
from webhook_receiver import Webhook

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "alertmanager-routing.yaml"
DEVICE = {"job": "kube-gpu-exporter", "gpu": "0"}


def alert(name: str, **labels: str) -> dict[str, Any]:
    return raised(name, {**DEVICE, **labels})


def raised(name: str, labels: dict[str, str]) -> dict[str, Any]:
    now = datetime.datetime.now(datetime.UTC).isoformat()
    return {"labels": {"alertname": name, **labels}, "startsAt": now}


def proven(name: str, **match: str) -> dict[str, str]:
    """The labels alert `name` fires with in its promtool case, where they include `match`."""
    w = World(Config())
    (spec,) = [s for s in SPECS if s.name == name]
    found = [
        dict(f.labels)
        for check in spec.case(w).checks
        for f in check.firing
        if match.items() <= dict(f.labels).items()
    ]
    assert found, (name, match)
    return found[0]


# GPU X on node n1 is lost while one pod holds it; its workload's idle alert (one per
# workload: no node, no GPU) is a consequence, another workload's is not.
LOST = proven("GPULost", pod=LOST_HOLDER["pod"])
IDLE_HOLDER = proven("GPUAllocatedIdle", workload=LOST["workload"])
IDLE_OTHER = proven("GPUAllocatedIdle", workload="notebook-0")

POSTED = [
    # GPU X on node n1 is lost: everything else about it and its node is a consequence.
    raised("GPULost", LOST | {"instance": "n1", "uuid": "X"}),
    alert("GPUXidErrors", instance="n1", uuid="X", xid="79"),
    raised("GPUAllocatedIdle", IDLE_HOLDER),
    raised("GPUAllocatedIdle", IDLE_OTHER),
    alert("GPUPartiallyAdvertised", instance="n1"),
    # GPU Y on n1 overheats and therefore throttles.
    alert("GPUTemperatureHigh", instance="n1", uuid="Y"),
    alert("GPUThermalThrottling", instance="n1", uuid="Y"),
    # GPU Z on n2: an uncorrectable ECC error and its Xid 48; GPU W on n2: an unrelated Xid 79.
    alert("GPUEccUncorrectable", instance="n2", uuid="Z"),
    alert("GPUXidErrors", instance="n2", uuid="Z", xid="48"),
    alert("GPUXidErrors", instance="n2", uuid="W", xid="79"),
    # n3's exporter is down: its last GPU alerts say nothing.
    alert("KubeGpuExporterDown", instance="n3"),
    alert("GPUThermalThrottling", instance="n3", uuid="V"),
    alert("GPUMissing", instance="n3"),
    # n4 lost a GPU from NVML's list: nothing silences that.
    alert("GPUMissing", instance="n4"),
]
EXPECTED = {
    ("GPULost", "X"),
    ("GPUTemperatureHigh", "Y"),
    ("GPUEccUncorrectable", "Z"),
    ("GPUXidErrors", "W"),
    ("KubeGpuExporterDown", "n3"),
    ("GPUMissing", "n4"),
    ("GPUAllocatedIdle", IDLE_OTHER["workload"]),
}


@pytest.fixture
def alertmanager(tmp_path: Path, generation: Generation) -> Iterator[tuple[str, Webhook]]:
    """Alertmanager of `generation` on the routing example (docs/examples) and the generated
    inhibit rules, every receiver posting to the test's webhook."""
    hook = Webhook()
    port = free_port()
    example = yaml.safe_load(EXAMPLE.read_text())
    config = hook.receiving({**example, "inhibit_rules": inhibit_rules(Config())})
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config))
    proc = subprocess.Popen(
        [
            generation.alertmanager,
            f"--config.file={path}",
            f"--storage.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: ready(url), 30, "Alertmanager to be ready")
        yield url, hook
    finally:
        proc.terminate()
        proc.wait(10)
        hook.close()


def delivered(hook: Webhook) -> set[tuple[str, str]]:
    alerts = [a for n in list(hook.notifications) for a in n["alerts"]]
    return {_key(a) for a in alerts if a["status"] == "firing"}


def _key(alert: dict[str, Any]) -> tuple[str, str]:
    """(alertname, the GPU's uuid); a node alert, which has no uuid, by its node; a workload
    alert, which has neither, by its workload."""
    labels = alert["labels"]
    return labels["alertname"], labels.get("uuid") or labels.get("instance") or labels["workload"]


def _post(url: str, alerts: list[dict[str, Any]]) -> None:
    request = urllib.request.Request(
        f"{url}/api/v2/alerts",
        data=json.dumps(alerts).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 200


def _active(url: str) -> set[str]:
    with urllib.request.urlopen(f"{url}/api/v2/alerts", timeout=5) as response:
        return {a["labels"]["alertname"] for a in json.load(response)}


def test_one_notification_per_cause(alertmanager: tuple[str, Webhook]) -> None:
    """The causes first, as Prometheus usually sends them (a consequence's `for` runs later):
    Alertmanager's inhibitor learns alerts asynchronously, so a consequence posted in the same
    instant as its cause can slip through once on a loaded machine — a race of Alertmanager's,
    not of the rules under test."""
    url, hook = alertmanager
    first = [a for a in POSTED if _key(a) in EXPECTED]
    _post(url, first)
    causes = {name for name, _uuid in EXPECTED}
    wait_until(lambda: _active(url) >= causes, 10, "Alertmanager to hold the causes")
    time.sleep(1)
    _post(url, [a for a in POSTED if a not in first])
    wait_until(lambda: delivered(hook) >= EXPECTED, 30, "the causes' notifications")
    time.sleep(3)  # three group intervals: anything not inhibited would have been sent
    assert delivered(hook) == EXPECTED
