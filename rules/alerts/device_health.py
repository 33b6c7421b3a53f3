"""Device alerts, third part of group kube-gpu-exporter.devices: what the driver's own health
fields say — a row remapping waiting for a reset or failed, a recovery the driver asks for,
a PCIe link that retransmits. Read from the batched field values; a GPU or driver without the
field has no series, so these alerts stay silent there rather than guess.
"""

from __future__ import annotations

from pydantic import Field

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.rules.alert_text import AlertText, device
from kube_gpu_exporter.rules.promql import Query, agg, counted_over, settled
from kube_gpu_exporter.rules.promtool_cases import (
    Case,
    Check,
    Firing,
    World,
    bursts,
    edges,
    edges_from,
    minutes,
    ramp,
    ramp_over,
    s,
    steady,
    window_ends,
)
from kube_gpu_exporter.rules.runbook_parts import (
    DRAIN,
    GPU_PODS,
    KERNEL_LOG,
    Runbook,
    find_node,
    on_node,
    promql,
)
from kube_gpu_exporter.rules.settings.alert import AlertSettings
from kube_gpu_exporter.rules.settings.values import Duration, Severity
from kube_gpu_exporter.rules.spec import AlertSpec

ROW_REMAPPER = on_node("nvidia-smi -q -d ROW_REMAPPER,PAGE_RETIREMENT,ECC")


def _raised_case(metric: c.Metric, for_: str, w: World, raised: int = 1) -> Case:
    """GPU 0 raises the field from 0 to `raised` at minute 5, GPU 1 keeps it at 0: only GPU 0
    fires, exactly when `for` has held after the rise — with no `for`, at the very minute of
    the rise (a `for` of a minute would miss that check)."""
    start = 5
    held = minutes(for_)
    n = start + held + 10
    series = (
        s(metric, w.dev("a", 0), f"0+0x{start - 1} {raised}+0x{n}"),
        s(metric, w.dev("a", 1), steady(0, start + n)),
    )
    firing = (Firing(w.dev_out("a", 0), raised),)
    return Case(series, edges_from(for_, firing, start))


# --- GPURowRemapPending --------------------------------------------------------------------------


class RemapPendingAlert(AlertSettings):
    for_: Duration = Field(default="5m", alias="for")
    severity: Severity = "warning"


def _pending_rule(a: RemapPendingAlert, q: Query) -> AlertText:
    return AlertText(
        f"{agg('max', q.device_display, q.sel(c.ROW_REMAP_PENDING))} == 1",
        f"{device(q)} has a memory row remapping waiting for a GPU reset (for {a.for_}): "
        "until the reset the failing row stays in use and can corrupt data again.",
    )


def _pending_runbook(a: RemapPendingAlert, q: Query) -> Runbook:
    return Runbook(
        meaning=(
            "The driver remapped a failing framebuffer row to a spare after memory errors, "
            f"and the remapping only takes effect at the next GPU reset (pending for {a.for_})."
        ),
        impact=(
            "Until the reset the faulty row is still used: more uncorrectable errors (Xid 48, "
            "94, 95) and killed processes are likely. The GPU is otherwise usable."
        ),
        diagnosis="\n\n".join(
            (
                promql(
                    q.sel(c.ROW_REMAP_PENDING, 'uuid="<uuid>"'),
                    q.sel(c.REMAPPED_ROWS, 'uuid="<uuid>"'),
                ),
                find_node(q),
                ROW_REMAPPER,
            )
        ),
        mitigation=(
            "At the next convenient moment drain the node and reset the GPU "
            "(`nvidia-smi -r -i <gpu>` once no process holds it) or reboot the node:\n\n" + DRAIN
        ),
    )


GPU_ROW_REMAP_PENDING = AlertSpec(
    name="GPURowRemapPending",
    summary="A GPU needs a reset for a memory row remapping to take effect.",
    settings=RemapPendingAlert,
    rule=_pending_rule,
    cases=lambda a, w: _raised_case(c.ROW_REMAP_PENDING, a.for_, w),
    runbook=_pending_runbook,
    holders=True,
)

# --- GPURowRemapFailed ---------------------------------------------------------------------------


class CriticalAtOnce(AlertSettings):
    """A state the driver reports that needs action now: critical, no `for`."""

    for_: Duration = Field(default="0m", alias="for")
    severity: Severity = "critical"


