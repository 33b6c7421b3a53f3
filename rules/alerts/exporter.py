"""Exporter alerts (group kube-gpu-exporter.exporter): the exporter's own health — scraped,
present, collecting, and able to reach NVML and the kubelet. Every other alert is blind where
one of these fires.
"""

from __future__ import annotations

import math

from pydantic import Field

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.rules.alert_text import AlertText, in_cluster, where
from kube_gpu_exporter.rules.promql import (
    KSM_GPU_RESOURCES,
    KSM_NODE_ALLOCATABLE,
    Query,
    agg,
    fmt_number,
)
from kube_gpu_exporter.rules.promtool_cases import (
    Case,
    Check,
    Firing,
    Series,
    World,
    edges,
    just_over,
    later,
    minutes,
    s,
    steady,
)
from kube_gpu_exporter.rules.runbook_parts import EXPORTER_LOGS, NODE_GPUS, Runbook, promql, sh
from kube_gpu_exporter.rules.settings.alert import AlertSettings
from kube_gpu_exporter.rules.settings.values import Duration, duration_seconds, selector_labels
from kube_gpu_exporter.rules.spec import AlertSpec


def _down_on_one_node(metric: str, for_: str, w: World) -> Case:
    """`metric` at 0 on node a (fires) and at 1 on node b (does not)."""
    n = minutes(for_) + 10
    series = (Series(metric, w.node("a"), steady(0, n)), Series(metric, w.node("b"), steady(1, n)))
    return Case(series, edges(for_, (Firing(w.node("a"), 0),)))


# --- KubeGpuExporterDown -------------------------------------------------------------------------


def _down_rule(a: AlertSettings, q: Query) -> AlertText:
    return AlertText(
        f"{q.up()} == 0",
        f"Prometheus has failed to scrape kube-gpu-exporter {where(q)} for {a.for_}: the "
        "node's GPUs are not monitored and none of its GPU alerts can fire.",
    )


def _down_case(a: AlertSettings, w: World) -> Case:
    return _down_on_one_node("up", a.for_, w)


def _down_runbook(a: AlertSettings, q: Query) -> Runbook:
    return Runbook(
        meaning=f"Prometheus has failed to scrape the exporter for {a.for_} (`up == 0`).",
        impact=(
            "The node's GPUs are unmonitored: none of the GPU alerts can fire for it and "
            "the dashboards show gaps."
        ),
        diagnosis="\n\n".join(
            (
                promql(q.up() + " == 0"),
                "The target's last error is on Prometheus' Targets page (Status → Targets).",
                EXPORTER_LOGS,
            )
        ),
        mitigation=(
            "A crash-looping exporter logs one line saying why (bad flag, port in use, web "
            "config). A running exporter that times out: check the node's network policy "
            "and the Service/ServiceMonitor port. TLS or basic-auth errors: the "
            "ServiceMonitor's `tlsConfig`/`basicAuth` must match `--web.config.file`."
        ),
    )


KUBE_GPU_EXPORTER_DOWN = AlertSpec(
    name="KubeGpuExporterDown",
    summary="Prometheus cannot scrape a kube-gpu-exporter.",
    settings=AlertSettings,
    rule=_down_rule,
    cases=_down_case,
    runbook=_down_runbook,
)

# --- KubeGpuExporterAbsent -----------------------------------------------------------------------


class AbsentAlert(AlertSettings):
    for_: Duration = Field(default="15m", alias="for")


def _gpu_nodes(q: Query) -> str:
    """GPU nodes per cluster, as kube-state-metrics sees them: nodes that offer a GPU resource."""
    allocatable = q.ksm(KSM_NODE_ALLOCATABLE, KSM_GPU_RESOURCES)
    return agg("count", q.cluster, agg("max", (*q.cluster, "node"), allocatable) + " > 0")


