"""Prometheus, started on a loopback port for a test and queried over its HTTP API, in either
generation the rules must hold on: Debian's (Prometheus 2.42, Alertmanager 0.25) and the one
built from the Go modules (Prometheus 3, a current Alertmanager; `make prom-bin`).

Prometheus 3 changed what rules see (left-open ranges, `le`/`quantile` normalised as floats,
regex `.` matching a newline, strict scrape content types), so every live test takes the
`generation` fixture (tests/conftest.py), which runs it once on each, and hands it on here.

Besides static jobs it can carry external labels, jobs whose targets come from a file the test
rewrites (file_sd: targets that vanish, as Kubernetes service discovery's do) and federation
jobs, so several of them make a multi-cluster setup: one per cluster and a global one."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import real_binaries
import yaml

from support import free_port, wait_until

DEBIAN = "debian"
BUILT = "built"
GENERATIONS = (DEBIAN, BUILT)


@dataclass(frozen=True)
class Generation:
    """The Prometheus, promtool, Alertmanager and amtool of one generation."""

    name: str  # DEBIAN or BUILT
    prometheus: str
    promtool: str
    alertmanager: str
    amtool: str

    @property
    def major(self) -> int:
        """Prometheus' major version: 2 for Debian's, 3 for the built one."""
        return 2 if self.name == DEBIAN else 3


def binaries_of(name: str) -> Generation:
    """The binaries of generation `name`; a missing one fails the test saying how to get it
    (Debian's: `make test` installs them; the built ones: `make prom-bin`)."""
    if name == DEBIAN:
        found = {
            tool: shutil.which(command)
            for tool, command in (
                ("prometheus", "prometheus"),
                ("promtool", "promtool"),
                ("alertmanager", "prometheus-alertmanager"),
                ("amtool", "amtool"),
            )
        }
        missing = sorted(tool for tool, path in found.items() if path is None)
        assert not missing, f"Debian's {missing} not installed (make test installs them)"
        return Generation(DEBIAN, **{tool: str(path) for tool, path in found.items()})
    assert name == BUILT, name
    return Generation(
        BUILT,
        **{
            tool: str(real_binaries.require(tool))
            for tool in ("prometheus", "promtool", "alertmanager", "amtool")
        },
    )


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

    def evaluated_rules(
        self, timeout: float = 60, since: float | None = None
    ) -> list[dict[str, Any]]:
        """Every loaded rule, once each has been evaluated at least once — and, with `since`
        (a Unix time), once each has been evaluated after it: a rule's `health` is "unknown"
        until its first evaluation, each group runs on its own timer, so one group's result
        says nothing of another's, and an evaluation before the series a test just saw
        arrive proves nothing about them. Call with `since=time.time()` after waiting for
        the series, then assert what must not fire."""

        def after(rule: dict[str, Any]) -> bool:
            if since is None:
                return True
            return datetime.fromisoformat(rule["lastEvaluation"]).timestamp() > since

        def evaluated() -> list[dict[str, Any]] | None:
            rules = [r for g in self.api("rules")["groups"] for r in g["rules"]]
            done = all(r["health"] != "unknown" and after(r) for r in rules)
            return rules if rules and done else None

        what = "every rule's first evaluation" + ("" if since is None else " since then")
        return wait_until(evaluated, timeout, what)


@contextmanager
def run_prometheus(
    tmp_path: Path,
    targets: Sequence[str],
    job: str = "kube-gpu-exporter",
    scrape_interval: str = "1s",
    rule_files: Sequence[Path] = (),
    alertmanager: str | None = None,
    extra_jobs: Mapping[str, Sequence[str]] | None = None,
    external_labels: Mapping[str, str] | None = None,
    scrape_configs: Sequence[Mapping[str, Any]] = (),
    lookback_delta: str | None = None,
    *,
    generation: Generation,
) -> Iterator[Prometheus]:
    """Prometheus scraping `targets` as `job` and `extra_jobs` (name → targets; a job with no
    targets is left out), then `scrape_configs` as written in its file (`federate`,
    `file_targets`), evaluating `rule_files`; `external_labels` mark what it exports.

    `lookback_delta` shortens how long a series without new samples still counts (5m). A
    federated series carries its source's timestamps, so Prometheus writes no staleness marker
    when it vanishes and only the lookback ends it: a test of a global Prometheus shortens it."""
    port = free_port()
    static = {job: targets, **(extra_jobs or {})}
    config: dict[str, Any] = {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
        "scrape_configs": [
            *(
                {"job_name": name, "static_configs": [{"targets": list(hosts)}]}
                for name, hosts in static.items()
                if hosts
            ),
            *(dict(c) for c in scrape_configs),
        ],
        "rule_files": [str(p) for p in rule_files],
    }
    if external_labels:
        config["global"]["external_labels"] = dict(external_labels)
    if alertmanager:
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]}
    workdir = tmp_path / f"prometheus-{port}"
    workdir.mkdir()
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    server = start_prometheus(
        workdir / "prometheus.yml",
        workdir / "data",
        port,
        workdir / "prometheus.log",
        lookback_delta,
        generation=generation,
    )
    try:
        yield server
    finally:
        stop_prometheus(server)


def start_prometheus(
    config: Path,
    data: Path,
    port: int,
    log_path: Path,
    lookback_delta: str | None = None,
    *,
    generation: Generation,
) -> Prometheus:
    """`generation`'s Prometheus on `config` and the TSDB in `data`, once it answers."""
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [
                generation.prometheus,
                f"--config.file={config}",
                f"--storage.tsdb.path={data}",
                f"--web.listen-address=127.0.0.1:{port}",
                *([f"--query.lookback-delta={lookback_delta}"] if lookback_delta else []),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    server = Prometheus(f"http://127.0.0.1:{port}", proc, log_path)
    wait_until(lambda: proc.poll() is not None or ready(server.url), what="Prometheus to start")
    assert proc.poll() is None, log_path.read_text()
    return server


def stop_prometheus(server: Prometheus) -> None:
    server.proc.terminate()
    try:
        server.proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait()


def federate(job: str, servers: Sequence[Prometheus], match: Sequence[str]) -> dict[str, Any]:
    """A scrape config that federates the series matching `match` from `servers`, keeping
    their own job and instance labels (`honor_labels`), as a global Prometheus does."""
    return {
        "job_name": job,
        "honor_labels": True,
        "metrics_path": "/federate",
        "params": {"match[]": list(match)},
        "static_configs": [{"targets": [s.url.removeprefix("http://") for s in servers]}],
    }


def file_targets(job: str, path: Path, targets: Sequence[str]) -> dict[str, Any]:
    """A scrape config for `job` whose targets Prometheus reads from `path` (file_sd), written
    here with `targets`; `write_targets` changes them while it runs."""
    write_targets(path, targets)
    return {"job_name": job, "file_sd_configs": [{"files": [str(path)]}]}


def write_targets(path: Path, targets: Sequence[str]) -> None:
    """Replace the targets in a file_sd file at once (Prometheus watches the file's folder)."""
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps([{"targets": list(targets)}] if targets else []))
    partial.replace(path)


def ready(url: str) -> bool:
    """Whether a Prometheus-family server (Prometheus, Alertmanager) at `url` says it is ready."""
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False
