"""Node alerts, second part of group kube-gpu-exporter.nodes: GPUs gone from NVML's list.

GPULost speaks for a GPU NVML still lists but cannot reach (`nvidia_gpu_up 0`). Once the
exporter or the node restarts, NVML lists such a GPU no more, and a GPU the driver failed to
initialise at boot was never listed: no device series is left to alert on. What is left is a
count that is too small — against the GPUs on the PCI bus, which the exporter reads from sysfs
without the driver, and against what NVML listed lately.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.rules.alert_text import AlertText, where
from kube_gpu_exporter.rules.promql import Query, agg
from kube_gpu_exporter.rules.promtool_cases import (
    Case,
    Check,
    Firing,
    Series,
    World,
    minutes,
    s,
    steady,
)
from kube_gpu_exporter.rules.runbook_parts import DRAIN, Runbook, find_node, on_node, promql
from kube_gpu_exporter.rules.settings.alert import AlertSettings
from kube_gpu_exporter.rules.settings.values import Duration, PositiveDuration, duration_seconds
from kube_gpu_exporter.rules.spec import AlertSpec

# The margin `window` must leave beyond `for`, in seconds: see MissingAlert.
WINDOW_MARGIN_SECONDS = 600


class MissingAlert(AlertSettings):
    for_: Duration = Field(default="10m", alias="for")
    # How long a GPU count that dropped is remembered: the (b) half of the rule fires for a
    # GPU gone from NVML and from the bus alike, and resolves this long after the drop.
    window: PositiveDuration = "1d"

    @model_validator(mode="after")
    def _window_past_for(self) -> MissingAlert:
        # A drop must still be in the window once `for` has passed, or (b) never fires.
        if duration_seconds(self.window) < duration_seconds(self.for_) + WINDOW_MARGIN_SECONDS:
            raise ValueError(
                f"window: must be at least `for` ({self.for_}) + 10m (got {self.window!r})"
            )
        return self


def _missing_expr(a: MissingAlert, q: Query) -> str:
    """GPUs missing from NVML per node: (a) against the PCI bus, else (b) against the most
    NVML listed within the window; only while NVML answers (else NVML lists none at all)."""
    driver = agg("max", q.node, q.sel(c.NODE_DRIVER_GPUS))
    pci = agg("max", q.node, q.sel(c.NODE_PCI_GPUS))
    recent = agg("max", q.node, f"max_over_time({q.sel(c.NODE_DRIVER_GPUS)}[{a.window}])")
    minus = f"  - {q.on(q.node)}\n"
    nvml_up = agg("max", q.node, q.sel(c.NVML_UP))
    return (
        f"(\n{pci}\n{minus}{driver}\n  > 0\nor\n{recent}\n{minus}{driver}\n  > 0\n)\n"
        f"and {q.on(q.node)} {nvml_up} == 1"
    )


def _missing_rule(a: MissingAlert, q: Query) -> AlertText:
    return AlertText(
        _missing_expr(a, q),
        f"NVML {where(q)} lists {{{{ $value | humanize }}}} GPU(s) fewer than the node has on "
        f"its PCI bus, or than it listed in the last {a.window}, for {a.for_}: a GPU fell off "
        "the bus or the driver failed to initialise it. No nvidia_gpu_up series is left for "
        "it, so GPULost cannot say so.",
    )


def _node(w: World, node: str, driver: str, pci: str, nvml_up: str) -> tuple[Series, ...]:
    """A node's three series: GPUs in NVML, GPUs on the PCI bus, NVML up."""
    labels = w.node(node)
    return (
        s(c.NODE_DRIVER_GPUS, labels, driver),
        s(c.NODE_PCI_GPUS, labels, pci),
        s(c.NVML_UP, labels, nvml_up),
    )


def _missing_case(a: MissingAlert, w: World) -> Case:
    """Every difference is one GPU, so `> 1` for `> 0` fails the test as `>= 0` does (node c).
    The checks sit a minute before `for` has passed and the minute it has (Prometheus fires
    once `for` has passed, not after it), and about the window's end as close as holds on
    Prometheus 2 (whose ranges include their start) and 3 (whose ranges do not)."""
    held, window = minutes(a.for_), minutes(a.window)
    drop = 10  # the minute nodes a and b lose a GPU
    # The window's end is probed only for windows up to 6h: promtool evaluates every rule of
    # the file over the whole span of a case, and the default day would cost each promtool run
    # of the generated tests ~15 s. The tests' other configurations use shorter windows.
    probe_end = window <= 6 * 60
    n = drop + (window if probe_end else held + 2) + 10
    after = n - drop
    series = (
        # a: NVML drops a GPU the PCI bus still has — (a) and (b) hold; (a) outlasts the window
        *_node(w, "a", f"8+0x{drop - 1} 7+0x{after}", steady(8, n), steady(1, n)),
        # b: a GPU gone from the bus too, seen after a 2-minute restart of the node: (b) alone
        *_node(
            w,
            "b",
            f"8+0x{drop - 1} _x2 7+0x{after}",
            f"8+0x{drop - 1} _x2 7+0x{after}",
            f"1+0x{drop - 1} _x2 1+0x{after}",
        ),
        # c: whole — equal counts never fire
        *_node(w, "c", steady(8, n), steady(8, n), steady(1, n)),
        # d: NVML down from minute 5 (no GPU listed at all): KubeGpuExporterNvmlDown speaks
        *_node(w, "d", f"8+0x4 0+0x{n - 5}", steady(8, n), f"1+0x4 0+0x{n - 5}"),
    )
    a_fires, b_fires = Firing(w.node_out("a"), 1), Firing(w.node_out("b"), 1)
    checks = [Check(drop - 1, ())]  # before the drop nothing is missing
    if held:
        checks.append(Check(drop + held - 1, ()))  # a pending since `drop`
    checks += [
        Check(drop + held, (a_fires,)),  # b pending: its count is back only at drop + 2
        Check(drop + 2 + held, (a_fires, b_fires)),
    ]
    if probe_end:
        checks += [
            # b's last count of 8 (minute drop - 1) still within the window ...
            Check(drop - 1 + window - 1, (a_fires, b_fires)),
            # ... and out of it: (b) forgets b, while (a) keeps a firing
            Check(drop + window, (a_fires,)),
        ]
    return Case(series, tuple(checks))


