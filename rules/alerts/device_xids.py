"""Device alerts, third part of group kube-gpu-exporter.devices: one Xid alert per action that
NVIDIA's Xid catalog asks of the platform team — reset the GPU (GPUXidErrors, the name it had
when it was a hand-kept list), reboot the node, follow a workflow, investigate. Their default
codes are the catalog's (exporter/catalog/xid_catalog.csv); what the workload's owners must do
(restart the application) is GPUXidApplicationErrors, in workload_xids.py.
"""

from __future__ import annotations

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.exporter.catalog.xid import (
    INVESTIGATE_XIDS,
    REBOOT_XIDS,
    RESET_XIDS,
    WORKFLOW_XIDS,
)
from kube_gpu_exporter.rules.alerts import xid_events as xe
from kube_gpu_exporter.rules.promql import Query
from kube_gpu_exporter.rules.runbook_parts import (
    DRAIN,
    GPU_PODS,
    KERNEL_LOG,
    Runbook,
    find_node,
    on_node,
    promql,
    sh,
)
from kube_gpu_exporter.rules.settings.values import Severity
from kube_gpu_exporter.rules.spec import AlertSpec

BUG_REPORT = (
    "keep the node cordoned and open a hardware ticket with the output of "
    "`nvidia-bug-report.sh` (run on the node)"
)
REMAPPING = on_node("nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT")
HELD = on_node("nvidia-smi --query-compute-apps=pid,process_name --format=csv -i <gpu>")
UNCORDON = sh("kubectl uncordon $NODE")


def _meaning(a: xe.XidAlert, what: str) -> str:
    return (
        f"The driver reported an Xid (one of {xe.codes(a.xids)}) on the GPU in the last "
        f"{a.window}, and NVIDIA's Xid catalog answers it with: {what}\n\n"
        + xe.table(a.xids)
        + "\n\n"
        + xe.XID_NEW_SERIES
    )


# --- GPUXidErrors: reset the GPU -----------------------------------------------------------------


class ResetXidAlert(xe.XidAlert):
    severity: Severity = "critical"
    xids: xe.XidList = RESET_XIDS


def _reset_runbook(a: ResetXidAlert, q: Query) -> Runbook:
    return Runbook(
        meaning=_meaning(a, "reset the GPU (`RESET_GPU`)."),
        impact=(
            "Work on the GPU has failed or will: the GPU is not to be trusted until it is "
            "reset. The other GPUs of the node are not affected by the Xid itself."
        ),
        diagnosis="\n\n".join(
            (
                "Look first at which Xid it is, at what the GPU needs now "
                "(`nvidia_gpu_action_required`: its recovery action, its row remapper, and "
                "this Xid, source `xid`, held until the GPU is reset; no series: NVML cannot "
                "say), and whether other GPUs of the node report Xids too (then it is the "
                "node: see GPUXidRebootRequired):",
                promql(xe.counters(q), q.sel(c.ACTION_REQUIRED, 'uuid="<uuid>"')),
                find_node(q),
                KERNEL_LOG,
                REMAPPING,
            )
        ),
        mitigation=(
            "Cordon the node and move the GPU's pods off it (drain the node, or delete the "
            "pods holding the GPU):\n\n"
            + DRAIN
            + "\n\nCheck that no process holds the GPU any more, then reset it:\n\n"
            + HELD
            + "\n\n"
            + on_node("nvidia-smi -r -i <gpu>")
            + "\n\nUncordon once `nvidia-smi` shows the GPU healthy:\n\n"
            + UNCORDON
            + "\n\nThe exporter lets the Xid's `nvidia_gpu_action_required` go when it sees "
            "the reset (the GPU lost and back, or a new NVML session); where it did not, "
            "restart the exporter's pod on the node. If the reset fails, reboot the node. If "
            "the same Xid returns after a reset and a reboot, " + BUG_REPORT + "."
        ),
    )


