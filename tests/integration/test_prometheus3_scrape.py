"""Prometheus 3's strict scrape of every body the exporter serves.

Prometheus 3 fails a scrape whose Content-Type is missing or one it does not know, unless the
job sets `fallback_scrape_protocol`; it negotiates the format with the `Accept` header of each
job's `scrape_protocols`. Here the real Prometheus 3 (built by `make prom-bin`) scrapes `serve`,
`serve --compat.dcgm-exporter` (each schema) and `cluster`, with no fallback configured, once
per `scrape_protocols` choice (and its default, and without compression): every target must
be up with no scrape error and all of its series. Then `promtool check metrics` of Prometheus
3 reads each text body we serve (what curl, and each protocol that negotiates text, gets;
plain and gzipped) and finds nothing to say but, on the dcgm-exporter compat bodies, the
names dcgm-exporter itself uses
(counters without `_total`, camelCase labels). It reads only the text format (an OpenMetrics
family's HELP names it without `_total`, which its text parser takes for a missing HELP), so
the OpenMetrics bodies are held to prometheus-client's strict OpenMetrics parser instead, on
top of the scrapes above.
"""

from __future__ import annotations

import gzip
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from kube_gpu_exporter.demo.kube_api import KubeApiServer
from prometheus_server import BUILT, Generation, Prometheus, binaries_of, run_prometheus
from support import Exporter, run_exporter, wait_until

pytestmark = pytest.mark.k8s

DEMO = Path(__file__).parents[2] / "exporter" / "simulated" / "scenarios" / "demo.yaml"
# Each value Prometheus 3 takes for `scrape_protocols`, alone; None: its default list.
PROTOCOLS: tuple[str | None, ...] = (
    None,
    "OpenMetricsText1.0.0",
    "OpenMetricsText0.0.1",
    "PrometheusText1.0.0",
    "PrometheusText0.0.4",
    "PrometheusProto",
)
# The Accept headers those send (Prometheus 3's scrape.ScrapeProtocolsHeaders), curl's none.
ACCEPTS = {
    "curl": "",
    "OpenMetricsText1.0.0": "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8",
    "OpenMetricsText0.0.1": "application/openmetrics-text;version=0.0.1",
    "PrometheusText1.0.0": "text/plain;version=1.0.0;escaping=allow-utf-8",
    "PrometheusText0.0.4": "text/plain;version=0.0.4",
}
TARGETS = ("serve", "dcgm-classic", "dcgm-4.8.3", "dcgm-4.9", "cluster")


@pytest.fixture(scope="module")
def prometheus3() -> Generation:
    return binaries_of(BUILT)


@pytest.fixture(scope="module")
def exporters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Exporter]]:
    """`serve` over the demo scenario, the same with each dcgm-exporter schema, and `cluster`
    over the test API server."""
    tmp = tmp_path_factory.mktemp("scrape3")
    serve = ["--simulate", str(DEMO), "--collector.interval=1s"]
    with KubeApiServer() as api:
        kubeconfig = api.write_kubeconfig(tmp / "kubeconfig")
        cluster = [f"--kubernetes.kubeconfig={kubeconfig}", "--cluster.interval=1s"]
        with (
            run_exporter(serve, tmp) as plain,
            run_exporter([*serve, "--compat.dcgm-exporter=classic"], tmp) as classic,
            run_exporter([*serve, "--compat.dcgm-exporter=4.8.3"], tmp) as v483,
            run_exporter([*serve, "--compat.dcgm-exporter=4.9"], tmp) as v49,
            run_exporter(cluster, tmp, command="cluster") as view,
        ):
            yield dict(zip(TARGETS, (plain, classic, v483, v49, view), strict=True))


def _job(target: str, exporter: Exporter, protocol: str | None, gz: bool) -> dict[str, Any]:
    name = f"{target}-{protocol or 'default'}{'' if gz else '-plain'}"
    job: dict[str, Any] = {
        "job_name": name,
        "static_configs": [{"targets": [exporter.url.removeprefix("http://")]}],
    }
    if protocol is not None:
        job["scrape_protocols"] = [protocol]
    if not gz:
        job["enable_compression"] = False
    return job


