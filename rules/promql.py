"""PromQL building blocks as functions of the config: selectors, label lists and joins.

Every query in rules/ and grafana/ is written with these, so the job selector, the optional
cluster label and the node label name are inserted in one place (the kubernetes-mixin's
"selectors inserted between {}"), and metric names come from the catalog's `Metric` objects.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.rules.settings.view import ConfigView

# Metrics from kube-state-metrics that the dashboards read (where it is scraped). Named here so
# the catalog test can tell them from typos: everything else must be in the exporter's catalog.
KSM_POD_STATUS_PHASE = "kube_pod_status_phase"
KSM_CONTAINER_RESOURCE_REQUESTS = "kube_pod_container_resource_requests"
KSM_NODE_ALLOCATABLE = "kube_node_status_allocatable"
KSM_METRICS: tuple[str, ...] = (
    KSM_POD_STATUS_PHASE,
    KSM_CONTAINER_RESOURCE_REQUESTS,
    KSM_NODE_ALLOCATABLE,
)
# kube-state-metrics' sanitised names of the GPU resources: nvidia.com/gpu (also renamed or
# shared variants) and the MIG resources nvidia.com/mig-<profile>.
KSM_GPU_RESOURCES = 'resource=~"nvidia_com_gpu.*|nvidia_com_mig_.*"'
# Series Prometheus itself writes for every target.
PROMETHEUS_METRICS: tuple[str, ...] = ("up",)

POD_LABELS: tuple[str, ...] = ("namespace", "pod")
# What names a device's holder on an alert: its pod, and the pod's workload where the exporter
# watches pods (`owner_kind`/`owner_name` are absent otherwise, and then not joined), and
# `workload` as the per-workload alerts name it (`with_workload`), so that an inhibit rule can
# tie a device alert to the workload alert of the same holder.
HOLDER_LABELS: tuple[str, ...] = (*POD_LABELS, "owner_kind", "owner_name", "workload")


def with_workload(held: str) -> str:
    """`held` (series with `pod` and, where the exporter watches pods, `owner_name`) with a
    `workload` label: the owner's name (a Deployment, not its ReplicaSet), else the pod's."""
    by_pod = f'label_replace({held}, "workload", "$1", "pod", "(.+)")'
    return f'label_replace(\n  {by_pod},\n  "workload", "$1", "owner_name", "(.+)"\n)'


def settled(expr: str) -> str:
    """An extrapolated `rate`/`increase` rounded to a millionth before a threshold judges it.

    Prometheus 3's range is left-open: on scrapes aligned with the evaluation (a target
    scraped at the rule's interval; promtool's input) the window holds one sample fewer than
    Prometheus 2's and the result is extrapolated over the missing interval, so a counter
    exactly at a threshold comes out one bit under or over it (`0.24999999999999997`). A
    millionth of an event, or of a window, is far below what these counters resolve: rounded,
    both generations compare the same number."""
    return f"round({expr}, 0.000001)"


def rose(counter: str, window: str) -> str:
    """Where `counter` rose within `window`, the counted rise as value, over the same window
    on both Prometheus generations.

    Prometheus 3's range is left-open: `increase(x[w])` no longer holds the last sample from
    before a rise once the rise is one scrape short of `w` old, so a single event stops firing
    one interval before Prometheus 2 lets it go. The instant difference with `x offset w`
    (the last sample at or before `t - w`, the same on both) keeps it for the whole window;
    `increase` still counts what follows a reset, and a rise after a gap at `t - w`."""
    return f"increase({counter}[{window}]) > 0\nor\n{counter} - {counter} offset {window} > 0"


def counted_over(total: Callable[[str], str], counter: str, window: str, threshold: str) -> str:
    """Where `total` (an aggregation) of `counter`'s increase over `window` is over
    `threshold`, or else the same total of its rise since one window back is: a count of events
    judged against a threshold that sees a burst for the whole window on both Prometheus
    generations (`rose`, for a threshold and a sum over series).

    The rise `x - x offset w` never exceeds what happened (a reset only lowers it), so its arm
    adds no alert that the events do not justify; each arm compares on its own, so both keep
    a threshold's edge (`>` against `>=`) that a case can probe. Between the window's edges
    the extrapolated increase still decides: a count exactly at a threshold above 0 can read
    a little over it on Prometheus 3, whose range holds one scrape less to extrapolate from."""
    increase = total(f"increase({counter}[{window}])")
    rise = total(f"{counter} - {counter} offset {window}")
    return f"{increase} > {threshold}\nor\n{rise} > {threshold}"


def by(labels: tuple[str, ...]) -> str:
    """` by (a, b)`, or nothing for an empty list (a plain aggregation)."""
    return f" by ({', '.join(labels)})" if labels else ""


def agg(op: str, labels: tuple[str, ...], expr: str) -> str:
    """`sum by (a, b) (expr)`; `sum(expr)` when `labels` is empty."""
    return f"{op}{by(labels)} ({expr})" if labels else f"{op}({expr})"


def fmt_number(value: float) -> str:
    """A threshold as a person writes it: 85, 0.95, 2.5 — never 85.0."""
    return f"{value:g}"


def fmt_percent(ratio: float) -> str:
    return f"{ratio * 100:g}%"


def fmt_bytes(value: int) -> str:
    """1073741824 → 1GiB, as the thresholds file may write it."""
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= size and value % size == 0:
            return f"{value // size}{unit}"
    return f"{value}B"


@dataclass(frozen=True)
class Query:
    """Selectors and label sets of one config.

    `matchers` are extra matchers put in every exporter selector and `scope` those put in
    every selector (the cluster): none in rules, the dashboard variables
    (`cluster="$cluster"`, `instance=~"$node"`) in panels.
    """

    config: ConfigView
    matchers: tuple[str, ...] = ()
    scope: tuple[str, ...] = ()

    def where(self, *matchers: str) -> Query:
        """The same queries with `matchers` added to every exporter selector."""
        return Query(self.config, self.matchers + matchers, self.scope)

    def everywhere(self, *matchers: str) -> Query:
        """`matchers` (the cluster's) added to every selector: the exporter's, the recorded
        series' and kube-state-metrics'."""
        return Query(self.config, self.matchers + matchers, self.scope + matchers)

    @property
    def cluster(self) -> tuple[str, ...]:
        """The cluster label as a label list: empty in a single-cluster setup."""
        return (self.config.labels.cluster,) if self.config.labels.cluster else ()

    @property
    def node_label(self) -> str:
        return self.config.labels.node

    @property
    def node(self) -> tuple[str, ...]:
        """Labels that identify a node."""
        return (*self.cluster, self.node_label)

    @property
    def device(self) -> tuple[str, ...]:
        """Labels that identify a device (a GPU or a MIG instance) across the fleet."""
        return (*self.node, "uuid")

    @property
    def device_display(self) -> tuple[str, ...]:
        """Device identity plus the `gpu` index people read in alerts and legends."""
        return (*self.node, "gpu", "uuid")

    @property
    def allocation(self) -> tuple[str, ...]:
        """Labels of one pod's hold on one device."""
        return (*self.device_display, *POD_LABELS)

    def sel(self, metric: c.Metric, *matchers: str) -> str:
        """`metric{job="…", <extra>}` for an exporter metric from the catalog."""
        parts = [self.config.selectors.exporter, *self.matchers, *matchers]
        return f"{metric.name}{{{', '.join(parts)}}}"

    def view(self, metric: c.Metric, *matchers: str, suffix: str = "") -> str:
        """`metric{job="…-cluster", <extra>}` for a series of the cluster view (`kube_gpu_*`):
        one target per cluster, so only the cluster scope applies, never a node's. `suffix`
        names one of a histogram's series (`_bucket`)."""
        return self._of_view(metric.name + suffix, matchers)

    def view_up(self) -> str:
        """Prometheus' `up` series of the cluster view's target."""
        return self._of_view("up", ())

    def _of_view(self, name: str, matchers: tuple[str, ...]) -> str:
        parts = [self.config.selectors.cluster_view, *self.scope, *matchers]
        return f"{name}{{{', '.join(parts)}}}"

    def up(self) -> str:
        """Prometheus' `up` series of the exporter's targets."""
        return f"up{{{', '.join([self.config.selectors.exporter, *self.matchers])}}}"

    def ksm(self, name: str, *matchers: str) -> str:
        """A kube-state-metrics series (named in KSM_METRICS), with its job selector."""
        assert name in KSM_METRICS, name
        parts = [self.config.selectors.kube_state_metrics, *self.scope, *matchers]
        return f"{name}{{{', '.join(parts)}}}"

    def recorded(self, name: str, *matchers: str) -> str:
        """A series of our recording rules: aggregated, so without the job label."""
        parts = [*self.scope, *matchers]
        return f"{name}{{{', '.join(parts)}}}" if parts else name

    def on(self, labels: tuple[str, ...]) -> str:
        return f"on ({', '.join(labels)})"

    def mig_parents(self) -> str:
        """One series per MIG-enabled GPU, keyed by its own uuid: to leave such parents out of
        per-device memory rules, since their framebuffer is the sum of their instances'."""
        info = self.sel(c.GPU_INFO, 'parent_uuid!=""')
        return f'label_replace({info}, "uuid", "$1", "parent_uuid", "(.+)")'

    def per_workload(self, device_expr: str) -> str:
        """`device_expr` (one series per physical GPU, labelled by `device_display` alone) once
        per workload holding the GPU or one of its MIG slices, each carrying that workload's
        namespace, owner and `workload` (and its pod where it has one pod there); a GPU nobody
        holds keeps its one series. A time-sliced GPU's sharers are several workloads, or one
        workload's several pods: an inhibit rule keyed on the workload reaches each of them,
        where one alert per GPU could name none."""
        owners = ("namespace", "owner_kind", "owner_name")
        on_gpu = 'label_replace({}, "uuid", "$1", "parent_uuid", "(.+)")'  # a slice: its GPU
        pods = with_workload(
            agg("max", (*self.device, "pod", *owners), on_gpu.format(self.sel(c.ALLOCATION_INFO)))
        )
        workload = (*self.device, "namespace", "workload")
        one_pod = f"{pods}\n  and {self.on(workload)}\n{agg('count', workload, pods)} == 1"
        several = agg("max", (*self.device, *owners, "workload"), pods)
        workloads = f"{one_pod}\nor {self.on(workload)}\n{several}"
        extra = [k for k in self.device_display if k not in self.device]
        return (
            f"(\n{device_expr}\n)\n"
            f"  * {self.on(self.device)} group_right ({', '.join(extra)})\n"
            f"({workloads})\n"
            f"or {self.on(self.device)}\n"
            f"(\n{device_expr}\n)"
        )

    def with_holder(self, device_expr: str) -> str:
        """`device_expr` (one series per device) with its holder's namespace, pod and owner
        joined on where exactly one pod holds the device, so that the alert routes to the team
        using it; a device several pods share, or none holds, keeps its series as it is (its
        description lists the holders instead: `alert_text.holders`)."""
        owners = (*POD_LABELS, "owner_kind", "owner_name")
        held = with_workload(agg("max", (*self.device, *owners), self.sel(c.ALLOCATION_INFO)))
        sole = f"{held}\n  and {self.on(self.device)}\n{agg('count', self.device, held)} == 1"
        return (
            f"(\n{device_expr}\n)\n"
            f"  * {self.on(self.device)} group_left ({', '.join(HOLDER_LABELS)})\n"
            f"({sole})\n"
            f"or {self.on(self.device)}\n"
            f"(\n{device_expr}\n)"
        )
