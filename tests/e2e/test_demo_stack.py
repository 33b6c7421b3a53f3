"""One `kube-gpu-exporter demo` run as a new user meets it: every address its banner prints
answers, the time-sliced GPU is split per pod, device alerts name the pod holding the GPU,
the cluster view shows why GPU pods wait, a second demo is refused with the port named, and
closing the terminal (SIGHUP) stops every part and frees every port. A second run loses a
part: the demo stops and keeps the logs.

The run uses free ports and a thresholds file that makes GPU 0 (71 °C from the start) hot
at once, so the holder shows on an alert within seconds instead of the story's 75.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kube_gpu_exporter.demo import ports
from support import exporter_command, free_port, http_get, wait_until

PARTS = ("exporter", "prometheus", "alertmanager", "cluster", "alerts")
THRESHOLDS = """
alerts:
  GPUTemperatureHigh: {threshold: 70, for: 0s}
  KubeGpuWorkloadPendingTooLong: {for: 0s}
"""
WAIT = 60.0  # a scrape, a rule evaluation and a notification round on a loaded CI machine
REPORT_AT = 100  # seconds into the story: by then the report finds a minute of data


@dataclass
class Demo:
    proc: subprocess.Popen[str]
    banner: str
    ports: dict[str, int]
    children: list[int]

    def url(self, part: str) -> str:
        return f"http://127.0.0.1:{self.ports[part]}"

    @property
    def workdir(self) -> Path:
        match = re.search(r"work folder\s+(\S+)", self.banner)
        assert match is not None, self.banner
        return Path(match[1])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def start_demo(*args: str) -> Demo:
    """The demo on free ports, once its banner is printed."""
    chosen = {part: free_port() for part in PARTS}
    flags = [f"--port.{part}={port}" for part, port in chosen.items()]
    proc = subprocess.Popen(
        exporter_command("demo", *args, *flags),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    banner = ""
    while "Ctrl-C stops everything" not in banner:
        line = proc.stdout.readline()
        if not line:
            proc.kill()
            pytest.fail(f"the demo ended early: {banner}")
        banner += line
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    return Demo(proc, banner, chosen, [int(pid) for pid in children])


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    folder = tmp_path_factory.mktemp("demo")
    thresholds = folder / "thresholds.yaml"
    thresholds.write_text(THRESHOLDS)
    report = folder / "weekly.html"
    running = start_demo(
        f"--thresholds={thresholds}", f"--report={report}", f"--report-at={REPORT_AT}"
    )
    yield running
    running.stop()


def test_every_address_the_banner_prints_answers(demo: Demo) -> None:
    addresses = re.findall(r"http://[^\s)]+", demo.banner)
    assert len(addresses) >= 5
    for address in addresses:
        # amtool's --alertmanager.url is a base URL, not a page: the built Alertmanager has no
        # web UI (npm builds it) and answers its API only; amtool is run on it below.
        tool = f"--alertmanager.url={address}" in demo.banner
        status, _, _ = http_get(f"{address}/-/ready" if tool else address)
        assert status == 200, address
    # Debian's Prometheus has only the classic UI, the built Prometheus 3 none (its API then);
    # the banner points at whichever answers, and says which Prometheus runs.
    assert re.search(rf":{demo.ports['prometheus']}/(classic/|api/v1/)?alerts\b", demo.banner)
    assert re.search(r"running\s+(Debian's )?Prometheus [23]\.", demo.banner), demo.banner
    assert "--workdir DIR" in demo.banner  # how to keep the work folder


def test_the_shared_gpu_is_split_per_pod(demo: Demo) -> None:
    metric = "nvidia_gpu_pod_utilization_ratio"

    def shares() -> dict[str, str] | None:
        body = http_get(f"{demo.url('exporter')}/metrics")[2].decode()
        series = rf'^{metric}{{[^}}]*gpu="4"[^}}]*pod="(chat-\d)"[^}}]*}} (\S+)$'
        found = re.findall(series, body, re.MULTILINE)
        return dict(found) or None

    found = wait_until(shares, WAIT, "the time-sliced GPU's per-pod split")
    assert {pod: float(v) for pod, v in found.items()} == {
        "chat-0": 0.4, "chat-1": 0.25, "chat-2": 0.06,
    }  # fmt: skip


def test_the_hot_gpus_alert_names_its_holder(demo: Demo) -> None:
    def hot() -> dict[str, str] | None:
        body = http_get(f"{demo.url('alertmanager')}/api/v2/alerts")[2]
        alerts = [a["labels"] for a in json.loads(body)]
        return next((a for a in alerts if a["alertname"] == "GPUTemperatureHigh"), None)

    labels = wait_until(hot, WAIT, "GPUTemperatureHigh in Alertmanager")
    assert (labels["gpu"], labels["namespace"], labels["pod"]) == ("0", "ml", "llm-pretrain-0")
    assert (labels["owner_kind"], labels["owner_name"]) == ("StatefulSet", "llm-pretrain")
    page = http_get(f"{demo.url('alerts')}/")[2].decode()
    assert "GPUTemperatureHigh" in page and "ml/llm-pretrain-0" in page
    amtool = re.search(r"amtool [^)]*", demo.banner)
    assert amtool is not None
    listed = subprocess.run(amtool[0].split(), capture_output=True, text=True, timeout=30)
    assert listed.returncode == 0 and "GPUTemperatureHigh" in listed.stdout


def test_the_cluster_view_says_why_gpu_pods_wait(demo: Demo) -> None:
    assert "will not schedule: fragmented" in demo.banner  # explain, in the banner

    def query(expr: str) -> dict[str, float]:
        url = f"{demo.url('prometheus')}/api/v1/query?query={urllib.parse.quote(expr)}"
        result = json.loads(http_get(url)[2])["data"]["result"]
        return {r["metric"].get("reason", ""): float(r["value"][1]) for r in result}

    pending = 'kube_gpu_pending_pods{job="kube-gpu-exporter-cluster"}'
    wait_until(lambda: len(query(pending)) == 2, WAIT, "the cluster view in Prometheus")
    assert query(pending) == {"fragmented": 1.0, "taint_not_tolerated": 1.0}
    assert query("kube_gpu_quota_used == kube_gpu_quota_hard") == {"": 4.0}
    # ml/llm-eval waits in Kueue's queue: suspended, no pod, only its Workload says so
    queued = 'kube_gpu_pending_workload_gpus{job="kube-gpu-exporter-cluster"}'
    wait_until(lambda: query(queued), WAIT, "the queued Job in Prometheus")
    assert query(queued) == {"Pending": 8.0}


def test_the_queued_job_pages_for_its_queue(demo: Demo) -> None:
    """ml/llm-eval has waited 70 minutes in Kueue's queue ml-cq (past the hour): the alert
    names the queue and Kueue's reason, its description the 8 GPUs waiting."""

    def queued() -> dict[str, Any] | None:
        body = http_get(f"{demo.url('alertmanager')}/api/v2/alerts")[2]
        alerts = json.loads(body)
        return next(
            (a for a in alerts if a["labels"]["alertname"] == "KubeGpuWorkloadPendingTooLong"),
            None,
        )

    alert = wait_until(queued, WAIT, "KubeGpuWorkloadPendingTooLong in Alertmanager")
    assert (alert["labels"]["cluster_queue"], alert["labels"]["reason"]) == ("ml-cq", "Pending")
    assert "8 GPUs wait in the queue" in alert["annotations"]["description"]


