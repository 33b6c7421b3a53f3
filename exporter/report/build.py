"""One report from one Prometheus: check what must hold, ask every query, build the tables and
charts. What `report` does between reading its flags and writing its files."""

from __future__ import annotations

from typing import TextIO

from kube_gpu_exporter.exporter.report.collect import check, fetch
from kube_gpu_exporter.exporter.report.model import Report
from kube_gpu_exporter.exporter.report.prometheus_api import PrometheusApi
from kube_gpu_exporter.exporter.report.queries import ReportQueries
from kube_gpu_exporter.exporter.report.tables import all_tables, charts

TITLE = "GPU efficiency report"


def build_report(url: str, rq: ReportQueries, progress: TextIO | None = None) -> Report:
    """The report of the period `rq` covers, from the Prometheus at `url`; InputError (one
    line) when it cannot be made (see collect.check)."""
    api = PrometheusApi(url)
    results = fetch(api, rq, check(api, rq), progress)
    cfg = rq.cfg
    title = f"{TITLE} — {rq.cluster}" if rq.cluster else TITLE
    return Report(
        title=title,
        prometheus=api.url,
        since=rq.period.since,
        start=rq.period.start,
        end=rq.period.end,
        step=rq.period.step,
        cluster=rq.cluster,
        namespaces=rq.namespaces,
        currency=cfg.cost.currency,
        gpu_hour=cfg.cost.gpu_hour,
        target=cfg.dashboards.efficiency_target,
        tables=all_tables(rq, results),
        charts=charts(rq, results),
    )
