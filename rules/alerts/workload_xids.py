"""Workload alerts, second part of group kube-gpu-exporter.workloads: the Xids that NVIDIA's
Xid catalog answers with "restart the application" (`RESTART_APP`), for the workload's owners.
What the catalog asks of the platform team (reset, reboot, workflow, investigate) is in
device_xids.py; what all Xid alerts share is in xid_events.py.
"""

from __future__ import annotations

from kube_gpu_exporter.exporter.catalog.xid import APPLICATION_XIDS
from kube_gpu_exporter.rules.alerts import xid_events as xe
from kube_gpu_exporter.rules.promql import Query
from kube_gpu_exporter.rules.runbook_parts import KERNEL_LOG, Runbook, find_node, promql, who
from kube_gpu_exporter.rules.settings.values import Severity
from kube_gpu_exporter.rules.spec import AlertSpec


class ApplicationXidAlert(xe.XidAlert):
    severity: Severity = "info"
    xids: xe.XidList = APPLICATION_XIDS


def _xid_runbook(a: ApplicationXidAlert, q: Query) -> Runbook:
    return Runbook(
        meaning=(
            f"The driver reported an Xid (one of {xe.codes(a.xids)}) on the device in the "
            f"last {a.window} that NVIDIA's Xid catalog answers with: restart the application "
            "(`RESTART_APP`). The program on the GPU lost its context; the GPU goes on:\n\n"
            + xe.table(a.xids)
            + "\n\n"
            + xe.XID_NEW_SERIES
        ),
        impact=(
            "The program that faulted lost its CUDA context: its pod probably crashed or "
            "restarted. The GPU itself goes on. A contained ECC error (94) was the memory's "
            "fault, not the program's: the GPU is to be reset when convenient "
            "(GPURowRemapPending says when a row remapping waits for it). If the same GPU "
            "keeps producing them with different workloads, treat it as hardware and "
            "escalate (see GPUXidErrors)."
        ),
        diagnosis="\n\n".join(
            (
                promql(xe.counters(q)),
                who(q),
                find_node(q),
                "The driver's own message names the process:",
                KERNEL_LOG,
            )
        ),
        mitigation=(
            "Restart the application: delete its pod, or let its controller restart it "
            "(`kubectl -n <namespace> delete pod <pod>`). Tell the owner of the pod on the "
            "device: for most codes the fix is in their program (illegal "
            "memory access, mismatched CUDA and driver versions, a killed process). Check "
            "the pod's logs and restarts (`kubectl -n <namespace> describe pod <pod>`). "
            "Nothing needs doing to the node unless the errors follow the GPU across "
            "workloads."
        ),
    )


GPU_XID_APPLICATION_ERRORS = AlertSpec(
    name="GPUXidApplicationErrors",
    summary="A program on a GPU hit an Xid that NVIDIA's catalog answers with its restart.",
    settings=ApplicationXidAlert,
    rule=xe.rule(
        "restart-the-application",
        "NVIDIA's Xid catalog says: restart the application. Usually a fault of the program "
        "on the GPU (illegal memory access, MMU fault); see which pod holds it.",
    ),
    cases=xe.xid_case,
    runbook=_xid_runbook,
    holders=True,
)

SPECS = (GPU_XID_APPLICATION_ERRORS,)