def _missing_runbook(a: MissingAlert, q: Query) -> Runbook:
    driver = q.sel(c.NODE_DRIVER_GPUS, f'{q.node_label}="<{q.node_label}>"')
    pci = q.sel(c.NODE_PCI_GPUS, f'{q.node_label}="<{q.node_label}>"')
    return Runbook(
        meaning=(
            "NVML on the node lists fewer GPUs (`nvidia_gpu_node_driver_gpus`) than (a) the "
            "node has on its PCI bus (`nvidia_gpu_node_pci_gpus`, which the exporter reads "
            "from sysfs without the driver), or (b) than NVML itself listed at some point in "
            f"the last {a.window}. A GPU NVML does not list has no `nvidia_gpu_up` series, so "
            "GPULost cannot fire for it: this is what is left of a GPU that fell off the bus "
            "(Xid 79) once the exporter or the node restarted, and of a GPU the driver failed "
            "to initialise at boot (lspci shows it, nvidia-smi does not). (a) lasts as long as "
            "the GPU stays on the bus. (b) also catches a GPU that left the bus altogether — "
            "after a reboot the kernel no longer enumerates it — but it forgets after "
            f"{a.window}: the alert then resolves although the GPU is still missing. The "
            "alert holds back while NVML is down (KubeGpuExporterNvmlDown speaks then); "
            "`nvidia_gpu_node_driver_gpus` is served with the exporter's pod attribution, "
            "which the generated DaemonSet always turns on."
        ),
        impact=(
            "The node runs with fewer GPUs than it has: the device plugin advertises only what "
            "NVML lists, so a pod that asks for all of the node's GPUs (a multi-GPU training "
            "job) stays Pending, and the work that was on the GPU when it went has failed. A "
            "GPU that fell off the bus once usually does again: it needs hardware attention."
        ),
        diagnosis="\n\n".join(
            (
                promql(pci, driver, f"max_over_time({driver}[{a.window}])"),
                find_node(q),
                "Does the kernel see the GPU, and does the driver? Count the NVIDIA display "
                "and 3D controllers (`lspci -d 10de::0302`; class 0300 for a GPU in graphics "
                "mode), the GPUs nvidia-smi lists, and read the kernel log:",
                on_node(
                    "lspci -d 10de: -nn",
                    "nvidia-smi -L",
                    "dmesg -T | grep -i -e NVRM -e xid -e 'fallen off' -e RmInitAdapter",
                ),
                "lspci shows the GPU but nvidia-smi does not: the driver could not initialise "
                "it (`RmInitAdapter failed`, `GPU has fallen off the bus`). lspci shows it as "
                "`rev ff`: its configuration space reads all ones, it fell off the bus. lspci "
                "does not show it: the GPU left the bus (a PCIe link or power fault); the "
                "BMC's event log (`ipmitool sel list`) often names the slot.",
            )
        ),
        mitigation=(
            "Cordon and drain the node, then power-cycle it through the BMC: a warm reboot "
            "often does not bring back a GPU that fell off the bus.\n\n"
            + DRAIN
            + "\n\nIf the GPU is still missing after the power cycle, or comes back and falls "
            "off again, keep the node cordoned and open a hardware ticket (GPU, riser, power "
            "cable) with the output of `nvidia-bug-report.sh`. A node that runs without a GPU "
            "on purpose (taken out for an RMA): silence the alert for the node; when the GPU "
            f"is also gone from the bus the alert resolves by itself after {a.window}."
        ),
    )


GPU_MISSING = AlertSpec(
    name="GPUMissing",
    summary="A node's NVML lists fewer GPUs than it has on its PCI bus or had lately.",
    settings=MissingAlert,
    rule=_missing_rule,
    cases=_missing_case,
    runbook=_missing_runbook,
)

SPECS = (GPU_MISSING,)
