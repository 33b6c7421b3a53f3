"""Debian's Prometheus, started on a loopback port for a test and queried over its HTTP API."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from support import free_port, wait_until


class Prometheus:
    def __init__(self, url: str, proc: subprocess.Popen[bytes], log_path: Path) -> None:
        self.url = url
        self.proc = proc
        self.log_path = log_path

    def api(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        """Instant query → [{"metric": {...}, "value": float}, ...]."""
        data = self.api("query", query=promql)
        return [{"metric": r["metric"], "value": float(r["value"][1])} for r in data["result"]]

    def wait_for(self, promql: str, count: int = 1, timeout: float = 30) -> list[dict[str, Any]]:
        """Wait until `promql` returns at least `count` series."""
        return wait_until(
            lambda: (lambda r: r if len(r) >= count else None)(self.query(promql)),
            timeout=timeout,
            what=f"{count} series from {promql}",
        )


@contextmanager
def run_prometheus(
    tmp_path: Path,
    targets: Sequence[str],
    job: str = "kube-gpu-exporter",
    scrape_interval: str = "1s",
    rule_files: Sequence[Path] = (),
    alertmanager: str | None = None,
    extra_jobs: Mapping[str, Sequence[str]] | None = None,
) -> Iterator[Prometheus]:
    binary = shutil.which("prometheus")
    assert binary, "Debian's prometheus is not installed (make test installs it)"
    port = free_port()
    config: dict[str, Any] = {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
        "scrape_configs": [
            {"job_name": name, "static_configs": [{"targets": list(hosts)}]}
            for name, hosts in {job: targets, **(extra_jobs or {})}.items()
        ],
        "rule_files": [str(p) for p in rule_files],
    }
    if alertmanager:
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]}
    workdir = tmp_path / f"prometheus-{port}"
    workdir.mkdir()
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    log_path = workdir / "prometheus.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [
                binary,
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    server = Prometheus(f"http://127.0.0.1:{port}", proc, log_path)
    try:
        wait_until(lambda: proc.poll() is not None or ready(server.url), what="Prometheus to start")
        assert proc.poll() is None, log_path.read_text()
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def ready(url: str) -> bool:
    """Whether a Prometheus-family server (Prometheus, Alertmanager) at `url` says it is ready."""
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False
