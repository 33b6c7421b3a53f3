"""Workload alerts, third part of group kube-gpu-exporter.workloads: framebuffer held on a
device that no pod holds and no process uses — a leak the driver never released, or a workload
started outside Kubernetes.
"""

from __future__ import annotations

from pydantic import Field

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.rules.alert_text import AlertText, device
from kube_gpu_exporter.rules.alerts.workload_memory import mig_instance
from kube_gpu_exporter.rules.promql import Query, agg, fmt_bytes
from kube_gpu_exporter.rules.promtool_cases import (
    Case,
    Firing,
    Series,
    World,
    edges,
    just_over,
    minutes,
    s,
    steady,
)
from kube_gpu_exporter.rules.runbook_parts import Runbook, find_node, on_node, promql
from kube_gpu_exporter.rules.settings.alert import AlertSettings
from kube_gpu_exporter.rules.settings.values import Bytes, Duration
from kube_gpu_exporter.rules.spec import AlertSpec

# --- GPUMemoryLeaked -----------------------------------------------------------------------------


class LeakAlert(AlertSettings):
    for_: Duration = Field(default="15m", alias="for")
    threshold: Bytes = 1 << 30  # framebuffer held with no pod and no process


def _leaked_rule(a: LeakAlert, q: Query) -> AlertText:
    used = agg("max", q.device_display, q.sel(c.MEMORY_USED))
    expr = (
        f"{used} > {a.threshold}\n"
        f"unless {q.on(q.device)} {q.sel(c.ALLOCATION_INFO)}\n"
        f"unless {q.on(q.device)} {q.mig_parents()}\n"
        f"and {q.on(q.device)} {q.sel(c.COMPUTE_PROCESSES)} == 0\n"
        f"and {q.on(q.node)} {q.sel(c.POD_RESOURCES_UP)} == 1\n"
        # Without hostPID NVML lists none of the workloads' processes: 0 would mean nothing.
        f"and {q.on(q.node)} {q.sel(c.HOST_PID_NAMESPACE)} == 1"
    )
    return AlertText(
        expr,
        f"{device(q)} has {{{{ $value | humanize1024 }}}}B of framebuffer in use, over the "
        f"{fmt_bytes(a.threshold)} threshold, for {a.for_}, although no pod is allocated "
        "to it and NVML lists no compute process on it. The memory is lost to every pod "
        "scheduled there until the GPU is reset.",
    )


def _leaked_case(a: LeakAlert, w: World) -> Case:
    held = max(2 * a.threshold, 1 << 30)
    n = minutes(a.for_) + 10
    # node a: (gpu, allocated, processes); node b: the same leak, but pod-resources is down;
    # node c: the same leak, but the exporter runs without hostPID (NVML lists no process)
    devices = [(0, False, 0), (1, True, 0), (2, False, 1)]
    series = [s(c.POD_RESOURCES_UP, w.node("a"), steady(1, n))]
    series += [s(c.POD_RESOURCES_UP, w.node("b"), steady(0, n))]
    series += [s(c.POD_RESOURCES_UP, w.node("c"), steady(1, n))]
    series += [s(c.HOST_PID_NAMESPACE, w.node(x), steady(int(x != "c"), n)) for x in "abc"]
    for node in ("a", "b", "c"):
        for g, allocated, processes in devices:
            series.append(s(c.MEMORY_USED, w.dev(node, g), steady(held, n)))
            series.append(s(c.COMPUTE_PROCESSES, w.dev(node, g), steady(processes, n)))
            if allocated:
                series.append(w.alloc(node, g, "team-a", "job-0", "exclusive"))
    # A MIG-enabled parent: its memory is its instances', one of which a pod holds.
    mig = mig_instance(w)
    series += [
        s(c.MEMORY_USED, w.dev("a", 3), steady(held, n)),
        s(c.COMPUTE_PROCESSES, w.dev("a", 3), steady(0, n)),
        s(c.GPU_INFO, mig | {"mig_profile": "3g.40gb"}, steady(1, n)),
        s(c.MEMORY_USED, mig, steady(held, n)),
        Series(c.ALLOCATION_INFO.name, mig | {"namespace": "team-a", "pod": "mig-0"}, "1+0x200"),
    ]
    # GPU 4 holds exactly the threshold (silent: "over" it is strict), GPU 5 just over it.
    over = just_over(a.threshold)
    for g, used in ((4, a.threshold), (5, over)):
        series.append(s(c.MEMORY_USED, w.dev("a", g), steady(used, n)))
        series.append(s(c.COMPUTE_PROCESSES, w.dev("a", g), steady(0, n)))
    firing = (Firing(w.dev_out("a", 0), held), Firing(w.dev_out("a", 5), over))
    return Case(tuple(series), edges(a.for_, firing))


def _leaked_runbook(a: LeakAlert, q: Query) -> Runbook:
    return Runbook(
        meaning=(
            f"More than {fmt_bytes(a.threshold)} of framebuffer has been in use for {a.for_} on "
            "a device that no pod is allocated to and on which NVML lists no compute "
            "process. It only fires while the exporter reaches the kubelet's pod-resources "
            "API and shares the host's PID namespace (hostPID; without it NVML lists none of "
            "the workloads' processes), so a blind exporter does not cause it."
        ),
        impact=(
            "The memory is lost: the next pod scheduled on the GPU gets less than the "
            "device's size and may fail with out of memory. Usual causes: a process killed "
            "uncleanly whose context the driver did not release, a workload started outside "
            "Kubernetes (directly with Docker or on the host), or a process in another PID "
            "namespace that NVML cannot see."
        ),
        diagnosis="\n\n".join(
            (
                promql(
                    q.sel(c.MEMORY_USED, 'uuid="<uuid>"'),
                    q.sel(c.COMPUTE_PROCESSES, 'uuid="<uuid>"'),
                ),
                find_node(q),
                "Processes on the GPU, as the host sees them:",
                on_node(
                    "nvidia-smi --query-compute-apps=pid,used_memory --format=csv",
                    "fuser -v /dev/nvidia*",
                ),
            )
        ),
        mitigation=(
            "Stop the process holding the device if you find one (a container outside "
            "Kubernetes: stop it; a zombie: kill its parent). If nothing holds it, cordon "
            "the node, wait for the GPU to be free and reset it with `nvidia-smi -r -i "
            "<gpu>`, or reboot the node. Then uncordon."
        ),
    )


GPU_MEMORY_LEAKED = AlertSpec(
    name="GPUMemoryLeaked",
    summary="Framebuffer is held on a GPU that no pod holds and no process uses.",
    settings=LeakAlert,
    rule=_leaked_rule,
    cases=_leaked_case,
    runbook=_leaked_runbook,
)

SPECS = (GPU_MEMORY_LEAKED,)
