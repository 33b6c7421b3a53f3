"""docs/runbooks.md: one section per alert, written for the on-call engineer who was paged.

Each section says what the alert means, what it costs if ignored, how to confirm it (PromQL
to paste into Prometheus, kubectl to run) and how to fix it. Thresholds, windows and
selectors come from the same config as the rules, so the runbook never quotes a stale number.
The heading of each section is the alert name, whose GitHub anchor is what `runbook_url`
points at (a lint test checks every link against the generated file).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.rules.alerts import ALERT_GROUPS, all_alerts
from kube_gpu_exporter.rules.config import Config
from kube_gpu_exporter.rules.model import AlertRule
from kube_gpu_exporter.rules.promql import Query, fmt_bytes, fmt_number, fmt_percent
from kube_gpu_exporter.rules.recording import names

XID_MEANINGS: dict[int, str] = {
    13: "graphics engine exception: the program faulted (bad kernel, out-of-bounds access)",
    31: "GPU memory page fault: the program touched memory it does not own (MMU fault)",
    43: "GPU stopped processing: the program's context was stopped after a fault",
    45: "preemptive cleanup: the driver tore down a context after a previous error or a kill",
    48: "double-bit ECC error: uncorrectable memory error",
    62: "internal micro-controller halt",
    64: "ECC page retirement or row-remapping failure",
    68: "video decoder (NVDEC) exception",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error: the affected application was killed, the GPU goes on",
    95: "uncontained ECC error: every application on the GPU is affected, reset needed",
    109: "context switch timeout",
    119: "GSP RPC timeout: the GPU System Processor stopped answering",
    120: "GSP error",
}


XID_NEW_SERIES = (
    "The exporter creates an Xid's counter at its first event, so the rule also counts a "
    "counter that did not exist a window ago. One consequence: a Prometheus starting with "
    "empty storage sees every existing Xid counter as new and fires once for each."
)


@dataclass(frozen=True, slots=True)
class Runbook:
    meaning: str
    impact: str
    diagnosis: str  # markdown, with PromQL and kubectl blocks
    mitigation: str


def promql(*lines: str) -> str:
    return "```promql\n" + "\n".join(lines) + "\n```"


def sh(*lines: str) -> str:
    return "```sh\n" + "\n".join(lines) + "\n```"


def find_node(q: Query) -> str:
    """How to go from the alert's node label to a Kubernetes node name."""
    if q.node_label == "instance":
        return (
            "The alert's `instance` label is the node's name when the exporter is scraped "
            "through the generated ServiceMonitor (it relabels the node name into `instance`): "
            "`NODE=<instance>`. With another scrape config it is the exporter pod's address "
            "(`IP:port`); the exporter runs on the node it reports, so its pod gives the node:\n\n"
            + sh(
                "NODE=$(kubectl get pods -A -o wide --field-selector status.podIP=<ip> \\",
                "  -o jsonpath='{.items[0].spec.nodeName}')",
            )
        )
    return f"The alert's `{q.node_label}` label names the node: `NODE=<{q.node_label}>`."


NODE_GPUS = sh(
    "kubectl debug node/$NODE -it --profile=sysadmin --image=ubuntu -- chroot /host nvidia-smi"
)
GPU_PODS = sh(
    "kubectl get pods -A --field-selector spec.nodeName=$NODE -o wide",
    "kubectl describe node $NODE | grep -A12 'Allocated resources'",
)
KERNEL_LOG = sh(
    "kubectl debug node/$NODE -it --profile=sysadmin --image=ubuntu -- \\",
    "  chroot /host journalctl -k --since -1h | grep -i xid",
)
DRAIN = sh(
    "kubectl cordon $NODE",
    "kubectl drain $NODE --ignore-daemonsets --delete-emptydir-data",
)
EXPORTER_LOGS = sh(
    "kubectl get pods -A -l app.kubernetes.io/name=kube-gpu-exporter -o wide",
    "kubectl logs -n <namespace> <exporter pod> --tail=100",
)


def _who(q: Query) -> str:
    alloc = q.sel(c.ALLOCATION_INFO, f'{q.node_label}="<{q.node_label}>"', 'uuid="<uuid>"')
    return f"Which pods hold the device:\n\n{promql(alloc)}"


