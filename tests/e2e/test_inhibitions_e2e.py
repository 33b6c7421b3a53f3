"""The generated inhibit rules on a real Alertmanager of both generations (Debian's 0.25, the
current one built), routed as docs/examples/alertmanager-routing.yaml: one notification per cause.

Alerts are posted to Alertmanager's API as Prometheus would send them; the webhook receiver
records what reaches people. A lost GPU with its Xid 79, its holder's idle workload alert and
its node's missing device must notify once; so must a lost time-sliced GPU, whose GPULost
fires once per sharing workload, with every sharer's idle alert; an overheating GPU's
throttling, an ECC error's Xids 48 and 94, the resets a node's restart makes moot, the
application Xids a GPU's reset makes moot and a down exporter's GPU alerts stay silent; the
same kind of alert on another GPU, node or workload still comes. The lost GPUs and the idle
workloads carry exactly the labels their promtool cases prove the generated rules give them —
the idle alert is one per workload, with no node or GPU label to match on.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kube_gpu_exporter.rules.alerts import BY_NAME, SPECS
from kube_gpu_exporter.rules.alerts.device_faults import LOST_HOLDER, LOST_REPLICAS, LOST_SHARERS
from kube_gpu_exporter.rules.alerts.workloads import WORKLOAD
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
    """Alert `name` with `labels` and its default severity, as the generated rule raises it
    (the routing example routes on severity)."""
    now = datetime.datetime.now(datetime.UTC).isoformat()
    severity = BY_NAME[name].defaults.severity
    return {"labels": {"alertname": name, "severity": severity, **labels}, "startsAt": now}


def proven_all(name: str, **match: str) -> list[dict[str, str]]:
    """The label sets alert `name` fires with in its promtool case that include `match`."""
    w = World(Config())
    (spec,) = [s for s in SPECS if s.name == name]
    found = [
        dict(f.labels)
        for check in spec.case(w).checks
        for f in check.firing
        if match.items() <= dict(f.labels).items()
    ]
    assert found, (name, match)
    return [dict(t) for t in dict.fromkeys(tuple(sorted(f.items())) for f in found)]


def proven(name: str, **match: str) -> dict[str, str]:
    """The first label set alert `name` fires with in its promtool case, including `match`."""
    return proven_all(name, **match)[0]


def idle_of(lost: dict[str, str]) -> dict[str, str]:
    """The idle alert of the workload a GPULost names: the labels the idle rule aggregates
    by (its promtool case proves that shape for the workloads it holds)."""
    keys = (*World(Config()).scope, *WORKLOAD)
    return {k: lost[k] for k in keys if k in lost}


# GPU X on node n1 is lost while one pod holds it; its workload's idle alert (one per
# workload: no node, no GPU) is a consequence, another workload's is not.
LOST = proven("GPULost", pod=LOST_HOLDER["pod"])
IDLE_HOLDER = proven("GPUAllocatedIdle", workload=LOST["workload"])
IDLE_OTHER = proven("GPUAllocatedIdle", workload="notebook-0")
# Two lost time-sliced GPUs: one shared by a Deployment's two pods, a bare pod and a Job's
# pod (three GPULost alerts), one by four pods of one Deployment (one GPULost).
SHARED = proven_all("GPULost", namespace=LOST_SHARERS[0][0]) + proven_all(
    "GPULost", namespace=LOST_SHARERS[3][0]
)
REPLICAS = proven_all("GPULost", namespace=LOST_REPLICAS[0][0])
SHARED_GPUS = {a["uuid"] for a in SHARED + REPLICAS}
SHARER_IDLE = [idle_of(a) for a in SHARED + REPLICAS]

POSTED = [
    # GPU X on node n1 is lost: everything else about it and its node is a consequence.
    raised("GPULost", LOST | {"instance": "n1", "uuid": "X"}),
    alert("GPUXidRebootRequired", instance="n1", uuid="X", xid="79"),
    raised("GPUAllocatedIdle", IDLE_HOLDER),
    raised("GPUAllocatedIdle", IDLE_OTHER),
    alert("GPUPartiallyAdvertised", instance="n1"),
    # The time-sliced GPUs: one GPULost per sharing workload, and every sharer's idle alert.
    *(raised("GPULost", labels) for labels in SHARED + REPLICAS),
    *(raised("GPUAllocatedIdle", labels) for labels in SHARER_IDLE),
    # GPU Y on n1 overheats and therefore throttles.
    alert("GPUTemperatureHigh", instance="n1", uuid="Y"),
    alert("GPUThermalThrottling", instance="n1", uuid="Y"),
    # GPU Z on n2: an uncorrectable ECC error and its Xids 48 and 94; GPU W on n2: an
    # unrelated Xid 109 (reset the GPU), which makes W's application Xid moot, not S's.
    alert("GPUEccUncorrectable", instance="n2", uuid="Z"),
    alert("GPUXidWorkflow", instance="n2", uuid="Z", xid="48"),
    alert("GPUXidApplicationErrors", instance="n2", uuid="Z", xid="94"),
    alert("GPUXidErrors", instance="n2", uuid="W", xid="109"),
    alert("GPUXidApplicationErrors", instance="n2", uuid="W", xid="13"),
    alert("GPUXidApplicationErrors", instance="n2", uuid="S", xid="13"),
    # n5 needs a restart (Xid 79 on U): the reset T asks for is moot; n2's is not.
    alert("GPUXidRebootRequired", instance="n5", uuid="U", xid="79"),
    alert("GPUXidErrors", instance="n5", uuid="T", xid="109"),
    alert("GPUXidInvestigate", instance="n5", uuid="T", xid="92"),
    # n3's exporter is down: its last GPU alerts say nothing.
    alert("KubeGpuExporterDown", instance="n3"),
    alert("GPUThermalThrottling", instance="n3", uuid="V"),
    alert("GPUMissing", instance="n3"),
    # n4 lost a GPU from NVML's list: nothing silences that.
    alert("GPUMissing", instance="n4"),
]
EXPECTED = {
    ("GPULost", "X"),
    *(("GPULost", uuid) for uuid in SHARED_GPUS),
    ("GPUTemperatureHigh", "Y"),
    ("GPUEccUncorrectable", "Z"),
    ("GPUXidErrors", "W"),
    ("GPUXidApplicationErrors", "S"),
    ("GPUXidRebootRequired", "U"),
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
    # One notification per lost GPU, however many workloads shared it (the pager routes group
    # by GPU).
    lost = [
        {a["labels"]["uuid"] for a in n["alerts"] if a["labels"]["alertname"] == "GPULost"}
        for n in list(hook.notifications)
    ]
    per_gpu = Counter(uuid for gpus in lost for uuid in gpus)
    assert per_gpu == dict.fromkeys(per_gpu, 1), per_gpu
    assert set(per_gpu) == {"X", *SHARED_GPUS}


def test_a_workload_with_a_lost_gpu_notifies_its_idle_gpus_once_the_loss_resolves(
    alertmanager: tuple[str, Webhook],
) -> None:
    """The idle alert is one per workload: while GPULost names the workload, all of it is
    silenced, its other idle GPUs included (a job's other ranks wait on the lost one). Silenced,
    not lost: once the loss resolves, the idle alert that still fires is sent."""
    url, hook = alertmanager
    lost = raised("GPULost", LOST | {"instance": "n1", "uuid": "X"})
    _post(url, [lost])
    wait_until(lambda: ("GPULost", "X") in delivered(hook), 30, "GPULost's notification")
    idle = raised("GPUAllocatedIdle", IDLE_HOLDER)
    _post(url, [idle])
    wait_until(lambda: _inhibited(url, IDLE_HOLDER), 30, "the idle alert to be inhibited")
    assert ("GPUAllocatedIdle", IDLE_HOLDER["workload"]) not in delivered(hook)
    now = datetime.datetime.now(datetime.UTC).isoformat()
    _post(url, [{**lost, "endsAt": now}])
    wait_until(
        lambda: ("GPUAllocatedIdle", IDLE_HOLDER["workload"]) in delivered(hook),
        30,
        "the idle alert's notification once the loss resolved",
    )


def _inhibited(url: str, labels: dict[str, str]) -> bool:
    """Whether Alertmanager holds the alert with exactly `labels` as inhibited."""
    with urllib.request.urlopen(f"{url}/api/v2/alerts", timeout=5) as response:
        alerts = json.load(response)
    return any(
        {k: v for k, v in a["labels"].items() if k not in ("alertname", "severity")} == labels
        and a["status"]["inhibitedBy"]
        for a in alerts
    )