def _absent_rule(a: AbsentAlert, q: Query) -> AlertText:
    # Per cluster, and only where GPU nodes exist: one cluster losing every exporter alerts
    # while another still has some, and a GPU pool scaled to zero does not.
    targets = agg("count", q.cluster, q.up())
    return AlertText(
        f"{_gpu_nodes(q)}\nunless {q.on(q.cluster)}\n{targets}",
        f"{{{{ $value | humanize }}}} GPU nodes{in_cluster(q)} have had no exporter target "
        f"matching {{{q.config.selectors.exporter}}} for {a.for_}: their GPUs are not "
        "monitored.",
    )


def _absent_case(a: AbsentAlert, w: World) -> Case:
    """A GPU node without an exporter fires until the target appears; once the GPU pool scales
    to zero (no GPU node, no target) nothing fires; another cluster that keeps its exporter
    never fires. A node offering 0 GPUs all along is no GPU node: the count stays 1."""
    appear = minutes(a.for_) + 10
    n = appear + 30
    ksm = selector_labels(w.q.config.selectors.kube_state_metrics)
    gpu_node = {**ksm, **w.scope, "node": "node-a", "resource": "nvidia_com_gpu"}
    other = w.node("a") | {"job": "something-else"}
    series = [
        Series("up", other, steady(1, n)),
        Series(KSM_NODE_ALLOCATABLE, gpu_node, f"8+0x{appear + 10} 0+0x19"),
        Series(KSM_NODE_ALLOCATABLE, gpu_node | {"node": "node-z"}, steady(0, n)),
        Series("up", w.node("a"), later(appear, "1+0x10 _x19")),
    ]
    if w.q.cluster:
        elsewhere = {w.q.cluster[0]: "other-cluster"}
        series += [
            Series(KSM_NODE_ALLOCATABLE, gpu_node | elsewhere, steady(4, n)),
            Series("up", w.node("b") | elsewhere, steady(1, n)),
        ]
    checks = (
        *edges(a.for_, (Firing(dict(w.scope), 1),)),
        Check(appear + 5, ()),
        Check(appear + 25, ()),
    )
    return Case(tuple(series), checks)


def _absent_runbook(a: AbsentAlert, q: Query) -> Runbook:
    return Runbook(
        meaning=(
            f"For {a.for_} a cluster has had GPU nodes (kube-state-metrics: nodes offering "
            "nvidia.com/gpu or a MIG resource) but no target matching "
            f"`{{{q.config.selectors.exporter}}}`: the exporter is not deployed, its "
            "ServiceMonitor is not selected by Prometheus, or the job label differs. A cluster "
            "whose GPU pool is scaled to zero does not alert."
        ),
        impact="No GPU in the cluster is monitored; every GPU alert is silent.",
        diagnosis="\n\n".join(
            (
                promql('count by (job) ({__name__="up", job=~".*gpu.*"})'),
                sh(
                    "kubectl get ds,servicemonitor -A -l app.kubernetes.io/name=kube-gpu-exporter",
                    "kubectl get prometheus -A -o yaml | grep -A5 serviceMonitorSelector",
                ),
            )
        ),
        mitigation=(
            "Deploy the exporter, or make the ServiceMonitor's labels match the "
            "Prometheus' `serviceMonitorSelector` (kube-prometheus-stack: "
            "`release: <release name>`). If the job label is different on purpose, set "
            "`selectors.exporter` in the thresholds file and regenerate."
        ),
    )


KUBE_GPU_EXPORTER_ABSENT = AlertSpec(
    name="KubeGpuExporterAbsent",
    summary="Prometheus has no kube-gpu-exporter target at all.",
    settings=AbsentAlert,
    rule=_absent_rule,
    cases=_absent_case,
    runbook=_absent_runbook,
)

# --- KubeGpuExporterStale ------------------------------------------------------------------------


class StaleAlert(AlertSettings):
    threshold: Duration = "2m"  # age of the last successful collection