def allocated_idle(cfg: Config, q: Query) -> Runbook:
    a = cfg.alerts.GPUAllocatedIdle
    n = names(q)
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
            f"{fmt_number(cfg.cost.gpu_hour)} {cfg.cost.currency} per GPU-hour, idle "
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


def memory_near_full(cfg: Config, q: Query) -> Runbook:
    a = cfg.alerts.GPUMemoryNearFull
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
                _who(q),
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


def memory_leaked(cfg: Config, q: Query) -> Runbook:
    a = cfg.alerts.GPUMemoryLeaked
    return Runbook(
        meaning=(
            f"More than {fmt_bytes(a.threshold)} of framebuffer has been in use for {a.for_} on "
            "a device that no pod is allocated to and on which NVML lists no compute "
            "process. It only fires while the exporter reaches the kubelet's pod-resources "
            "API, so a blind exporter does not cause it."
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
                sh(
                    "kubectl debug node/$NODE -it --profile=sysadmin --image=ubuntu -- \\",
                    "  chroot /host nvidia-smi --query-compute-apps=pid,used_memory --format=csv",
                    "kubectl debug node/$NODE -it --profile=sysadmin --image=ubuntu -- \\",
                    "  chroot /host fuser -v /dev/nvidia*",
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


def _xid_table(xids: tuple[int, ...]) -> str:
    rows = [f"| {x} | {XID_MEANINGS.get(x, 'see NVIDIA’s Xid catalog')} |" for x in xids]
    return "| Xid | meaning |\n|---|---|\n" + "\n".join(rows)


def xid_application_errors(cfg: Config, q: Query) -> Runbook:
    a = cfg.alerts.GPUXidApplicationErrors
    return Runbook(
        meaning=(
            f"The driver reported an application Xid (one of {', '.join(map(str, a.xids))}) "
            f"on the device in the last {a.window}. These are faults of the program running "
            "on the GPU, not of the hardware:\n\n" + _xid_table(a.xids) + "\n\n" + XID_NEW_SERIES
        ),
        impact=(
            "The program that faulted lost its CUDA context: its pod probably crashed or "
            "restarted. The GPU itself is fine. If the same GPU keeps producing them with "
            "different workloads, treat it as hardware and escalate (see GPUXidErrors)."
        ),
        diagnosis="\n\n".join(
            (
                promql("increase(" + q.sel(c.XID_ERRORS, 'uuid="<uuid>"') + f"[{a.window}])"),
                _who(q),
                find_node(q),
                "The driver's own message names the process:",
                KERNEL_LOG,
            )
        ),
        mitigation=(
            "Tell the owner of the pod on the device: the fix is in their program (illegal "
            "memory access, mismatched CUDA and driver versions, a killed process). Check "
            "the pod's logs and restarts (`kubectl -n <namespace> describe pod <pod>`). "
            "Nothing needs doing to the node unless the errors follow the GPU across "
            "workloads."
        ),
    )


def temperature_high(cfg: Config, q: Query) -> Runbook:
    a = cfg.alerts.GPUTemperatureHigh
    return Runbook(
        meaning=(
            f"The GPU die has been above {fmt_number(a.threshold)} °C for {a.for_}. Data-center "
            "GPUs start slowing their clocks for heat around 85–90 °C and shut down near "
            "their maximum operating temperature."
        ),
        impact=(
            "Thermal slowdown follows (see GPUThermalThrottling): jobs run slower, and "
            "multi-GPU jobs run at the pace of the hottest GPU."
        ),
        diagnosis="\n\n".join(
            (
                "Is it one GPU, a whole node or a whole rack?",
                promql(
                    q.sel(c.TEMPERATURE),
                    f"max by ({q.node_label}) ({q.sel(c.TEMPERATURE)})",
                    q.sel(c.POWER, 'uuid="<uuid>"'),
                ),
                find_node(q),
                NODE_GPUS,
            )
        ),
        mitigation=(
            "One GPU hot while its neighbours are cool: failing fan, blocked airflow or "
            "degraded thermal paste — cordon the node and open a hardware ticket. A whole "
            "node or rack hot: data-center cooling; tell facilities. As a stopgap, lower the "
            "power limit (`nvidia-smi -pl <watts> -i <gpu>`) or drain the node."
        ),
    )


def thermal_throttling(cfg: Config, q: Query) -> Runbook:
    a = cfg.alerts.GPUThermalThrottling
    return Runbook(
        meaning=(
            "NVML has reported a thermal clock-event reason (`sw_thermal_slowdown`: the "
            "driver lowers clocks as the GPU nears its slowdown temperature; "
            "`hw_thermal_slowdown`: the hardware cuts clocks hard) for "
            f"{a.for_}."
        ),
        impact=(
            "The GPU runs below its rated clocks; jobs take longer, and synchronous "
            "multi-GPU jobs slow to the pace of this GPU."
        ),
        diagnosis="\n\n".join(
            (
                promql(
                    q.sel(c.CLOCK_EVENT_ACTIVE, 'uuid="<uuid>"') + " == 1",
                    q.sel(c.TEMPERATURE, 'uuid="<uuid>"'),
                    q.sel(c.SM_CLOCK, 'uuid="<uuid>"'),
                ),
                find_node(q),
                sh(
                    "kubectl debug node/$NODE -it --profile=sysadmin --image=ubuntu -- \\",
                    "  chroot /host nvidia-smi -q -d PERFORMANCE,TEMPERATURE",
                ),
            )
        ),
        mitigation="As for GPUTemperatureHigh: fix the cooling of the GPU, node or rack; "
        "lower the power limit or drain the node meanwhile.",
    )


def hardware_slowdown(cfg: Config, q: Query) -> Runbook:
    a = cfg.alerts.GPUHardwareSlowdown
    return Runbook(
        meaning=(
            f"`hw_slowdown` has been active for {a.for_} without `hw_thermal_slowdown` or "
            "`hw_power_brake_slowdown` (those have their own alerts). The hardware halves "
            "the clocks or more because of a board temperature sensor, an external power "
            "brake signal on older boards, or fast-trigger power protection when the draw "
            "spikes over what the board can deliver."
        ),
        impact="The GPU runs at a fraction of its speed until the condition clears.",
        diagnosis="\n\n".join(
            (
                promql(
                    q.sel(c.CLOCK_EVENT_ACTIVE, 'uuid="<uuid>"') + " == 1",
                    q.sel(c.POWER, 'uuid="<uuid>"'),
                    q.sel(c.POWER_LIMIT, 'uuid="<uuid>"'),
                ),
                find_node(q),
                sh(
                    "kubectl debug node/$NODE -it --profile=sysadmin --image=ubuntu -- \\",
                    "  chroot /host nvidia-smi -q -d PERFORMANCE,POWER",
                ),
            )
        ),
        mitigation=(
            "If power draw sits at the limit, lower the power limit a little. Otherwise it "
            "is the board or the node's power delivery: check the BMC/IPMI event log, "
            "cordon the node and open a hardware ticket."
        ),
    )


def power_brake(cfg: Config, q: Query) -> Runbook:
    a = cfg.alerts.GPUPowerBrake
    return Runbook(
        meaning=(
            f"`hw_power_brake_slowdown` has been active for {a.for_}: the system asserted "
            "the external power-brake signal, usually because a power supply failed or the "
            "chassis is over its power budget."
        ),
        impact="Clocks are cut hard on the affected GPUs, usually on every GPU of the node.",
        diagnosis="\n\n".join(
            (
                promql(
                    f"count by ({q.node_label}) ("
                    + q.sel(c.CLOCK_EVENT_ACTIVE, 'reason="hw_power_brake_slowdown"')
                    + " == 1)"
                ),
                find_node(q),
                "Check the node's BMC for power-supply events (`ipmitool sel list` on the host).",
            )
        ),
        mitigation=(
            "Replace or reseat the failed power supply; check the rack's power budget. Drain "
            "the node if its jobs are time-critical."
        ),
    )


def xid_errors(cfg: Config, q: Query) -> Runbook:
    a = cfg.alerts.GPUXidErrors
    return Runbook(
        meaning=(
            f"The driver reported a hardware Xid (one of {', '.join(map(str, a.xids))}) on "
            f"the GPU in the last {a.window}:\n\n" + _xid_table(a.xids) + "\n\n" + XID_NEW_SERIES
        ),
        impact=(
            "Work on the GPU has failed or will; several of these leave the GPU unusable "
            "until it is reset (79, 95, 119, 120) and some mean the hardware is failing "
            "(48, 64, 92)."
        ),
        diagnosis="\n\n".join(
            (
                promql(
                    "increase(" + q.sel(c.XID_ERRORS, 'uuid="<uuid>"') + f"[{a.window}])",
                    q.sel(c.GPU_UP, 'uuid="<uuid>"'),
                ),
                find_node(q),
                KERNEL_LOG,
                NODE_GPUS,
            )
        ),
        mitigation=(
            "Cordon and drain the node so that no new work lands on the GPU:\n\n"
            + DRAIN
            + "\n\nThen reset the GPU (`nvidia-smi -r -i <gpu>` once no process holds it) or "
            "reboot the node. For 48, 64, 92, 94 and 95 check `nvidia-smi -q -d "
            "ROW_REMAPPER,PAGE_RETIREMENT`: pending remappings need a reset; a failed "
            "remapping or a repeat after reset means an RMA — keep the node cordoned and "
            "open a hardware ticket with the `nvidia-bug-report.sh` output."
        ),
    )


def ecc_uncorrectable(cfg: Config, q: Query) -> Runbook:
    a = cfg.alerts.GPUEccUncorrectable
    return Runbook(
        meaning=(
            f"The GPU's volatile uncorrectable (double-bit) ECC counter rose in the last "
            f"{a.window}. The memory returned corrupt data that ECC could not fix."
        ),
        impact=(
            "The process that read the data was killed (usually with Xid 48 or 94/95). The "
            "page is retired or the row remapped at the next reset; until then the GPU may "
            "hit the same cells again."
        ),
        diagnosis="\n\n".join(
            (
                promql(q.sel(c.ECC_UNCORRECTED, 'uuid="<uuid>"')),
                find_node(q),
                sh(
                    "kubectl debug node/$NODE -it --profile=sysadmin --image=ubuntu -- \\",
                    "  chroot /host nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT",
                ),
            )
        ),
        mitigation=(
            "Drain the node and reset the GPU so that the row remapping takes effect:\n\n"
            + DRAIN
            + "\n\nIf `nvidia-smi -q -d ROW_REMAPPER` reports a remapping failure, or the "
            "errors come back after the reset, the GPU needs an RMA."
        ),
    )


def lost(cfg: Config, q: Query) -> Runbook:
    a = cfg.alerts.GPULost
    return Runbook(
        meaning=(
            f"The exporter has read `nvidia_gpu_up 0` for the GPU for {a.for_}: NVML "
            "answers `GPU_IS_LOST` — the GPU fell off the PCIe bus (Xid 79) or is stuck "
            "needing a reset. Its MIG instances are lost with it. The other GPUs of the "
            "node keep reporting."
        ),
        impact=(
            "Every pod on the GPU is failing or hung; the device plugin will mark it "
            "unhealthy, and the node advertises one GPU fewer (GPUPartiallyAdvertised)."
        ),
        diagnosis="\n\n".join(
            (
                promql(
                    q.sel(c.GPU_UP) + " == 0",
                    "increase(" + q.sel(c.XID_ERRORS, 'uuid="<uuid>"') + "[1h])",
                ),
                find_node(q),
                KERNEL_LOG,
                GPU_PODS,
            )
        ),
        mitigation=(
            "Drain the node, then try a GPU reset (`nvidia-smi -r -i <gpu>`); a GPU that "
            "fell off the bus usually needs a node reboot, often a power cycle through the "
            "BMC. If it happens again after a reboot, keep the node cordoned and open a "
            "hardware ticket (PCIe riser, power, or the GPU).\n\n" + DRAIN
        ),
    )


def not_advertised(cfg: Config, q: Query) -> Runbook:
    a = cfg.alerts.GPUNotAdvertised
    return Runbook(
        meaning=(
            "The NVIDIA driver on the node sees GPUs, but for "
            f"{a.for_} the kubelet has advertised no GPU device at all — under any "
            "resource: `nvidia.com/gpu`, MIG resources such as `nvidia.com/mig-1g.10gb`, "
            "shared replicas, or DRA. Counting every resource is what makes the rule right "
            "with MIG and time-slicing, where the number of devices is not the number of "
            "GPUs: zero devices while the driver sees GPUs is wrong in every setup. (For a "
            "node that advertises some devices but too few, see GPUPartiallyAdvertised.) "
            "The rule holds back while the exporter cannot reach pod-resources, since "
            "then it cannot tell."
        ),
        impact="No GPU pod can be scheduled on the node: its GPUs sit idle, unbilled.",
        diagnosis="\n\n".join(
            (
                promql(
                    q.sel(c.NODE_DRIVER_GPUS),
                    q.sel(c.NODE_ADVERTISED),
                ),
                find_node(q),
                sh(
                    "kubectl get node $NODE -o jsonpath='{.status.allocatable}'; echo",
                    "kubectl get pods -A -o wide --field-selector spec.nodeName=$NODE \\",
                    "  | grep -i -e device-plugin -e nvidia",
                    "kubectl logs -n <gpu-operator namespace> <device plugin pod on $NODE>",
                ),
            )
        ),
        mitigation=(
            "Restart the device plugin pod on the node (delete it; its DaemonSet recreates "
            "it). If it is not scheduled there, check the node's labels against the "
            "DaemonSet's node selector (e.g. `nvidia.com/gpu.present=true` with the GPU "
            "Operator). If it crash-loops, its log names the cause — a MIG configuration "
            "it cannot apply, or a driver it cannot load. After a kubelet restart the "
            "device plugin must re-register; restarting the plugin does that."
        ),
    )


def partially_advertised(cfg: Config, q: Query) -> Runbook:
    a = cfg.alerts.GPUPartiallyAdvertised
    return Runbook(
        meaning=(
            "For "
            f"{a.for_} the kubelet has advertised fewer GPU devices, summed over all GPU "
            "resources, than the driver sees GPUs. Every GPU in use backs at least one "
            "device (itself, one or more MIG instances, or one or more replicas), so fewer "
            "devices than GPUs proves that at least one GPU backs none. The rule cannot "
            "see every gap — seven MIG instances on one GPU can mask a missing second GPU "
            "— but it never fires on a correct setup."
        ),
        impact="At least one GPU cannot be scheduled: capacity is lost.",
        diagnosis="\n\n".join(
            (
                promql(
                    q.sel(c.NODE_DRIVER_GPUS),
                    q.sel(c.NODE_ADVERTISED),
                    q.sel(c.GPU_UP) + " == 0",
                ),
                find_node(q),
                sh(
                    "kubectl get node $NODE -o jsonpath='{.status.allocatable}'; echo",
                    "kubectl describe node $NODE | grep -i -A3 nvidia",
                ),
                NODE_GPUS,
            )
        ),
        mitigation=(
            "A GPU marked unhealthy by the device plugin after an Xid or a lost GPU: follow "
            "GPULost / GPUXidErrors (reset or reboot). A MIG-enabled GPU with no instances: "
            "apply the MIG profile (`nvidia.com/mig.config` label with the GPU Operator's "
            "MIG manager). A GPU left out of the device plugin's configuration on purpose: "
            "silence the alert for that node."
        ),
    )


def driver_version_mismatch(cfg: Config, q: Query) -> Runbook:
    a = cfg.alerts.GPUDriverVersionMismatch
    info = q.sel(c.GPU_INFO, 'parent_uuid=""')
    return Runbook(
        meaning=(
            "GPU nodes have been running more than one NVIDIA driver version for "
            f"{a.for_} — longer than a rolling driver upgrade should take."
        ),
        impact=(
            "Multi-node jobs (NCCL) can hang or fail across versions; container images "
            "built for a newer CUDA fail on nodes with an older driver, so the same job "
            "works on some nodes and not on others."
        ),
        diagnosis="\n\n".join(
            (
                "Which nodes run which version:",
                promql(
                    f"count by (driver_version) (count by ({q.node_label}, driver_version) "
                    f"({info}))",
                    f"count by ({q.node_label}, driver_version) ({info})",
                ),
            )
        ),
        mitigation=(
            "Finish the upgrade: with the GPU Operator, check the driver DaemonSet's "
            "rollout (`kubectl -n <gpu-operator namespace> get ds`) and the upgrade state "
            "label `nvidia.com/gpu-driver-upgrade-state` on the nodes left behind. A node "
            "pinned to an old driver on purpose: silence the alert, or keep the mixed "
            "fleet out of multi-node jobs with node affinity."
        ),
    )


def exporter_down(cfg: Config, q: Query) -> Runbook:
    a = cfg.alerts.KubeGpuExporterDown
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


def exporter_absent(cfg: Config, q: Query) -> Runbook:
    a = cfg.alerts.KubeGpuExporterAbsent
    return Runbook(
        meaning=(
            f"For {a.for_} Prometheus has had no target matching "
            f"`{{{cfg.selectors.exporter}}}`: the exporter is not deployed, its "
            "ServiceMonitor is not selected by Prometheus, or the job label differs."
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


def exporter_stale(cfg: Config, q: Query) -> Runbook:
    a = cfg.alerts.KubeGpuExporterStale
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


def exporter_nvml_down(cfg: Config, q: Query) -> Runbook:
    a = cfg.alerts.KubeGpuExporterNvmlDown
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


def exporter_pod_resources_down(cfg: Config, q: Query) -> Runbook:
    a = cfg.alerts.KubeGpuExporterPodResourcesDown
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


RUNBOOKS: dict[str, Callable[[Config, Query], Runbook]] = {
    "GPUAllocatedIdle": allocated_idle,
    "GPUMemoryNearFull": memory_near_full,
    "GPUMemoryLeaked": memory_leaked,
    "GPUXidApplicationErrors": xid_application_errors,
    "GPUTemperatureHigh": temperature_high,
    "GPUThermalThrottling": thermal_throttling,
    "GPUHardwareSlowdown": hardware_slowdown,
    "GPUPowerBrake": power_brake,
    "GPUXidErrors": xid_errors,
    "GPUEccUncorrectable": ecc_uncorrectable,
    "GPULost": lost,
    "GPUNotAdvertised": not_advertised,
    "GPUPartiallyAdvertised": partially_advertised,
    "GPUDriverVersionMismatch": driver_version_mismatch,
    "KubeGpuExporterDown": exporter_down,
    "KubeGpuExporterAbsent": exporter_absent,
    "KubeGpuExporterStale": exporter_stale,
    "KubeGpuExporterNvmlDown": exporter_nvml_down,
    "KubeGpuExporterPodResourcesDown": exporter_pod_resources_down,
}


def _section(cfg: Config, q: Query, alert: AlertRule, group: str) -> str:
    book = RUNBOOKS[alert.name](cfg, q)
    enabled = "" if cfg.alert(alert.name).enabled else " · **disabled in this configuration**"
    return "\n\n".join(
        (
            f"## {alert.name}",
            f"**Severity:** {alert.severity} · **For:** {alert.for_} · **Group:** `{group}`"
            + enabled,
            f"> {alert.summary}",
            f"**Meaning**\n\n{book.meaning}",
            f"**Impact**\n\n{book.impact}",
            f"**Diagnosis**\n\n{book.diagnosis}",
            f"**Mitigation**\n\n{book.mitigation}",
        )
    )


def runbooks_markdown(cfg: Config) -> str:
    q = Query(cfg)
    alerts = {a.name: a for a in all_alerts(cfg)}
    group_of = {b(cfg, q).name: g for g, builders in ALERT_GROUPS for b in builders}
    index = "\n".join(
        f"| [{a.name}](#{a.anchor}) | {a.severity} | {a.summary} |" for a in alerts.values()
    )
    intro = (
        "# Runbooks\n\n"
        "<!-- Generated by `kube-gpu-exporter generate` from the thresholds file; "
        "edit rules/runbooks.py, not this file. -->\n\n"
        "One section per alert of kube-gpu-exporter; each alert's `runbook_url` links "
        "here. Thresholds and durations below are those of the configuration the rules "
        "were generated from. Placeholders in `<angle brackets>` come from the alert's "
        "labels.\n\n"
        "**From an alert to a node.** "
        + find_node(q)
        + "\n\n| alert | severity | summary |\n|---|---|---|\n"
        + index
    )
    sections = [_section(cfg, q, a, group_of[a.name]) for a in alerts.values()]
    return intro + "\n\n" + "\n\n".join(sections) + "\n"