def test_the_story_ends_with_the_weekly_report(demo: Demo) -> None:
    """The demo runs `kube-gpu-exporter report` against its Prometheus once the story has been
    told (here after REPORT_AT seconds) and says where the page went."""
    report = Path(re.sub(r".*--report=(\S+).*", r"\1", " ".join(demo.proc.args)))
    assert demo.proc.stdout is not None
    said = ""
    while "the weekly report" not in said and "no report" not in said:
        said = demo.proc.stdout.readline()
        assert said, "the demo ended before writing its report"
    assert f"the weekly report, of the story's last 2 minutes: {report}" in said, said
    page = report.read_text()
    assert "GPU efficiency report" in page
    assert page.count("<svg") >= 3  # utilization, allocated and idle, pending pods
    assert "notebook-alice" in page  # the idle notebook among the worst idle workloads
    assert 'id="table-queues"' in page and "ml-cq" in page  # the queued Job's queue


def test_a_second_demo_names_the_port_in_use_and_starts_nothing(demo: Demo) -> None:
    flags = [f"--port.{part}={port}" for part, port in demo.ports.items()]
    second = subprocess.run(
        exporter_command("demo", *flags), capture_output=True, text=True, timeout=60
    )
    assert second.returncode == 2, second.stdout + second.stderr
    assert second.stdout == "" and len(second.stderr.strip().splitlines()) == 1
    port = demo.ports["exporter"]  # the first port checked; the first demo's exporter has it
    assert f"port {port} is in use by python" in second.stderr
    holder = re.search(r"\(pid (\d+)\)", second.stderr)
    assert holder is not None and int(holder[1]) in demo.children
    assert "--port.exporter=PORT" in second.stderr
    assert demo.proc.poll() is None  # the first runs on


def test_closing_the_terminal_stops_every_part_and_frees_every_port(demo: Demo) -> None:
    workdir = demo.workdir
    assert workdir.is_dir()
    assert len(demo.children) == 4  # Alertmanager, the cluster view, the exporter, Prometheus
    demo.proc.send_signal(signal.SIGHUP)
    output, _ = demo.proc.communicate(timeout=60)
    assert demo.proc.returncode == 0, output
    assert "Traceback" not in output
    # The demo waits for each part, so an exited part has no /proc entry left: one there runs.
    assert not any(Path(f"/proc/{pid}").exists() for pid in demo.children)
    assert not any(ports.in_use("127.0.0.1", port) for port in demo.ports.values())
    assert not workdir.exists()  # a temporary work folder goes when nothing failed


def test_a_part_that_dies_stops_the_demo_and_its_logs_are_kept() -> None:
    demo = start_demo()
    try:
        (alertmanager,) = [p for p in demo.children if "alertmanager" in _command(p)]
        os.kill(alertmanager, signal.SIGKILL)
        output, _ = demo.proc.communicate(timeout=60)
        assert demo.proc.returncode == 1, output
        log = demo.workdir / "alertmanager.log"
        assert f"alertmanager exited unexpectedly; its log: {log}" in output
        assert f"the logs are kept in {demo.workdir}" in output
        assert (demo.workdir / "exporter.log").stat().st_size > 0
        assert not any(Path(f"/proc/{pid}").exists() for pid in demo.children)
        assert not (demo.workdir / "kubelet.sock").exists()
        assert "Traceback" not in output
    finally:
        demo.stop()
        shutil.rmtree(demo.workdir, ignore_errors=True)


def _command(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_text().split("\0")[0]
