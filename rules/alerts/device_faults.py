"""Device alerts, second part of group kube-gpu-exporter.devices: hardware faults — hardware
Xids, uncorrectable ECC errors, a GPU that stopped answering. Each usually means draining the
node and resetting the GPU, or an RMA.
"""

from __future__ import annotations

from pydantic import Field

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.exporter.catalog.xid import HARDWARE_XIDS
from kube_gpu_exporter.rules.alert_text import AlertText, device
from kube_gpu_exporter.rules.alerts import xid_events as xe
from kube_gpu_exporter.rules.promql import Query, agg
from kube_gpu_exporter.rules.promtool_cases import (
    Case,
    Firing,
    Series,
    World,
    edges,
    minutes,
    s,
    steady,
    uuid,
)
from kube_gpu_exporter.rules.runbook_parts import (
    DRAIN,
    GPU_PODS,
    KERNEL_LOG,
    NODE_GPUS,
    Runbook,
    find_node,
    on_node,
    promql,
)
from kube_gpu_exporter.rules.settings.alert import AlertSettings
from kube_gpu_exporter.rules.settings.values import Duration, Severity
from kube_gpu_exporter.rules.spec import AlertSpec

# --- GPUXidErrors --------------------------------------------------------------------------------


class HardwareXidAlert(xe.XidAlert):
    severity: Severity = "critical"
    xids: xe.XidList = HARDWARE_XIDS


def _xid_runbook(a: HardwareXidAlert, q: Query) -> Runbook:
    return Runbook(
        meaning=(
            f"The driver reported a hardware Xid (one of {xe.codes(a.xids)}) on "
            f"the GPU in the last {a.window}:\n\n" + xe.table(a.xids) + "\n\n" + xe.XID_NEW_SERIES
        ),
        impact=(
            "Work on the GPU has failed or will; several of these leave the GPU unusable "
            "until it is reset (79, 95, 119, 120) and some mean the hardware is failing "
            "(48, 64, 92)."
        ),
        diagnosis="\n\n".join(
            (
                promql(xe.counters(q), q.sel(c.GPU_UP, 'uuid="<uuid>"')),
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


GPU_XID_ERRORS = AlertSpec(
    name="GPUXidErrors",
    summary="A GPU reported a hardware Xid error.",
    settings=HardwareXidAlert,
    rule=xe.rule("hardware", "The GPU likely needs a reset, a node drain or an RMA."),
    cases=xe.xid_case,
    runbook=_xid_runbook,
    holders=True,
)

# --- GPUEccUncorrectable -------------------------------------------------------------------------


class EccAlert(AlertSettings):
    for_: Duration = Field(default="0m", alias="for")
    severity: Severity = "critical"
    window: Duration = "10m"


def _ecc_rule(a: EccAlert, q: Query) -> AlertText:
    errors = agg("max", q.device_display, f"increase({q.sel(c.ECC_UNCORRECTED)}[{a.window}])")
    return AlertText(
        f"{errors} > 0",
        f"{device(q)} counted uncorrectable (double-bit) ECC errors in the last {a.window}, "
        "over the threshold of 0. Data in its framebuffer was corrupted; the process that "
        "touched it was killed.",
    )


def _ecc_case(a: EccAlert, w: World) -> Case:
    held, span = minutes(a.for_), minutes(a.window)
    start = span + 10
    n = start + held + 10
    series = (
        s(c.ECC_UNCORRECTED, w.dev("a", 0), f"0+0x{start - 1} 1+1x{n}"),  # rising from `start`
        s(c.ECC_UNCORRECTED, w.dev("a", 1), steady(3, start + n)),  # old errors, flat
    )
    # GPU 0's first error is at `start`: nothing a minute before `for` has held, then it fires.
    return Case(series, edges(a.for_, (Firing(w.dev_out("a", 0), 0),), start))


def _ecc_runbook(a: EccAlert, q: Query) -> Runbook:
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
                on_node("nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT"),
            )
        ),
        mitigation=(
            "Drain the node and reset the GPU so that the row remapping takes effect:\n\n"
            + DRAIN
            + "\n\nIf `nvidia-smi -q -d ROW_REMAPPER` reports a remapping failure, or the "
            "errors come back after the reset, the GPU needs an RMA."
        ),
    )


GPU_ECC_UNCORRECTABLE = AlertSpec(
    name="GPUEccUncorrectable",
    summary="A GPU reported uncorrectable ECC memory errors.",
    settings=EccAlert,
    rule=_ecc_rule,
    cases=_ecc_case,
    runbook=_ecc_runbook,
    holders=True,
)

# --- GPULost -------------------------------------------------------------------------------------


class LostAlert(AlertSettings):
    for_: Duration = Field(default="1m", alias="for")
    severity: Severity = "critical"


def _lost_rule(a: LostAlert, q: Query) -> AlertText:
    whole_gpus = q.sel(c.GPU_UP, 'parent_uuid=""')  # a lost GPU's MIG instances go with it
    return AlertText(
        f"{whole_gpus} == 0",
        f"{device(q)} has not answered NVML for {a.for_} (nvidia_gpu_up is 0): it has "
        "fallen off the bus or needs a reset. Pods on it are failing.",
    )


# A lost GPU held by one pod of a Deployment: GPULost names the holder as the workload alerts
# do (`workload`), which is how the generated inhibit rule silences its idle alert.
LOST_HOLDER = {"namespace": "team-c", "pod": "train-x"}
LOST_HOLDER_OWNER = {"owner_kind": "Deployment", "owner_name": "train"}


def _lost_case(a: LostAlert, w: World) -> Case:
    n = minutes(a.for_) + 10
    mig = w.dev("a", 0) | {"uuid": "MIG-a-0-1", "parent_uuid": uuid("a", 0)}
    held = w.pod("a", 2, **LOST_HOLDER) | LOST_HOLDER_OWNER
    series = (
        s(c.GPU_UP, w.dev("a", 0), steady(0, n)),
        s(c.GPU_UP, mig, steady(0, n)),  # goes with its parent: no alert of its own
        s(c.GPU_UP, w.dev("a", 1), steady(1, n)),
        s(c.GPU_UP, w.dev("a", 2), steady(0, n)),
        Series(c.ALLOCATION_INFO.name, held, steady(1, n)),
    )
    holder = w.held_out("a", 2, **LOST_HOLDER, **LOST_HOLDER_OWNER)
    firing = (Firing(w.dev("a", 0), 0), Firing(w.dev("a", 2) | holder, 0, (LOST_HOLDER,)))
    return Case(series, edges(a.for_, firing))


def _lost_runbook(a: LostAlert, q: Query) -> Runbook:
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
                    xe.counters(q),
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


GPU_LOST = AlertSpec(
    name="GPULost",
    summary="A GPU stopped answering the driver.",
    settings=LostAlert,
    rule=_lost_rule,
    cases=_lost_case,
    runbook=_lost_runbook,
    holders=True,
)

SPECS = (GPU_XID_ERRORS, GPU_ECC_UNCORRECTABLE, GPU_LOST)
