"""The demo's parts: the exporter, a pod-resources server, Prometheus and Alertmanager, and
for the whole demo a Kubernetes API server, the cluster view and a page of the alerts.

Prometheus and Alertmanager are the ones built from their Go modules (Prometheus 3) when
`make prom-bin` built them, else Debian's `prometheus` and `prometheus-alertmanager`
(monitoring.py), run as they would be on a monitoring host, with the rules `generate` makes
from a thresholds file.
The same stack without the cluster runs the end-to-end alert test, with a webhook receiver
in the test. Every port is checked before anything starts; each process writes its log
under the work folder (children.py); `stop()` ends every part it started.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kube_gpu_exporter.demo import ports
from kube_gpu_exporter.demo.alerts_page import AlertsPage
from kube_gpu_exporter.demo.children import Children, DemoError, answers
from kube_gpu_exporter.demo.cluster_story import (
    STORY_NODE,
    populate,
    record_refusal,
    write_procfs,
)
from kube_gpu_exporter.demo.kube_api import KubeApiServer
from kube_gpu_exporter.demo.kubelet_listing import allocatable, pod_resources
from kube_gpu_exporter.demo.monitoring import Monitoring
from kube_gpu_exporter.demo.monitoring import find as find_monitoring
from kube_gpu_exporter.demo.pod_resources_server import PodResourcesServer
from kube_gpu_exporter.demo.queue_story import KUEUE_VERSIONS, populate_queues
from kube_gpu_exporter.exporter.generate.outputs import RULES_FILE, render_outputs
from kube_gpu_exporter.exporter.simulated.scenario import Scenario
from kube_gpu_exporter.rules.config import Config
from kube_gpu_exporter.rules.inhibitions import inhibit_rules

__all__ = ["DemoError", "Ports", "Stack", "StackSpec"]

JOB = "kube-gpu-exporter"  # the job the generated rules select (selectors.exporter)
CLUSTER_JOB = "kube-gpu-exporter-cluster"  # as deploy/cluster.yaml's Service names it
EXPORTER = [sys.executable, "-m", "kube_gpu_exporter.exporter"]
CLUSTER_PARTS = ("cluster", "alerts")  # the ports only the whole demo listens on


@dataclass(frozen=True)
class Ports:
    exporter: int = 19400
    prometheus: int = 19090
    alertmanager: int = 19093
    cluster: int = 19401
    alerts: int = 19094


@dataclass(frozen=True)
class StackSpec:
    """What to run. `exporter_args` choose the exporter's backend (by default the scenario
    through `--simulate`); `exporter_env` is added to its environment. `cluster` adds the
    API server with the story's pods (the exporter watches them), the cluster view and the
    alerts page. `monitoring`: the Prometheus and Alertmanager to run (by default the built
    ones where present, else Debian's)."""

    scenario: Path
    thresholds: Config
    workdir: Path
    host: str = "127.0.0.1"
    ports: Ports = Ports()
    interval: str = "5s"  # scrape, rule evaluation and collection
    webhook_url: str | None = None
    exporter_args: Sequence[str] | None = None
    exporter_env: Mapping[str, str] = field(default_factory=dict)
    cluster: bool = False
    monitoring: Monitoring | None = None


class Stack:
    """Starts the parts in dependency order; a context manager that stops them all."""

    def __init__(self, spec: StackSpec) -> None:
        self.spec = spec
        self.kubelet = PodResourcesServer(spec.workdir / "kubelet.sock")
        self.children = Children(spec.workdir)
        self.api: KubeApiServer | None = None
        self.kubeconfig = spec.workdir / "kubeconfig"
        self.refusals = 0  # the quota's refusals told as FailedCreate events so far
        # Prometheus' alerts: its UI's page, the classic one (Debian's 2.x), or the API where
        # the binary carries no UI (Prometheus 3 built from its Go module)
        self.prometheus_alerts = "/alerts"
        self.monitoring = spec.monitoring
        self.story_started = time.monotonic()  # when the exporter started playing the story
        self._page: AlertsPage | None = None

    def url(self, part: str) -> str:
        return f"http://{self.spec.host}:{getattr(self.spec.ports, part)}"

    def start(self) -> None:
        monitoring = self.monitoring = self.spec.monitoring or find_monitoring()
        self._check_ports()
        spec = self.spec
        spec.workdir.mkdir(parents=True, exist_ok=True)
        scenario = Scenario.load(spec.scenario)
        self.kubelet.pods = pod_resources(scenario)
        self.kubelet.allocatable = allocatable(scenario)
        try:
            self.kubelet.start()
            self._start_alertmanager(monitoring.alertmanager)
            exporter_args: list[str] = []
            if spec.cluster:
                exporter_args = self._start_cluster(scenario)
            self._start_exporter(exporter_args)
            self._start_prometheus(monitoring.prometheus)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        self.children.stop()
        self.kubelet.stop()
        if self.api is not None:
            self.api.close()
            self.api = None
        if self._page is not None:
            self._page.close()
            self._page = None

    def __enter__(self) -> Stack:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def exited(self) -> str | None:
        """The name of a part that has exited, if one has."""
        return self.children.exited()

    def log(self, part: str) -> str:
        return self.children.log_path(part).read_text(errors="replace")

    def alerts(self) -> list[dict[str, Any]]:
        """Alertmanager's active alerts (its v2 API)."""
        url = f"{self.url('alertmanager')}/api/v2/alerts?active=true&silenced=false"
        with urllib.request.urlopen(url, timeout=5) as response:
            alerts: list[dict[str, Any]] = json.load(response)
        return alerts

    def record_refusal(self) -> bool:
        """The quota refuses the Job's pod once more (its controller retries); False where
        the demo runs no API server."""
        if self.api is None:
            return False
        self.refusals += 1
        record_refusal(self.api, self.refusals)
        return True

    # --- the parts -------------------------------------------------------------------------

    def _check_ports(self) -> None:
        """Every port free before anything starts, or one line naming the first one taken
        and, where /proc tells, what holds it."""
        for part, port in dataclasses.asdict(self.spec.ports).items():
            if part in CLUSTER_PARTS and not self.spec.cluster:
                continue
            if ports.in_use(self.spec.host, port):
                holder = ports.holder(port)
                by = f" by {holder}" if holder else ""
                raise DemoError(
                    f"port {port} is in use{by}: stop it, or give the demo another "
                    f"with --port.{part}=PORT"
                )

    def _start_cluster(self, scenario: Scenario) -> list[str]:
        """The API server with the story's cluster, the alerts page and the cluster view;
        returns the exporter's flags to watch the story node's pods."""
        spec = self.spec
        self.api = KubeApiServer(kueue_versions=KUEUE_VERSIONS).__enter__()
        populate(self.api, scenario)
        populate_queues(self.api)
        self.api.write_kubeconfig(self.kubeconfig)
        procfs = write_procfs(spec.workdir / "proc", scenario)
        self._page = AlertsPage(spec.host, spec.ports.alerts, self.url("alertmanager"))
        self.children.start(
            "cluster",
            [
                *EXPORTER,
                "cluster",
                f"--web.listen-address={spec.host}:{spec.ports.cluster}",
                f"--cluster.interval={spec.interval}",
                f"--kubernetes.kubeconfig={self.kubeconfig}",
            ],
            f"{self.url('cluster')}/healthz",
        )
        self.record_refusal()
        return [
            "--kubernetes.enabled",
            f"--kubernetes.kubeconfig={self.kubeconfig}",
            f"--kubernetes.node-name={STORY_NODE}",
            f"--path.procfs={procfs}",
        ]

    def _start_alertmanager(self, binary: str) -> None:
        spec = self.spec
        receiver: dict[str, Any] = {"name": "default"}
        if spec.webhook_url:
            receiver["webhook_configs"] = [{"url": spec.webhook_url, "send_resolved": True}]
        config = {
            "route": {
                "receiver": "default",
                "group_by": ["alertname", "namespace", "pod"],
                "group_wait": "1s",
                "group_interval": "5s",
                "repeat_interval": "1h",
            },
            "receivers": [receiver],
            # The generated inhibit rules: one notification per cause, as deployed.
            "inhibit_rules": inhibit_rules(spec.thresholds),
        }
        path = self._write("alertmanager.yml", yaml.safe_dump(config))
        self.children.start(
            "alertmanager",
            [
                binary,
                f"--config.file={path}",
                f"--storage.path={spec.workdir / 'alertmanager-data'}",
                f"--web.listen-address={spec.host}:{spec.ports.alertmanager}",
                "--cluster.listen-address=",  # one instance: no gossip port
            ],
            f"{self.url('alertmanager')}/-/ready",
        )

    def _start_exporter(self, kubernetes_args: list[str]) -> None:
        spec = self.spec
        backend = spec.exporter_args
        if backend is None:
            backend = ["--simulate", str(spec.scenario)]
        self.story_started = time.monotonic()
        self.children.start(
            "exporter",
            [
                *EXPORTER,
                "serve",
                f"--web.listen-address={spec.host}:{spec.ports.exporter}",
                f"--collector.interval={spec.interval}",
                f"--kubelet.pod-resources-socket={self.kubelet.socket_path}",
                f"--kubelet.interval={spec.interval}",
                *kubernetes_args,
                *backend,
            ],
            f"{self.url('exporter')}/healthz",
            env=spec.exporter_env,
        )

    def _start_prometheus(self, binary: str) -> None:
        spec = self.spec
        rules = self._write(RULES_FILE, render_outputs(spec.thresholds)[RULES_FILE])
        jobs = {JOB: spec.ports.exporter}
        if spec.cluster:
            jobs[CLUSTER_JOB] = spec.ports.cluster
        config = {
            "global": {"scrape_interval": spec.interval, "evaluation_interval": spec.interval},
            "scrape_configs": [
                {"job_name": job, "static_configs": [{"targets": [f"{spec.host}:{port}"]}]}
                for job, port in jobs.items()
            ],
            "rule_files": [str(rules)],
            "alerting": {
                "alertmanagers": [
                    {"static_configs": [{"targets": [f"{spec.host}:{spec.ports.alertmanager}"]}]}
                ]
            },
        }
        path = self._write("prometheus.yml", yaml.safe_dump(config))
        self.children.start(
            "prometheus",
            [
                binary,
                f"--config.file={path}",
                f"--storage.tsdb.path={spec.workdir / 'prometheus-data'}",
                f"--web.listen-address={spec.host}:{spec.ports.prometheus}",
            ],
            f"{self.url('prometheus')}/-/ready",
        )
        # Debian's Prometheus 2.x is built without the new UI: its alerts are on the classic
        # one. Prometheus 3 built from its module has no UI at all (npm builds it): the API.
        self.prometheus_alerts = next(
            (
                page
                for page in ("/alerts", "/classic/alerts")
                if answers(f"{self.url('prometheus')}{page}")
            ),
            "/api/v1/alerts",
        )

    def _write(self, name: str, text: str) -> Path:
        path = self.spec.workdir / name
        path.write_text(text)
        return path