def test_prometheus_3_scrapes_every_target_with_every_protocol(
    tmp_path: Path, exporters: dict[str, Exporter], prometheus3: Generation
) -> None:
    jobs = [
        _job(target, exporter, protocol, gz)
        for target, exporter in exporters.items()
        for protocol in PROTOCOLS
        for gz in (True, False)
        if gz or protocol is None
    ]
    with run_prometheus(tmp_path, [], scrape_configs=jobs, generation=prometheus3) as prom:
        wait_until(lambda: _all_scraped(prom, len(jobs)), what="every job scraped twice")
        targets = prom.api("targets")["activeTargets"]
        assert not any("fallback" in str(j) for j in jobs)
        errors = {
            t["labels"]["job"]: t["lastError"]
            for t in targets
            if t["health"] != "up" or t["lastError"]
        }
        assert errors == {}
        scraped = {r["metric"]["job"]: r["value"] for r in prom.query("scrape_samples_scraped")}
        # Every protocol yields the same series of one target: none lost to a format.
        for target in TARGETS:
            counts = {job: n for job, n in scraped.items() if job.startswith(f"{target}-")}
            assert len(counts) == len(PROTOCOLS) + 1, counts
            assert min(counts.values()) > 0
            series = {job: prom.query(f'count({{job="{job}"}})')[0]["value"] for job in counts}
            assert len(set(series.values())) == 1, series


def _all_scraped(prom: Prometheus, jobs: int) -> bool:
    done = prom.query("count(count_over_time(up[1h]) >= 2)")
    return bool(done) and done[0]["value"] >= jobs


@pytest.mark.parametrize("accept", list(ACCEPTS))
@pytest.mark.parametrize("target", TARGETS)
def test_promtool_3_finds_nothing_wrong_in_any_body(
    target: str, accept: str, exporters: dict[str, Exporter], prometheus3: Generation
) -> None:
    exporter = exporters[target]
    headers = {"Accept": ACCEPTS[accept]} if ACCEPTS[accept] else {}
    for _ in range(20):  # the two bodies of one snapshot: a cycle may publish between the GETs
        zstatus, zhead, zipped = exporter.get("/metrics", **headers, **{"Accept-Encoding": "gzip"})
        status, head, body = exporter.get("/metrics", **headers)
        assert status == 200
        assert zstatus == 200 and zhead.get("Content-Encoding") == "gzip"
        assert zhead["Content-Type"] == head["Content-Type"]
        again = exporter.get("/metrics", **headers, **{"Accept-Encoding": "gzip"})[2]
        if again == zipped:
            break
    assert gzip.decompress(zipped) == body
    if head["Content-Type"].startswith("application/openmetrics-text"):
        families = list(text_string_to_metric_families(body.decode()))
        assert families and body.endswith(b"# EOF\n")
        return
    assert head["Content-Type"].startswith("text/plain; version=")
    for label, data in (("plain", body), ("gzip", gzip.decompress(zipped))):
        result = subprocess.run(
            [prometheus3.promtool, "check", "metrics"],
            input=data,
            capture_output=True,
            timeout=60,
            check=False,
        )
        said = (result.stdout + result.stderr).decode()
        assert "error while linting" not in said, said
        lints = {line for line in said.splitlines() if not _dcgm_own_names(line)}
        assert lints == set(), f"{target} {accept} {label}: {said}"
        assert said or result.returncode == 0, result.returncode  # lints: non-zero


def _dcgm_own_names(lint: str) -> bool:
    """A lint that dcgm-exporter's own output draws, which the compat families must repeat
    for the dashboards written against it: its counters have no `_total`, its labels are
    camelCase (`modelName`, `Hostname`, `UUID`), and one counter says so in its name
    (`DCGM_FI_DEV_PCIE_REPLAY_COUNTER`)."""
    name, _, said = lint.partition(" ")
    return name.startswith("DCGM_") and said in (
        'counter metrics should have "_total" suffix',
        "label names should be written in 'snake_case' not 'camelCase'",
        "metric name should not include type 'counter'",
    )