def _stale_rule(a: StaleAlert, q: Query) -> AlertText:
    age = f"time() - {q.sel(c.LAST_SUCCESS)}"
    return AlertText(
        f"{age} > {fmt_number(duration_seconds(a.threshold))}\n"
        f"unless {q.on(q.node)} {q.sel(c.NVML_UP)} == 0",
        f"kube-gpu-exporter {where(q)} last completed a collection "
        f"{{{{ $value | humanizeDuration }}}} ago, over the {a.threshold} threshold, for "
        f"{a.for_}: an NVML call is hanging, and the values it serves are frozen.",
    )


def _stale_case(a: StaleAlert, w: World) -> Case:
    """Node a's collections stop at 60 s: it fires once its age has been over the threshold
    for `for`; node b keeps collecting; node c stopped too, but its NVML is down (that alert
    speaks). Nodes d and e collect with a steady lag: d's age is exactly the threshold (not
    over it: silent), e's just over it (fires once `for` has held)."""
    limit = duration_seconds(a.threshold)
    stuck_at = 60.0  # node a's last success, and node c's (whose NVML is down)
    start = math.floor((stuck_at + limit) / 60) + 1  # first minute node a's age is over
    held = minutes(a.for_)
    at = start + held + 2
    n = at + 10
    lag = just_over(limit)
    series = (
        s(c.LAST_SUCCESS, w.node("a"), f"0 {stuck_at!r}+0x{n}"),
        s(c.LAST_SUCCESS, w.node("b"), f"0+60x{n}"),
        s(c.LAST_SUCCESS, w.node("c"), f"0 {stuck_at!r}+0x{n}"),
        s(c.LAST_SUCCESS, w.node("d"), f"{-limit!r}+60x{n}"),  # `time() - x` is `limit`
        s(c.LAST_SUCCESS, w.node("e"), f"{-lag!r}+60x{n}"),
        s(c.NVML_UP, w.node("a"), steady(1, n)),
        s(c.NVML_UP, w.node("b"), steady(1, n)),
        s(c.NVML_UP, w.node("c"), steady(0, n)),
    )
    e = Firing(w.node("e"), lag)
    checks = (*edges(a.for_, (e,)), Check(start + held - 1, (e,)))
    return Case(series, (*checks, Check(at, (Firing(w.node("a"), at * 60 - stuck_at), e))))


def _stale_runbook(a: StaleAlert, q: Query) -> Runbook:
    age = f"time() - {q.sel(c.LAST_SUCCESS)}"
    return Runbook(
        meaning=(
            f"The exporter's last successful collection is older than {a.threshold} and has "
            f"been for {a.for_}, while NVML is not reported down. The exporter collects on "
            "its own interval and serves the last result, so scrapes still succeed — with "
            "old values. Usually an NVML call hangs (a GPU in a bad state, a driver bug)."
        ),
        impact="Dashboards and alerts for the node see frozen values.",
        diagnosis="\n\n".join(
            (
                promql(age, q.sel(c.COLLECTION_DURATION)),
                EXPORTER_LOGS,
                "Does `nvidia-smi` hang on the node too?",
                NODE_GPUS,
            )
        ),
        mitigation=(
            "If `nvidia-smi` hangs as well, the driver or a GPU is stuck: drain the node and "
            "reboot it. If only the exporter is stuck, restart its pod and open an issue "
            "with its log."
        ),
    )


KUBE_GPU_EXPORTER_STALE = AlertSpec(
    name="KubeGpuExporterStale",
    summary="A kube-gpu-exporter serves old data.",
    settings=StaleAlert,
    rule=_stale_rule,
    cases=_stale_case,
    runbook=_stale_runbook,
)

# --- KubeGpuExporterNvmlDown ---------------------------------------------------------------------


def _nvml_rule(a: AlertSettings, q: Query) -> AlertText:
    return AlertText(
        f"{q.sel(c.NVML_UP)} == 0",
        f"kube-gpu-exporter {where(q)} has had NVML unavailable for {a.for_} "
        "(kube_gpu_exporter_nvml_up is 0): the driver is not loaded or not mounted into "
        "the exporter's pod.",
    )


def _nvml_case(a: AlertSettings, w: World) -> Case:
    return _down_on_one_node(c.NVML_UP.name, a.for_, w)


