"""The demo's processes: the exporter, a pod-resources server, Prometheus and Alertmanager.

Prometheus and Alertmanager are Debian's `prometheus` and `prometheus-alertmanager`, run as
they would be on a monitoring host, with the rules `generate` makes from a thresholds file.
The same stack runs the end-to-end alert test, with a webhook receiver in the test.
Each process writes its log under the work folder; `stop()` ends every one it started.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kube_gpu_exporter.demo.kubelet_listing import allocatable, pod_resources
from kube_gpu_exporter.demo.pod_resources_server import PodResourcesServer
from kube_gpu_exporter.exporter.generate.outputs import RULES_FILE, render_outputs
from kube_gpu_exporter.exporter.input_errors import InputError
from kube_gpu_exporter.exporter.simulated.scenario import Scenario
from kube_gpu_exporter.rules.config import Config
from kube_gpu_exporter.rules.inhibitions import inhibit_rules

JOB = "kube-gpu-exporter"  # the job the generated rules select (selectors.exporter)
START_SECONDS = 60.0
STOP_SECONDS = 10.0


class DemoError(InputError):
    """The stack cannot run here (a binary missing, a port taken); one line, exit 2."""


@dataclass(frozen=True)
class Ports:
    exporter: int = 19400
    prometheus: int = 19090
    alertmanager: int = 19093


@dataclass(frozen=True)
class StackSpec:
    """What to run. `exporter_args` choose the exporter's backend (by default the scenario
    through `--simulate`); `exporter_env` is added to its environment."""

    scenario: Path
    thresholds: Config
    workdir: Path
    host: str = "127.0.0.1"
    ports: Ports = Ports()
    interval: str = "5s"  # scrape, rule evaluation and collection
    webhook_url: str | None = None
    exporter_args: Sequence[str] | None = None
    exporter_env: Mapping[str, str] = field(default_factory=dict)


class Stack:
    """Starts the four parts in dependency order; a context manager that stops them all."""

    def __init__(self, spec: StackSpec) -> None:
        self.spec = spec
        self.kubelet = PodResourcesServer(spec.workdir / "kubelet.sock")
        self._procs: list[tuple[str, subprocess.Popen[bytes]]] = []

    def url(self, part: str) -> str:
        return f"http://{self.spec.host}:{getattr(self.spec.ports, part)}"

    def start(self) -> None:
        binaries = {name: _binary(name) for name in ("prometheus", "prometheus-alertmanager")}
        spec = self.spec
        spec.workdir.mkdir(parents=True, exist_ok=True)
        scenario = Scenario.load(spec.scenario)
        self.kubelet.pods = pod_resources(scenario)
        self.kubelet.allocatable = allocatable(scenario)
        try:
            self.kubelet.start()
            self._start_alertmanager(binaries["prometheus-alertmanager"])
            self._start_exporter()
            self._start_prometheus(binaries["prometheus"])
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for _, proc in reversed(self._procs):
            if proc.poll() is None:
                proc.terminate()
        for _, proc in reversed(self._procs):
            try:
                proc.wait(timeout=STOP_SECONDS)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._procs.clear()
        self.kubelet.stop()

    def __enter__(self) -> Stack:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def exited(self) -> str | None:
        """The name of a part that has exited, if one has."""
        return next((name for name, proc in self._procs if proc.poll() is not None), None)

    def log(self, part: str) -> str:
        return (self.spec.workdir / f"{part}.log").read_text(errors="replace")

    def alerts(self) -> list[dict[str, Any]]:
        """Alertmanager's active alerts (its v2 API)."""
        url = f"{self.url('alertmanager')}/api/v2/alerts?active=true&silenced=false"
        with urllib.request.urlopen(url, timeout=5) as response:
            alerts: list[dict[str, Any]] = json.load(response)
        return alerts

    # --- the parts -------------------------------------------------------------------------

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
        self._run(
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

    def _start_exporter(self) -> None:
        spec = self.spec
        backend = spec.exporter_args
        if backend is None:
            backend = ["--simulate", str(spec.scenario)]
        self._run(
            "exporter",
            [
                sys.executable,
                "-m",
                "kube_gpu_exporter.exporter",
                "serve",
                f"--web.listen-address={spec.host}:{spec.ports.exporter}",
                f"--collector.interval={spec.interval}",
                f"--kubelet.pod-resources-socket={self.kubelet.socket_path}",
                f"--kubelet.interval={spec.interval}",
                *backend,
            ],
            f"{self.url('exporter')}/healthz",
            env=spec.exporter_env,
        )

    def _start_prometheus(self, binary: str) -> None:
        spec = self.spec
        rules = self._write(RULES_FILE, render_outputs(spec.thresholds)[RULES_FILE])
        config = {
            "global": {"scrape_interval": spec.interval, "evaluation_interval": spec.interval},
            "scrape_configs": [
                {
                    "job_name": JOB,
                    "static_configs": [{"targets": [f"{spec.host}:{spec.ports.exporter}"]}],
                }
            ],
            "rule_files": [str(rules)],
            "alerting": {
                "alertmanagers": [
                    {"static_configs": [{"targets": [f"{spec.host}:{spec.ports.alertmanager}"]}]}
                ]
            },
        }
        path = self._write("prometheus.yml", yaml.safe_dump(config))
        self._run(
            "prometheus",
            [
                binary,
                f"--config.file={path}",
                f"--storage.tsdb.path={spec.workdir / 'prometheus-data'}",
                f"--web.listen-address={spec.host}:{spec.ports.prometheus}",
            ],
            f"{self.url('prometheus')}/-/ready",
        )

    def _write(self, name: str, text: str) -> Path:
        path = self.spec.workdir / name
        path.write_text(text)
        return path

    def _run(
        self, name: str, argv: list[str], ready_url: str, env: Mapping[str, str] | None = None
    ) -> None:
        """Start a part, its output in `<name>.log`, and wait until `ready_url` answers 200."""
        with (self.spec.workdir / f"{name}.log").open("wb") as log:
            proc = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **(env or {})},
                start_new_session=True,  # Ctrl-C reaches the demo, which stops each part
            )
        self._procs.append((name, proc))
        deadline = time.monotonic() + START_SECONDS
        while not _answers(ready_url):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = " | ".join(self.log(name).strip().splitlines()[-3:])
                raise DemoError(f"{name} did not start ({ready_url}): {tail or 'no output'}")
            time.sleep(0.2)


def _binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise DemoError(
            f"`{name}` is not installed: apt-get install prometheus prometheus-alertmanager "
            "(`make demo` does it)"
        )
    return path


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False
