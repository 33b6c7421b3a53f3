"""Exporter alerts, second part of group kube-gpu-exporter.exporter: a kubelet that refuses
to say what it advertises.

The exporter counts a refused GetAllocatableResources as
`collection_errors_total{kind="pod_resources_allocatable_refused"}` unless the refusal is an
old kubelet's (UNIMPLEMENTED, UNKNOWN: expected, the node cannot tell). The advertised counts
are then absent, which GPUNotAdvertised and GPUPartiallyAdvertised read as "cannot tell" and
stay silent: without this alert, a node whose kubelet refuses shows nothing at all.
"""

from __future__ import annotations

from pydantic import Field

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.rules.alert_text import AlertText, where
from kube_gpu_exporter.rules.promql import Query, agg, rose
from kube_gpu_exporter.rules.promtool_cases import (
    Case,
    Firing,
    World,
    edges_from,
    minutes,
    s,
    steady,
)
from kube_gpu_exporter.rules.runbook_parts import (
    EXPORTER_LOGS,
    Runbook,
    find_node,
    on_node,
    promql,
    sh,
)
from kube_gpu_exporter.rules.settings.alert import AlertSettings
from kube_gpu_exporter.rules.settings.values import Duration
from kube_gpu_exporter.rules.spec import AlertSpec

REFUSED = "pod_resources_allocatable_refused"  # the exporter's `pod_resources_<kind>`
KIND = f'kind="{REFUSED}"'


class AllocatableRefusedAlert(AlertSettings):
    for_: Duration = Field(default="10m", alias="for")
    window: Duration = "5m"  # several kubelet listings, so that each window holds a refusal


def _refusals(q: Query, a: AllocatableRefusedAlert) -> str:
    return agg("max", q.node, f"\n{rose(q.sel(c.COLLECTION_ERRORS, KIND), a.window)}\n")


def _refused_rule(a: AllocatableRefusedAlert, q: Query) -> AlertText:
    return AlertText(
        _refusals(q, a),
        f"The kubelet {where(q)} refused to list its allocatable devices "
        f"(GetAllocatableResources) {{{{ $value | humanize }}}} times in the last {a.window}, "
        f"for {a.for_}, with an error an old kubelet does not give: what the node advertises "
        "is unknown, so GPUNotAdvertised and GPUPartiallyAdvertised cannot fire there.",
    )


def _refused_case(a: AllocatableRefusedAlert, w: World) -> Case:
    """Node a's kubelet refuses at every listing from `start`; b's never did (the counter is
    served at 0); c's refused long ago and no more."""
    start = minutes(a.window) + 10
    n = start + minutes(a.for_) + 10
    counter = c.COLLECTION_ERRORS
    series = (
        s(counter, w.node("a") | {"kind": REFUSED}, f"0+0x{start - 1} 1+1x{n - start}"),
        s(counter, w.node("b") | {"kind": REFUSED}, steady(0, n)),
        s(counter, w.node("c") | {"kind": REFUSED}, f"0 1 2 {steady(3, n - 3)}"),
        s(counter, w.node("c") | {"kind": "pod_resources_timeout"}, f"0+1x{n}"),  # another kind
    )
    refusals = minutes(a.window)  # one a minute
    return Case(series, edges_from(a.for_, (Firing(w.node_out("a"), refusals),), start))


def _refused_runbook(a: AllocatableRefusedAlert, q: Query) -> Runbook:
    return Runbook(
        meaning=(
            "The exporter lists pod resources from the kubelet and gets the allocations, but "
            "the kubelet refuses GetAllocatableResources — the devices it advertises — with "
            "an error other than an old kubelet's (UNIMPLEMENTED before 1.21, UNKNOWN on "
            "1.21–1.22 with the KubeletPodResourcesGetAllocatable gate off, which are "
            "expected and not counted): PERMISSION_DENIED, INTERNAL, FAILED_PRECONDITION… "
            f"It refused in every {a.window} for {a.for_}."
        ),
        impact=(
            "The node's advertised counts are unknown: GPUNotAdvertised and "
            "GPUPartiallyAdvertised hold back there, so a device plugin that stopped "
            "advertising the node's GPUs goes unnoticed. Attribution (which pod holds which "
            "GPU) and every other alert still work."
        ),
        diagnosis="\n\n".join(
            (
                promql(f"increase({q.sel(c.COLLECTION_ERRORS, KIND)}[{a.window}])"),
                find_node(q),
                "The exporter logs the refusal's code and the kubelet's message once per "
                "code (`kubelet cannot list allocatable devices (CODE: …)`):",
                EXPORTER_LOGS,
                sh("kubectl get node $NODE -o jsonpath='{.status.nodeInfo.kubeletVersion}'; echo"),
                on_node(
                    "journalctl -u kubelet --since -1h | grep -i -e podresources -e allocatable"
                ),
            )
        ),
        mitigation=(
            "PERMISSION_DENIED: a security profile (SELinux, AppArmor) or a proxy in front of "
            "the socket lets List through but not GetAllocatableResources — give the "
            "exporter the same access to both. INTERNAL and other codes come from the "
            "kubelet's device manager: its log names the cause (a device plugin's stale "
            "checkpoint, a plugin that failed to re-register); restarting the device plugin, "
            "then the kubelet, usually clears it. Meanwhile compare the node's "
            "`.status.allocatable` with `nvidia-smi -L` by hand."
        ),
    )


KUBE_GPU_EXPORTER_ALLOCATABLE_REFUSED = AlertSpec(
    name="KubeGpuExporterAllocatableRefused",
    summary="The kubelet refuses to tell a kube-gpu-exporter which GPUs it advertises.",
    settings=AllocatableRefusedAlert,
    rule=_refused_rule,
    cases=_refused_case,
    runbook=_refused_runbook,
)

SPECS = (KUBE_GPU_EXPORTER_ALLOCATABLE_REFUSED,)