def _failed_rule(a: CriticalAtOnce, q: Query) -> AlertText:
    return AlertText(
        f"{agg('max', q.device_display, q.sel(c.ROW_REMAP_FAILED))} == 1",
        f"{device(q)} failed to remap a failing memory row (nvidia_gpu_row_remap_failed is 1: "
        "no spare row left): the GPU needs service.",
    )


def _failed_runbook(a: CriticalAtOnce, q: Query) -> Runbook:
    return Runbook(
        meaning=(
            "The driver could not remap a failing framebuffer row: the bank has no spare "
            "row left. NVIDIA's guidance for this state is to take the GPU out of service."
        ),
        impact=(
            "Memory errors on that row will recur and kill the processes that touch it; a "
            "reset does not help."
        ),
        diagnosis="\n\n".join(
            (
                promql(
                    q.sel(c.ROW_REMAP_FAILED, 'uuid="<uuid>"'),
                    q.sel(c.REMAPPED_ROWS, 'uuid="<uuid>"'),
                ),
                find_node(q),
                ROW_REMAPPER,
            )
        ),
        mitigation=(
            "Cordon and drain the node, keep it cordoned, and open a hardware ticket (RMA) "
            "with the output of `nvidia-bug-report.sh`:\n\n" + DRAIN
        ),
    )


GPU_ROW_REMAP_FAILED = AlertSpec(
    name="GPURowRemapFailed",
    summary="A GPU ran out of spare memory rows: it needs an RMA.",
    settings=CriticalAtOnce,
    rule=_failed_rule,
    cases=lambda a, w: _raised_case(c.ROW_REMAP_FAILED, a.for_, w),
    runbook=_failed_runbook,
    holders=True,
)

# --- GPURecoveryActionRequired -------------------------------------------------------------------


def _recovery_rule(a: CriticalAtOnce, q: Query) -> AlertText:
    return AlertText(
        f"{agg('max', q.device_display, q.sel(c.RECOVERY_ACTION))} > 0",
        f"The driver asks for recovery action {{{{ $value | humanize }}}} on {device(q)} "
        "(1 GPU reset, 2 node reboot, 3 drain peer-to-peer, 4 drain and reset): the GPU "
        "cannot be trusted until it is done.",
    )


def _recovery_case(a: CriticalAtOnce, w: World) -> Case:
    """GPU 0 asks for a node reboot (2) from minute 5; GPU 1 asks for nothing (0)."""
    return _raised_case(c.RECOVERY_ACTION, a.for_, w, raised=2)


def _recovery_runbook(a: CriticalAtOnce, q: Query) -> Runbook:
    return Runbook(
        meaning=(
            "The driver (R570 and later) reports through NVML_FI_DEV_GET_GPU_RECOVERY_ACTION "
            "that the GPU needs a recovery step: 1 a GPU reset, 2 a node reboot, 3 draining "
            "peer-to-peer traffic, 4 a drain and reset."
        ),
        impact="Work on the GPU is failing or will fail until the action is taken.",
        diagnosis="\n\n".join(
            (
                promql(q.sel(c.RECOVERY_ACTION, 'uuid="<uuid>"'), q.sel(c.GPU_UP)),
                find_node(q),
                KERNEL_LOG,
                GPU_PODS,
            )
        ),
        mitigation=(
            "Drain the node, then do what the value asks: `nvidia-smi -r -i <gpu>` for 1 and 4, "
            "a reboot for 2, stopping the peer-to-peer jobs for 3.\n\n" + DRAIN
        ),
    )


GPU_RECOVERY_ACTION_REQUIRED = AlertSpec(
    name="GPURecoveryActionRequired",
    summary="The driver asks for a GPU reset, a drain or a node reboot.",
    settings=CriticalAtOnce,
    rule=_recovery_rule,
    cases=_recovery_case,
    runbook=_recovery_runbook,
    holders=True,
)

# --- GPUPcieReplayErrors -------------------------------------------------------------------------


class PcieReplayAlert(AlertSettings):
    for_: Duration = Field(default="15m", alias="for")
    severity: Severity = "warning"
    window: Duration = "15m"
    threshold: int = Field(default=10, ge=0)  # replays per window


