"""Device alerts, fourth part of group kube-gpu-exporter.devices: a GPU's NVLinks erroring.

Read from the per-link NVLink error counters of the batched field values. A GPU without NVLink
has no such series at all, so it never fires, rather than reading as a GPU without errors.
"""

from __future__ import annotations

from pydantic import Field

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.rules.alert_text import AlertText, device
from kube_gpu_exporter.rules.promql import Query, agg, counted_over
from kube_gpu_exporter.rules.promtool_cases import (
    Case,
    Firing,
    Labels,
    Series,
    World,
    bursts,
    edges_from,
    last_burst,
    minutes,
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

RECOVERY = 'type="recovery"'
NOT_RECOVERY = 'type!="recovery"'

# --- GPUNvlinkErrors -----------------------------------------------------------------------------


class NvlinkErrorsAlert(AlertSettings):
    """CRC and replay errors are corrected by resending; a recovery stops the link to retrain
    it, so any recovery counts (recovery_threshold 0) and the others only past `threshold`."""

    for_: Duration = Field(default="5m", alias="for")
    severity: Severity = "warning"
    window: Duration = "15m"
    threshold: int = Field(default=100, ge=0)  # CRC and replay errors per window, all links
    recovery_threshold: int = Field(default=0, ge=0)  # recoveries per window, all links


def _over(q: Query, a: NvlinkErrorsAlert, types: str, threshold: int) -> str:
    """Errors of these types in the window, summed over the GPU's links and types, where
    they are over `threshold`."""

    def total(rise: str) -> str:
        return agg("sum", q.device_display, rise)

    return counted_over(total, q.sel(c.NVLINK_ERRORS, types), a.window, str(threshold))


def _rule(a: NvlinkErrorsAlert, q: Query) -> AlertText:
    return AlertText(
        f"{_over(q, a, NOT_RECOVERY, a.threshold)}\n"
        f"or\n{_over(q, a, RECOVERY, a.recovery_threshold)}",
        f"The NVLinks of {device(q)} counted {{{{ $value | humanize }}}} errors in the last "
        f"{a.window}: more than {a.threshold} CRC and replay errors, or more than "
        f"{a.recovery_threshold} link recoveries, summed over its links. A link is degrading.",
    )


def _case(a: NvlinkErrorsAlert, w: World) -> Case:
    """GPU 0 just past `threshold` (spread over two links) and GPU 2 just past
    `recovery_threshold` fire; GPU 1 exactly at both does not, nor GPU 3 with old errors that
    no longer rise, nor GPU 4 without NVLink. Checked a minute before `for` has passed and at
    the minute it has, so a threshold, a comparison or a `for` off by a little fails. The
    errors stop once `for` has held: GPUs 0 and 2 fire to the last minute of the window after
    the last of them, and not a minute longer, on both Prometheus generations."""
    span, held = minutes(a.window), minutes(a.for_)
    start = span + 5  # a full window of flat counters first: old errors do not fire
    last = last_burst(start, span, held)
    n = last + span + 5
    t, r = a.threshold, a.recovery_threshold

    def errors(gpu: int, link: int, kind: str, per_window: int) -> Series:
        labels: Labels = w.dev("a", gpu, link=str(link), type=kind)
        if per_window == 0:
            return s(c.NVLINK_ERRORS, labels, steady(1234, n))
        return s(c.NVLINK_ERRORS, labels, bursts(per_window, start, span, n, last))

    over = t + 1
    series = (
        errors(0, 0, "crc_flit", over - over // 2),
        errors(0, 1, "crc_flit", over // 2),
        errors(0, 0, "recovery", 0),
        errors(1, 0, "crc_flit", t // 3),  # exactly `threshold`, in three types
        errors(1, 1, "crc_data", t // 3),
        errors(1, 0, "replay", t - 2 * (t // 3)),
        errors(1, 1, "recovery", r),  # exactly `recovery_threshold`
        errors(2, 0, "crc_flit", 0),
        errors(2, 1, "recovery", r + 1),
        *(errors(3, link, kind, 0) for link in (0, 1) for kind in ("crc_flit", "recovery")),
        s(c.TEMPERATURE, w.dev("a", 4), steady(60, n)),  # no NVLink: no error series
    )
    firing = (Firing(w.dev_out("a", 0), over), Firing(w.dev_out("a", 2), r + 1))
    return Case(series, (*edges_from(a.for_, firing, start), *window_ends(last, a.window, firing)))


def _runbook(a: NvlinkErrorsAlert, q: Query) -> Runbook:
    one = q.sel(c.NVLINK_ERRORS, 'uuid="<uuid>"')
    return Runbook(
        meaning=(
            f"The GPU's NVLink error counters rose within {a.window}, for {a.for_}: by more "
            f"than {a.threshold} CRC and replay errors, or by more than {a.recovery_threshold} "
            "recoveries, summed over its links. A CRC error (`crc_flit`, `crc_data`) is a "
            "flit that arrived corrupted and a replay is the link resending it: the data "
            "arrives intact and only bandwidth is lost, so a trickle is tolerated (NVIDIA's "
            "DCGM health check fails a link on CRC errors only at 100 a second). A recovery "
            "is the link stopping to retrain: its traffic stalls meanwhile, and recoveries "
            "that repeat come before the link goes down. That is why recoveries have their "
            "own, lower threshold: by default one is enough."
        ),
        impact=(
            "NCCL collectives and peer-to-peer copies over the link slow down (replays) or "
            "stall (recoveries); a link that goes down fails the jobs using it with Xid 74 and "
            "NCCL errors, and the GPU may need a reset. Usual causes: a badly seated GPU or "
            "NVLink bridge, a damaged connector or cable, a failing NVSwitch or baseboard."
        ),
        diagnosis="\n\n".join(
            (
                "Which links, and which kind of error:",
                promql(f"sum by (link, type) (increase({one}[{a.window}])) > 0"),
                find_node(q),
                "The driver's own view of each link: state, speed, error counters. Links 12 "
                "and up of an 18-link GPU have no per-link NVML field, so only `nvidia-smi` "
                "shows their errors:",
                on_node("nvidia-smi nvlink -s -i <gpu>", "nvidia-smi nvlink -e -i <gpu>"),
                KERNEL_LOG,
                GPU_PODS,
            )
        ),
        mitigation=(
            "Errors on one link of one GPU point at that GPU or its bridge; on the links of "
            "many GPUs of the node, at the NVSwitch side or the baseboard. Drain the node and "
            "have the GPU or bridge reseated, or the baseboard serviced; a count that keeps "
            "rising after that means an RMA. A link already down (`nvidia-smi nvlink -s` "
            "shows it inactive) needs the node drained now.\n\n" + DRAIN
        ),
    )


GPU_NVLINK_ERRORS = AlertSpec(
    name="GPUNvlinkErrors",
    summary="A GPU's NVLinks keep failing CRC checks or retraining.",
    settings=NvlinkErrorsAlert,
    rule=_rule,
    cases=_case,
    runbook=_runbook,
    holders=True,
)

SPECS = (GPU_NVLINK_ERRORS,)
