"""Workload alerts, first part of group kube-gpu-exporter.workloads: what pods do with their
GPUs — an allocation left idle, a framebuffer close to full, framebuffer left behind.

Alerts about a device name the pods allocated to it where that matters (`Query.pods_on`), one
alert per pod, while a device no pod holds still alerts. Device series are matched on
(cluster, node, uuid).
"""

from __future__ import annotations

from pydantic import Field

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.rules.alert_text import AlertText, device, label
from kube_gpu_exporter.rules.promql import Query, agg, fmt_bytes, fmt_number, fmt_percent
from kube_gpu_exporter.rules.promtool_cases import (
    Case,
    Firing,
    Series,
    World,
    minutes,
    s,
    steady,
    timeline,
    uuid,
)
from kube_gpu_exporter.rules.record_names import names
from kube_gpu_exporter.rules.runbook_parts import (
    NODE_GPUS,
    Runbook,
    find_node,
    on_node,
    promql,
    sh,
    who,
)
from kube_gpu_exporter.rules.settings.alert import AlertSettings
from kube_gpu_exporter.rules.settings.values import Bytes, Duration, Ratio
from kube_gpu_exporter.rules.spec import AlertSpec

# --- GPUAllocatedIdle ----------------------------------------------------------------------------


class IdleAlert(AlertSettings):
    for_: Duration = Field(default="30m", alias="for")
    threshold: Ratio = 0.1  # 5-minute average utilization below which an allocation is idle


def _idle_rule(a: IdleAlert, q: Query) -> AlertText:
    usage = agg("sum", q.allocation, f"avg_over_time({q.sel(c.POD_UTILIZATION)}[5m])")
    return AlertText(
        f"{usage} < {fmt_number(a.threshold)}",
        f"{label('namespace')}/{label('pod')} holds {device(q)} but used "
        f"{{{{ $value | humanizePercentage }}}} of it over the last 5 minutes, under the "
        f"{fmt_percent(a.threshold)} idle threshold, for at least {a.for_}. The GPU is "
        "allocated and cannot be scheduled to anyone else.",
    )


def _idle_case(a: IdleAlert, w: World) -> Case:
    idle, busy = a.threshold / 2, (1 + a.threshold) / 2
    n = minutes(a.for_) + 10
    pods = [  # (gpu, namespace, pod, utilization): exclusive and shared, idle and busy
        (0, "team-a", "idle-0", idle),
        (1, "team-a", "busy-0", busy),
        (2, "team-b", "shared-idle", idle),
        (2, "team-b", "shared-busy", busy),
    ]
    series = tuple(s(c.POD_UTILIZATION, w.pod("a", g, ns, p), steady(u, n)) for g, ns, p, u in pods)
    firing = tuple(
        Firing(w.dev_out("a", g, namespace=ns, pod=p), u) for g, ns, p, u in pods if u == idle
    )
    return Case(series, timeline(a.for_, firing))


def _idle_runbook(a: IdleAlert, q: Query) -> Runbook:
    n = names(q)
    cost = q.config.cost
    return Runbook(
        meaning=(
            "A pod has held a GPU (a whole one, or a share of a time-sliced or MPS GPU) for "
            f"at least {a.for_} while using under {fmt_percent(a.threshold)} of it, averaged "
            "over 5 minutes. On a shared GPU the pod's own processes are measured, not the "
            "device, so one busy neighbour does not hide an idle pod. Pods on MIG instances "
            "are not covered: NVML reports no utilization for MIG."
        ),
        impact=(
            "The GPU is reserved and unschedulable for everyone else. At "
            f"{fmt_number(cost.gpu_hour)} {cost.currency} per GPU-hour, idle "
            f"allocated GPUs cost what `{n['cluster_idle_cost']}` shows per hour. Common "
            "causes: a notebook left open, a job waiting on data or a lock, a crashed worker "
            "whose pod stays Running, a pod that requests a GPU it does not use."
        ),
        diagnosis="\n\n".join(
            (
                "How much the pod used over the last hours, and which process runs there:",
                promql(
                    q.sel(c.POD_UTILIZATION, 'namespace="<namespace>"', 'pod="<pod>"'),
                    f"{n['namespace_idle']}",
                ),
                sh(
                    "kubectl -n <namespace> describe pod <pod>",
                    "kubectl -n <namespace> logs <pod> --tail=50",
                    "kubectl -n <namespace> exec <pod> -- nvidia-smi",
                ),
            )
        ),
        mitigation=(
            "Ask the owner (namespace, pod owner labels) whether the pod still needs the GPU; "
            "delete or scale down idle notebooks and finished jobs. For recurring cases set "
            "an idle-culling policy (notebook culler, `activeDeadlineSeconds` on Jobs), or "
            "move light workloads to time-sliced or MIG resources. If the workload is "
            "legitimately bursty, raise `alerts.GPUAllocatedIdle.for` or lower the threshold "
            "in the thresholds file, or silence the alert for that namespace."
        ),
    )


GPU_ALLOCATED_IDLE = AlertSpec(
    name="GPUAllocatedIdle",
    summary="A pod holds a GPU it does not use.",
    settings=IdleAlert,
    rule=_idle_rule,
    cases=_idle_case,
    runbook=_idle_runbook,
)

# --- GPUMemoryNearFull ---------------------------------------------------------------------------


