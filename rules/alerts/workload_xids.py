"""Workload alerts, second part of group kube-gpu-exporter.workloads: Xid errors that are the
fault of the program on the GPU, not of the hardware (the hardware ones are GPUXidErrors, in
device_faults.py; what both share is in xid_events.py).
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
            f"The driver reported an application Xid (one of {xe.codes(a.xids)}) "
            f"on the device in the last {a.window}. These are faults of the program running "
            "on the GPU, not of the hardware:\n\n" + xe.table(a.xids) + "\n\n" + xe.XID_NEW_SERIES
        ),
        impact=(
            "The program that faulted lost its CUDA context: its pod probably crashed or "
            "restarted. The GPU itself is fine. If the same GPU keeps producing them with "
            "different workloads, treat it as hardware and escalate (see GPUXidErrors)."
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
            "Tell the owner of the pod on the device: the fix is in their program (illegal "
            "memory access, mismatched CUDA and driver versions, a killed process). Check "
            "the pod's logs and restarts (`kubectl -n <namespace> describe pod <pod>`). "
            "Nothing needs doing to the node unless the errors follow the GPU across "
            "workloads."
        ),
    )


GPU_XID_APPLICATION_ERRORS = AlertSpec(
    name="GPUXidApplicationErrors",
    summary="A program on a GPU hit an Xid error of its own making.",
    settings=ApplicationXidAlert,
    rule=xe.rule(
        "application",
        "These are usually a fault of the program on the GPU (illegal memory access, MMU "
        "fault, stopped context); see which pod holds it.",
    ),
    cases=xe.xid_case,
    runbook=_xid_runbook,
    holders=True,
)

SPECS = (GPU_XID_APPLICATION_ERRORS,)
