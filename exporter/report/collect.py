"""Asking Prometheus: the checks that make bad input one line, then every query of the report
in one list, so that progress can count them.

The checks come first because each names what the operator must fix: a Prometheus with no
exporter data in the period (wrong URL or `--since`), one without the recorded series (the
recording rules are not loaded), a `--cluster` or `--namespace` that holds nothing. Whether
the cluster view's scheduling series exist decides whether the pending tables are asked at all,
and whether Kueue's do, whether the queue section is.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import TextIO

from kube_gpu_exporter.exporter.input_errors import InputError
from kube_gpu_exporter.exporter.report import queues
from kube_gpu_exporter.exporter.report.prometheus_api import PrometheusApi, Sample, Series
from kube_gpu_exporter.exporter.report.queries import ReportQueries


@dataclass(frozen=True)
class Ask:
    key: str
    expr: str
    chart: bool = False  # a range query over the period; else an instant one at its end


@dataclass
class Results:
    instant: dict[str, list[Sample]] = field(default_factory=dict)
    ranged: dict[str, list[Series]] = field(default_factory=dict)
    scheduling: bool = False  # the cluster view's series exist in the period
    kueue: bool = False  # and Kueue's queues among them (report/queues.py)
    gpus: float = 0.0


class Progress:
    """`[3/12] queries` rewritten in place on a terminal; nothing when stderr is not one."""

    def __init__(self, total: int, stream: TextIO | None = None) -> None:
        self.total, self.done = total, 0
        self.stream = stream if stream is not None else sys.stderr
        self.shown = self.stream.isatty()

    def step(self) -> None:
        self.done += 1
        if self.shown:
            self.stream.write(f"\r[{self.done}/{self.total}] queries")
            self.stream.flush()

    def close(self) -> None:
        if self.shown and self.done:
            self.stream.write("\r\033[K")
            self.stream.flush()


def check(api: PrometheusApi, rq: ReportQueries) -> Results:
    """What must hold before a report makes sense; an InputError (one line) otherwise."""
    at, since = rq.period.end, rq.period.since
    gpus = api.instant(rq.gpus_seen(), at)
    if not gpus or gpus[0].value <= 0:
        if rq.cluster is not None:
            known = sorted(
                s.labels.get(rq.cfg.labels.cluster, "") for s in api.instant(rq.clusters_seen(), at)
            )
            if known:
                raise InputError(
                    f"--cluster {rq.cluster}: no GPUs in the last {since} "
                    f"(clusters seen: {', '.join(known)})"
                )
        raise InputError(
            f"no kube-gpu-exporter data in the last {since} at {api.url} "
            f"(series {rq.cfg.selectors.exporter}); is it the Prometheus that scrapes it?"
        )
    if not api.instant(rq.recorded_seen(), at):
        raise InputError(
            f"{api.url} has exporter data but none of its recorded series in the last {since}:"
            " load the recording rules `kube-gpu-exporter generate` writes (deploy/rules.yaml)"
        )
    if rq.namespaces:
        seen = {s.labels.get("namespace", "") for s in api.instant(rq.namespaces_seen(), at)}
        for name in rq.namespaces:
            if name not in seen:
                raise InputError(
                    f"--namespace {name}: held no GPU in the last {since} "
                    f"(namespaces that did: {', '.join(sorted(seen)) or 'none'})"
                )
    return Results(
        scheduling=bool(api.instant(rq.pending_seen(), at)),
        kueue=bool(api.instant(queues.seen(rq), at)),
        gpus=gpus[0].value,
    )


def asks(rq: ReportQueries, scheduling: bool, kueue: bool = False) -> tuple[Ask, ...]:
    """Every query the tables and charts read, by key."""
    found = [
        Ask("utilization", rq.utilization(), chart=True),
        Ask("allocated", rq.allocated(), chart=True),
        Ask("idle", rq.idle(), chart=True),
        Ask("slowdowns", rq.slowdowns(), chart=True),
        Ask("mean_utilization", rq.mean_utilization()),
        Ask("namespace_allocated", rq.namespace_hours("namespace_allocated")),
        Ask("namespace_idle", rq.namespace_hours("namespace_idle")),
        Ask("workload_idle", rq.workload_idle_hours()),
        Ask("workload_devices", rq.workload_devices()),
        Ask("holds", rq.fractional_holds()),
        Ask("hold_allocated", rq.hold_hours("allocation_share")),
        Ask("hold_idle", rq.hold_hours("allocation_idle")),
        Ask("slowed", rq.slowed_share()),
        Ask("hottest", rq.hottest()),
        Ask("xids", rq.xid_counts()),
    ]
    if scheduling:
        found += [
            Ask("pending", rq.pending_by_reason(), chart=True),
            Ask("pending_peak", rq.pending_peak()),
            Ask("pending_mean", rq.pending_mean()),
            Ask("pending_longest", rq.pending_longest()),
        ]
    if kueue:
        found += [Ask(key, expr) for key, expr in queues.asks(rq)]
    return tuple(found)


def fetch(
    api: PrometheusApi, rq: ReportQueries, results: Results, stream: TextIO | None = None
) -> Results:
    """Ask every query of the report, with progress on a terminal."""
    period = rq.period
    planned = asks(rq, results.scheduling, results.kueue)
    progress = Progress(len(planned), stream)
    try:
        for ask in planned:
            if ask.chart:
                results.ranged[ask.key] = api.range(ask.expr, period.start, period.end, period.step)
            else:
                results.instant[ask.key] = api.instant(ask.expr, period.end)
            progress.step()
    finally:
        progress.close()
    return results