def _nvml_runbook(a: AlertSettings, q: Query) -> Runbook:
    return Runbook(
        meaning=(
            f"The exporter has been unable to initialise NVML for {a.for_} "
            "(`kube_gpu_exporter_nvml_up 0`; its `/readyz` answers 503). It retries with "
            "backoff."
        ),
        impact="No GPU metrics from the node.",
        diagnosis="\n\n".join(
            (
                promql(
                    q.sel(c.NVML_UP) + " == 0",
                    q.sel(c.COLLECTION_ERRORS, 'kind="init"'),
                ),
                EXPORTER_LOGS,
                NODE_GPUS,
            )
        ),
        mitigation=(
            "The exporter's log line says why. `libnvidia-ml.so.1` not found: the driver's "
            "libraries are not mounted into the pod (NVIDIA container runtime class or "
            "hostPath mount). Driver not loaded on the host (`nvidia-smi` fails there too): "
            "fix the driver installation (GPU Operator driver pod). The exporter scheduled "
            "on a node without GPUs: fix the DaemonSet's node selector."
        ),
    )


KUBE_GPU_EXPORTER_NVML_DOWN = AlertSpec(
    name="KubeGpuExporterNvmlDown",
    summary="A kube-gpu-exporter cannot talk to the NVIDIA driver.",
    settings=AlertSettings,
    rule=_nvml_rule,
    cases=_nvml_case,
    runbook=_nvml_runbook,
)

# --- KubeGpuExporterPodResourcesDown -------------------------------------------------------------


class PodResourcesAlert(AlertSettings):
    for_: Duration = Field(default="10m", alias="for")


def _pod_resources_rule(a: PodResourcesAlert, q: Query) -> AlertText:
    return AlertText(
        f"{q.sel(c.POD_RESOURCES_UP)} == 0",
        f"kube-gpu-exporter {where(q)} has failed to list pod resources from the kubelet "
        f"for {a.for_}: GPUs are not attributed to pods there, and the per-pod alerts "
        "(idle, memory) are blind on that node.",
    )


def _pod_resources_case(a: PodResourcesAlert, w: World) -> Case:
    return _down_on_one_node(c.POD_RESOURCES_UP.name, a.for_, w)


def _pod_resources_runbook(a: PodResourcesAlert, q: Query) -> Runbook:
    return Runbook(
        meaning=(
            "The exporter's last call to the kubelet's pod-resources API failed, and has "
            f"for {a.for_}."
        ),
        impact=(
            "GPUs on the node are not attributed to pods: per-pod metrics vanish, "
            "GPUAllocatedIdle and the pod names in GPUMemoryNearFull are blind there, and "
            "GPUNotAdvertised cannot judge the node."
        ),
        diagnosis="\n\n".join(
            (
                promql(q.sel(c.POD_RESOURCES_UP) + " == 0"),
                EXPORTER_LOGS,
            )
        ),
        mitigation=(
            "The exporter needs the kubelet's socket directory mounted "
            "(`/var/lib/kubelet/pod-resources`, read-only) and permission to connect to "
            "`kubelet.sock` there (root or a matching SELinux/AppArmor profile). A kubelet "
            "restart recreates the socket: restart the exporter pod if it does not "
            "reconnect by itself."
        ),
    )


KUBE_GPU_EXPORTER_POD_RESOURCES_DOWN = AlertSpec(
    name="KubeGpuExporterPodResourcesDown",
    summary="A kube-gpu-exporter cannot reach the kubelet's pod-resources API.",
    settings=PodResourcesAlert,
    rule=_pod_resources_rule,
    cases=_pod_resources_case,
    runbook=_pod_resources_runbook,
)

SPECS = (
    KUBE_GPU_EXPORTER_DOWN,
    KUBE_GPU_EXPORTER_ABSENT,
    KUBE_GPU_EXPORTER_STALE,
    KUBE_GPU_EXPORTER_NVML_DOWN,
    KUBE_GPU_EXPORTER_POD_RESOURCES_DOWN,
)