class MemoryAlert(AlertSettings):
    threshold: Ratio = 0.95  # framebuffer used / total


def _near_full_rule(a: MemoryAlert, q: Query) -> AlertText:
    used, total = q.sel(c.MEMORY_USED), q.sel(c.MEMORY_TOTAL)
    near_full = (
        f"{used} / {total} > {fmt_number(a.threshold)}\n  unless {q.on(q.device)} {q.mig_parents()}"
    )
    return AlertText(
        q.pods_on(near_full),
        f"{device(q)}{{{{ with $labels.pod }}}}, used by {label('namespace')}/{{{{ . }}}},"
        f"{{{{ end }}}} has {{{{ $value | humanizePercentage }}}} of its framebuffer in use, "
        f"over the {fmt_percent(a.threshold)} threshold, for {a.for_}. The next allocation "
        "on it may fail with CUDA out of memory.",
    )


def _near_full_case(a: MemoryAlert, w: World) -> Case:
    total = 80 << 30
    full, fine = round(total * (1 + a.threshold) / 2), round(total * a.threshold / 2)
    n = minutes(a.for_) + 10
    used = {0: full, 1: full, 2: fine, 3: full}  # 3: a MIG-enabled parent (left out)
    series = [s(c.MEMORY_USED, w.dev("a", g), steady(v, n)) for g, v in used.items()]
    series += [s(c.MEMORY_TOTAL, w.dev("a", g), steady(total, n)) for g in used]
    mig = _mig_instance(w)
    series += [
        s(c.MEMORY_USED, mig, steady(fine, n)),
        s(c.MEMORY_TOTAL, mig, steady(total, n)),
        s(c.GPU_INFO, mig | {"mig_profile": "3g.40gb"}, steady(1, n)),
        w.alloc("a", 0, "team-a", "train-0", "shared"),
        w.alloc("a", 0, "team-a", "train-1", "shared"),
        w.alloc("a", 2, "team-b", "infer-0", "exclusive"),
    ]
    ratio = full / total
    firing = (
        Firing(w.dev_out("a", 0, namespace="team-a", pod="train-0"), ratio),
        Firing(w.dev_out("a", 0, namespace="team-a", pod="train-1"), ratio),
        Firing(w.dev_out("a", 1), ratio),  # no pod holds it: still alerts
    )
    return Case(tuple(series), timeline(a.for_, firing))


def _mig_instance(w: World) -> dict[str, str]:
    """A MIG instance of GPU 3 on node a, whose parent's memory the rules leave out."""
    return w.dev("a", 3) | {"uuid": "MIG-a-3-1", "parent_uuid": uuid("a", 3)}


def _near_full_runbook(a: MemoryAlert, q: Query) -> Runbook:
    used, total = q.sel(c.MEMORY_USED), q.sel(c.MEMORY_TOTAL)
    return Runbook(
        meaning=(
            f"A GPU or MIG instance has had more than {fmt_percent(a.threshold)} of its "
            f"framebuffer in use for {a.for_}. The alert fires once per pod allocated to "
            "the device (labels `namespace`, `pod`); a device that no pod holds fires once "
            "without them. MIG-enabled GPUs are judged per instance, not as a whole."
        ),
        impact=(
            "The next allocation on the device can fail with `CUDA error: out of memory`, "
            "killing a training step or an inference request. On a shared GPU one pod's "
            "growth starves the others."
        ),
        diagnosis="\n\n".join(
            (
                "Headroom per device, and what each pod on it uses:",
                promql(
                    f"1 - {used} / {total}",
                    q.sel(c.POD_MEMORY_USED, 'uuid="<uuid>"'),
                ),
                who(q),
                "Per process, on the node:",
                NODE_GPUS,
            )
        ),
        mitigation=(
            "If the pod is expected to use the memory (frameworks such as TensorFlow or JAX "
            "pre-allocate most of it), lower its pre-allocation (`XLA_PYTHON_CLIENT_MEM_FRACTION`, "
            "`PYTORCH_CUDA_ALLOC_CONF`) or silence the alert for that workload. If usage "
            "grows steadily, the program leaks GPU memory: restart the pod and report it. "
            "On shared GPUs, move the heaviest pod to a whole GPU or a larger MIG profile."
        ),
    )


GPU_MEMORY_NEAR_FULL = AlertSpec(
    name="GPUMemoryNearFull",
    summary="A GPU's framebuffer is nearly full: CUDA out of memory is close.",
    settings=MemoryAlert,
    rule=_near_full_rule,
    cases=_near_full_case,
    runbook=_near_full_runbook,
)

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
    mig = _mig_instance(w)
    series += [
        s(c.MEMORY_USED, w.dev("a", 3), steady(held, n)),
        s(c.COMPUTE_PROCESSES, w.dev("a", 3), steady(0, n)),
        s(c.GPU_INFO, mig | {"mig_profile": "3g.40gb"}, steady(1, n)),
        s(c.MEMORY_USED, mig, steady(held, n)),
        Series(c.ALLOCATION_INFO.name, mig | {"namespace": "team-a", "pod": "mig-0"}, "1+0x200"),
    ]
    return Case(tuple(series), timeline(a.for_, (Firing(w.dev_out("a", 0), held),)))


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

SPECS = (GPU_ALLOCATED_IDLE, GPU_MEMORY_NEAR_FULL, GPU_MEMORY_LEAKED)