GPU_XID_ERRORS = AlertSpec(
    name="GPUXidErrors",
    summary="A GPU reported an Xid that NVIDIA's catalog answers with a GPU reset.",
    settings=ResetXidAlert,
    rule=xe.rule("GPU-reset", "NVIDIA's Xid catalog says: drain the GPU and reset it."),
    cases=xe.xid_case,
    runbook=_reset_runbook,
    holders=True,
)

# --- GPUXidRebootRequired: reboot the node -------------------------------------------------------


class RebootXidAlert(xe.XidAlert):
    severity: Severity = "critical"
    xids: xe.XidList = REBOOT_XIDS


def _reboot_runbook(a: RebootXidAlert, q: Query) -> Runbook:
    return Runbook(
        meaning=_meaning(
            a,
            "restart the machine: the bare-metal node (`RESTART_BM`) or the virtual machine "
            "(`RESTART_VM`). A GPU reset is not enough.",
        ),
        impact=(
            "The GPU is gone or unusable until the node restarts (it usually also shows as "
            "GPULost); every pod on it has failed. With the generated inhibit rules the "
            "node's other Xid alerts stay silent while this fires: the reboot resets every "
            "GPU of the node."
        ),
        diagnosis="\n\n".join(
            (
                "Look first at whether the GPU still answers NVML and at the kernel log "
                "around the Xid (power, PCIe, thermal messages):",
                promql(xe.counters(q), q.sel(c.GPU_UP, 'uuid="<uuid>"')),
                find_node(q),
                KERNEL_LOG,
                GPU_PODS,
            )
        ),
        mitigation=(
            "Cordon and drain the node:\n\n"
            + DRAIN
            + "\n\nReboot it (a bare-metal node through its BMC when it does not come back; "
            "a virtual machine is restarted from its cloud or hypervisor):\n\n"
            + on_node("systemctl reboot")
            + "\n\nUncordon once `nvidia-smi` lists every GPU:\n\n"
            + UNCORDON
            + "\n\nIf the GPU falls off again after the reboot, "
            + BUG_REPORT
            + " (PCIe "
            "riser, power, or the GPU)."
        ),
    )


GPU_XID_REBOOT_REQUIRED = AlertSpec(
    name="GPUXidRebootRequired",
    summary="A GPU reported an Xid that NVIDIA's catalog answers with a node restart.",
    settings=RebootXidAlert,
    rule=xe.rule("node-restart", "NVIDIA's Xid catalog says: drain and restart the node."),
    cases=xe.xid_case,
    runbook=_reboot_runbook,
    holders=True,
)

# --- GPUXidWorkflow: follow the catalog's workflow -----------------------------------------------


class WorkflowXidAlert(xe.XidAlert):
    severity: Severity = "warning"
    xids: xe.XidList = WORKFLOW_XIDS


def _workflow_runbook(a: WorkflowXidAlert, q: Query) -> Runbook:
    return Runbook(
        meaning=_meaning(
            a,
            "a workflow (`WORKFLOW_*`) rather than one action: what to do depends on what "
            "else the GPU reports. Xid 154 says that the GPU's recovery action changed: the "
            "action is the one NVML reports (GPURecoveryActionRequired). Three codes ask for a "
            "hands-on step: 54 (`CHECK_MECHANICALS`: the board's auxiliary power), 78 "
            "(`UPDATE_SWFW`: a vGPU could not start) and 159 (`CHECK_UVM`: reset the GPU where "
            "UVM or vGPU is used, else nothing).",
        ),
        impact=(
            "Depends on the code: a double-bit ECC error (48) killed the process that read "
            "the memory; an NVLink error (74) stops the jobs that use the link."
        ),
        diagnosis="\n\n".join(
            (
                "Look first at the other Xids of the GPU within the same minutes (follow the "
                "alert for those) and at what NVML says it needs now (its recovery action and "
                "row remapper: `nvidia_gpu_action_required`):",
                promql(xe.counters(q), q.sel(c.ACTION_REQUIRED, 'uuid="<uuid>"')),
                find_node(q),
                KERNEL_LOG,
                REMAPPING,
                on_node("nvidia-smi nvlink -s -i <gpu>"),
            )
        ),
        mitigation=(
            "Follow the code's entry in NVIDIA's Xid catalog. In short: with a recovery "
            "action (GPURecoveryActionRequired), do what it asks; with a pending row "
            "remapping (48), drain and reset the GPU (`nvidia-smi -r -i <gpu>`, as in "
            "GPUXidErrors); with a failed remapping, " + BUG_REPORT + "; with NVLink "
            "errors (74) that persist, drain the node and reset its GPUs. A preemptive "
            "cleanup (45) is watched only where the thresholds file lists it: the catalog "
            "says to follow the Xid it came with, and for a 45 alone on an NVSwitch system "
            "to restart Fabric Manager.\n\n" + DRAIN
        ),
    )