def _replay_rule(a: PcieReplayAlert, q: Query) -> AlertText:
    def total(rise: str) -> str:
        return settled(agg("max", q.device_display, rise))

    return AlertText(
        counted_over(total, q.sel(c.PCIE_REPLAYS), a.window, str(a.threshold)),
        f"{device(q)} retransmitted {{{{ $value | humanize }}}} PCIe packets in the last "
        f"{a.window}, over the threshold of {a.threshold}, for {a.for_}: its PCIe link is "
        "degrading.",
    )


def _replay_case(a: PcieReplayAlert, w: World) -> Case:
    """Replays at a steady rate, a window's worth by minute `full` (after a window without
    any): GPU 0 retransmits one packet more than the threshold per window (fires: replays are
    whole packets, and any higher threshold leaves it silent), GPU 2 exactly the threshold
    (not over it: silent), GPU 1 has old replays and no new ones. A steady rise counts the
    same on Prometheus 2's closed range and 3's left-open one (promtool_cases.ramp); GPU 0 is
    over the threshold from the minute its ramp passes it, and `for` is checked from there;
    GPU 2 reaches the threshold at `full`, checked `for` after. Where `for` is shorter than
    the window, GPU 3 then retransmits one packet more than the threshold at once: it fires to
    the last minute of the window after, and not a minute longer, on both generations."""
    held, span = minutes(a.for_), minutes(a.window)
    full = 2 * span + 5
    burst = full + held + 1  # GPU 3's replays, after the checks of GPUs 0 and 2
    n = burst + span + 10
    over = a.threshold + 1
    series = [
        s(c.PCIE_REPLAYS, w.dev("a", 0), ramp(over, full, span, n)),
        s(c.PCIE_REPLAYS, w.dev("a", 1), steady(5, n)),  # old replays, none new
        s(c.PCIE_REPLAYS, w.dev("a", 2), ramp(a.threshold, full, span, n)),
    ]
    start = ramp_over(over, full, span, a.threshold)
    fired = min(start + held, full)  # the ramp's increase is `over` from `full` on
    value = over * (fired - (full - span)) / span
    # GPU 2 is exactly at the threshold from `full`: it would fire `for` later under `>=`.
    steadily = (Firing(w.dev_out("a", 0), over),)
    checks = [
        *edges(a.for_, (Firing(w.dev_out("a", 0), value),), start),
        Check(full + held, steadily),
    ]
    if held < span:  # the burst stays in the window long enough to outlast `for`
        series.append(s(c.PCIE_REPLAYS, w.dev("a", 3), bursts(over, burst, n + 1, n)))
        checks += window_ends(
            burst, a.window, (*steadily, Firing(w.dev_out("a", 3), over)), steadily
        )
    return Case(tuple(series), tuple(checks))


def _replay_runbook(a: PcieReplayAlert, q: Query) -> Runbook:
    replays_of_one = q.sel(c.PCIE_REPLAYS, 'uuid="<uuid>"')
    return Runbook(
        meaning=(
            f"The GPU's PCIe replay counter rose by more than {a.threshold} in {a.window}, "
            f"for {a.for_}: link-level packets failed their CRC and were sent again."
        ),
        impact=(
            "Host↔GPU transfers slow down; a link that keeps degrading ends in Xid 79 (fallen "
            "off the bus). Usual causes: a riser or cable, a badly seated card, PCIe "
            "power management, a marginal slot."
        ),
        diagnosis="\n\n".join(
            (
                promql(f"rate({replays_of_one}[{a.window}])"),
                find_node(q),
                on_node(
                    "nvidia-smi -q -d PCIE",
                    "lspci -vvv -s <pci_bus_id> | grep -E 'LnkSta|CESta|UESta'",
                ),
            )
        ),
        mitigation=(
            "If the link runs below its expected width or speed, or the rate keeps rising, "
            "drain the node and have the card reseated or the riser replaced; a replay count "
            "that rises after that points at the slot or the GPU (RMA).\n\n" + DRAIN
        ),
    )


GPU_PCIE_REPLAY_ERRORS = AlertSpec(
    name="GPUPcieReplayErrors",
    summary="A GPU's PCIe link keeps retransmitting packets.",
    settings=PcieReplayAlert,
    rule=_replay_rule,
    cases=_replay_case,
    runbook=_replay_runbook,
    holders=True,
)

SPECS = (
    GPU_ROW_REMAP_PENDING,
    GPU_ROW_REMAP_FAILED,
    GPU_RECOVERY_ACTION_REQUIRED,
    GPU_PCIE_REPLAY_ERRORS,
)
