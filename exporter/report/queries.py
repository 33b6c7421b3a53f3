"""The report's queries: the dashboards' query functions (grafana/queries.py), evaluated over
the report's period.

A chart is a dashboard panel's expression asked as a range query; a table cell is a panel's
expression integrated over the period (`Period.gpu_hours`), averaged or maxed over it
(a subquery), or with Grafana's `$__rate_interval` filled with the whole period
(`Period.over_period`: a rate becomes the period's average, an increase its total). Nothing
here writes a join of its own: holds, idle, shares and costs are the recording rules'.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.exporter.catalog.cluster import PENDING_PODS, PENDING_SECONDS
from kube_gpu_exporter.exporter.input_errors import InputError, quoted
from kube_gpu_exporter.exporter.report.period import Period
from kube_gpu_exporter.grafana import queries as qq
from kube_gpu_exporter.rules.config import Config
from kube_gpu_exporter.rules.promql import Query, agg
from kube_gpu_exporter.rules.record_names import names
from kube_gpu_exporter.rules.xid_query import xid_events_over

NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
WORKLOAD = ("namespace", "workload")


@dataclass(frozen=True)
class ReportQueries:
    """Every expression of one report: the config's selectors, the cluster and namespaces
    asked for, and the period."""

    cfg: Config
    period: Period
    cluster: str | None = None
    namespaces: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in self.namespaces:
            if not NAMESPACE.fullmatch(name):
                raise InputError(f"--namespace {quoted(name)}: not a Kubernetes namespace name")
        if self.cluster is not None and not self.cfg.labels.cluster:
            raise InputError(
                "--cluster needs the thresholds file's labels.cluster (the label that names "
                "a cluster); this config has none, so every series is one cluster's"
            )

    @property
    def q(self) -> Query:
        """Queries scoped to the cluster, as a dashboard's `$cluster` variable scopes them."""
        q = Query(self.cfg)
        if self.cluster is None:
            return q
        return q.everywhere(f"{self.cfg.labels.cluster}={json.dumps(self.cluster)}")

    @property
    def ns(self) -> tuple[str, ...]:
        """The namespace matcher of `--namespace`, for the namespace-level series."""
        return (f'namespace=~"{"|".join(self.namespaces)}"',) if self.namespaces else ()

    @property
    def node(self) -> str:
        return self.cfg.labels.node

    @property
    def gpu(self) -> tuple[str, ...]:
        """What names one GPU in a table: its node, index and uuid."""
        return (self.node, "gpu", "uuid")

    # --- what must exist before anything is drawn -------------------------------------------

    def gpus_seen(self) -> str:
        """The most whole GPUs the exporter reported at once during the period."""
        return f"max_over_time({self.period.grid(qq.gpus(self.q))})"

    def clusters_seen(self) -> str:
        label = self.cfg.labels.cluster
        return agg(
            "count",
            (label,),
            f"last_over_time({Query(self.cfg).sel(c.GPU_INFO)}[{self.period.range}])",
        )

    def recorded_seen(self) -> str:
        name = names(self.q)["cluster_gpus"]
        return f"count(last_over_time({self.q.recorded(name)}[{self.period.range}]))"

    def namespaces_seen(self) -> str:
        held = qq.recorded(self.q, "namespace_allocated")
        return agg("count", ("namespace",), f"last_over_time({held}[{self.period.range}])")

    def pending_seen(self) -> str:
        """Whether the cluster view is scraped at all (any namespace: a namespace that never
        waited still has scheduling data, only none pending)."""
        return f"count(last_over_time({self.q.view(PENDING_PODS)}[{self.period.range}]))"

    # --- charts (range queries) --------------------------------------------------------------

    def utilization(self) -> str:
        return qq.utilization(self.q)

    def allocated(self) -> str:
        """GPUs held: the cluster dashboard's series, or the namespaces' sum when filtered
        (the namespace dashboard's)."""
        if self.ns:
            return qq.cluster_sum(self.q, "namespace_allocated", *self.ns)
        return qq.cluster_sum(self.q, "cluster_allocated")

    def idle(self) -> str:
        if self.ns:
            return qq.cluster_sum(self.q, "namespace_idle", *self.ns)
        return qq.cluster_sum(self.q, "cluster_idle")

    def slowdowns(self) -> str:
        return self.period.charted(qq.slowdowns_by_reason(self.q))

    def pending_by_reason(self) -> str:
        return agg("sum", ("reason",), self.pending_selector())

    # --- table cells (instant queries at the period's end) -----------------------------------

    def mean_utilization(self) -> str:
        return f"avg_over_time({self.period.grid(self.utilization())})"

    def namespace_hours(self, role: str) -> str:
        """GPU-hours per namespace of a namespace-level GPU count (`namespace_allocated`,
        `namespace_idle`)."""
        return self.period.gpu_hours(qq.namespace_sum(self.q, role, *self.ns))

    def workload_idle_hours(self) -> str:
        return self.period.gpu_hours(qq.workload_sum(self.q, "allocation_idle", *self.ns))

    def workload_devices(self) -> str:
        """Each idle workload's devices with their weight (the hold's GPU share)."""
        held = agg("max", (*WORKLOAD, *self.gpu), qq.recorded(self.q, "allocation_idle", *self.ns))
        return f"max_over_time({self.period.grid(held)})"

    def hold_labels(self) -> tuple[str, ...]:
        return (*self.gpu, "namespace", "pod", "workload")

    def fractional_holds(self) -> str:
        """Holds worth less than a GPU (MIG slices, shared GPUs), their weight and profile."""
        held = agg("max", self.hold_labels(), qq.recorded(self.q, "allocation_share", *self.ns))
        profiled = qq.with_profile(self.q, held)
        return f"max_over_time({self.period.grid(profiled)}) < 1"

    def hold_hours(self, role: str) -> str:
        """GPU-hours per hold of `allocation_share` (held) or `allocation_idle` (idle)."""
        held = agg("sum", self.hold_labels(), qq.recorded(self.q, role, *self.ns))
        return self.period.gpu_hours(held)

    def slowed_share(self) -> str:
        """Per GPU and reason, the share of the period its clocks were held down."""
        return self.period.over_period(qq.throttled_share(self.q, self.gpu))

    def hottest(self) -> str:
        return f"max_over_time({self.period.grid(qq.hottest(self.q, self.gpu))})"

    def xid_counts(self) -> str:
        """Per GPU and code, the Xids of the period: first ones and those of a GPU gone
        before its end included (rules/xid_query.py)."""
        events = xid_events_over(self.q, self.period.range, str(self.period.seconds))
        return agg("sum", (*self.gpu, "xid"), events)

    def pending_selector(self) -> str:
        """The cluster view's pending GPU pods (kube-gpu-exporter cluster)."""
        return self.q.view(PENDING_PODS, *self.ns)

    def pending_peak(self) -> str:
        by_ns = agg("sum", ("namespace", "reason"), self.pending_selector())
        return f"max_over_time({self.period.grid(by_ns)})"

    def pending_mean(self) -> str:
        return self.period.mean(agg("sum", ("namespace", "reason"), self.pending_selector()))

    def pending_longest(self) -> str:
        waited = agg("max", ("namespace",), self.q.view(PENDING_SECONDS, *self.ns))
        return f"max_over_time({self.period.grid(waited)})"