GPU_XID_WORKFLOW = AlertSpec(
    name="GPUXidWorkflow",
    summary="A GPU reported an Xid that NVIDIA's catalog answers with a diagnosis workflow.",
    settings=WorkflowXidAlert,
    rule=xe.rule(
        "workflow",
        "NVIDIA's Xid catalog gives a workflow for it: check the GPU's other Xids, its "
        "recovery action and its row remapping.",
    ),
    cases=xe.xid_case,
    runbook=_workflow_runbook,
    holders=True,
)

# --- GPUXidInvestigate: nothing now, ask NVIDIA's support ----------------------------------------


class InvestigateXidAlert(xe.XidAlert):
    severity: Severity = "info"
    xids: xe.XidList = INVESTIGATE_XIDS


def _investigate_runbook(a: InvestigateXidAlert, q: Query) -> Runbook:
    return Runbook(
        meaning=_meaning(
            a,
            "nothing automatable: the catalog's immediate action is `CONTACT_SUPPORT` (most "
            "are codes no current GPU logs, so one seen is itself unexpected), or it answers "
            "with a sentence (power smoothing 163-165, confidential computing 166 and 170, "
            "168) or nothing (162, 167, 169, 171, 172) for a person to read.",
        ),
        impact=(
            "Usually none on the running work. Power smoothing exhausted (165) lets power "
            "swings reach the facility; 168 leaves the GPU with less memory until ECC is "
            "enabled or the node boots again."
        ),
        diagnosis="\n\n".join(
            (
                "Look first at the trend of corrected errors and at the memory's repair state:",
                promql(
                    "rate(" + q.sel(c.ECC_CORRECTED, 'uuid="<uuid>"') + "[1h])",
                    q.sel(c.ROW_REMAP_PENDING, 'uuid="<uuid>"'),
                ),
                find_node(q),
                REMAPPING,
            )
        ),
        mitigation=(
            "Read the code's entry in NVIDIA's Xid catalog ([xid-catalog.md](xid-catalog.md) "
            "lists every code). For `CONTACT_SUPPORT`, collect `nvidia-bug-report.sh` on the "
            "node and open a case with NVIDIA (or the server's vendor); if uncorrectable errors "
            "follow (GPUEccUncorrectable), treat it as they say."
        ),
    )


GPU_XID_INVESTIGATE = AlertSpec(
    name="GPUXidInvestigate",
    summary="A GPU reported an Xid that NVIDIA's catalog gives no automatable action for.",
    settings=InvestigateXidAlert,
    rule=xe.rule(
        "investigate",
        "Nothing automatable; NVIDIA's Xid catalog says to contact its support or read its entry.",
    ),
    cases=xe.xid_case,
    runbook=_investigate_runbook,
    holders=True,
)

SPECS = (GPU_XID_ERRORS, GPU_XID_REBOOT_REQUIRED, GPU_XID_WORKFLOW, GPU_XID_INVESTIGATE)
