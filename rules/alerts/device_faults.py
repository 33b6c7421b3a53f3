"""Device alerts, second part of group kube-gpu-exporter.devices: hardware faults —
uncorrectable ECC errors, a GPU that stopped answering. Each usually means draining the node
and resetting the GPU, or an RMA. The Xid alerts by action follow, in device_xids.py.
"""

from __future__ import annotations

from pydantic import Field

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.rules.alert_text import AlertText, device
from kube_gpu_exporter.rules.alerts import xid_events as xe
from kube_gpu_exporter.rules.promql import Query, agg, rose
from kube_gpu_exporter.rules.promtool_cases import (
    Case,
    Check,
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
    Runbook,
    find_node,
    on_node,
    promql,
)
from kube_gpu_exporter.rules.settings.alert import AlertSettings
from kube_gpu_exporter.rules.settings.values import Duration, Severity
from kube_gpu_exporter.rules.spec import AlertSpec

# --- GPUEccUncorrectable -------------------------------------------------------------------------


class EccAlert(AlertSettings):
    for_: Duration = Field(default="0m", alias="for")
    severity: Severity = "critical"
    window: Duration = "10m"


def _ecc_rule(a: EccAlert, q: Query) -> AlertText:
    errors = agg("max", q.device_display, f"\n{rose(q.sel(c.ECC_UNCORRECTED), a.window)}\n")
    return AlertText(
        errors,
        f"{device(q)} counted uncorrectable (double-bit) ECC errors in the last {a.window}, "
        "over the threshold of 0. Data in its framebuffer was corrupted; the process that "
        "touched it was killed.",
    )


def _ecc_case(a: EccAlert, w: World) -> Case:
    """GPU 0's counter rises every minute from `start`, GPU 1's old errors stay flat, GPU 2
    counts one error at `start`: it fires to the last minute of the window after it, and not a
    minute longer, on both Prometheus generations (a left-open range alone loses that minute)."""
    held, span = minutes(a.for_), minutes(a.window)
    start = span + 10
    n = start + max(held, span) + 10
    series = (
        s(c.ECC_UNCORRECTED, w.dev("a", 0), f"0+0x{start - 1} 1+1x{n}"),  # rising from `start`
        s(c.ECC_UNCORRECTED, w.dev("a", 1), steady(3, start + n)),  # old errors, flat
        s(c.ECC_UNCORRECTED, w.dev("a", 2), f"3+0x{start - 1} {steady(4, n - start)}"),
    )
    rising = Firing(w.dev_out("a", 0), 0)
    once = held < span  # GPU 2's one error stays in the window long enough to outlast `for`
    firing = (rising, Firing(w.dev_out("a", 2), 0)) if once else (rising,)
    last = start + span - 1  # the last minute GPU 2's error is within the window
    ends = (Check(last, firing), Check(last + 1, (rising,))) if once else ()
    # The first errors are at `start`: nothing a minute before `for` has held, then it fires.
    return Case(series, (*edges(a.for_, firing, start), *ends))


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
        f"{agg('max', q.device_display, whole_gpus)} == 0",
        f"{device(q)} has not answered NVML for {a.for_} (nvidia_gpu_up is 0): it has "
        "fallen off the bus or needs a reset. Pods on it are failing.",
    )


# A lost GPU held by one pod of a Deployment: GPULost names the holder as the workload alerts
# do (`workload`), which is how the generated inhibit rule silences its idle alert.
LOST_HOLDER = {"namespace": "team-c", "pod": "train-x"}
LOST_HOLDER_OWNER = {"owner_kind": "Deployment", "owner_name": "train"}
# A lost time-sliced GPU: two pods of a Deployment, a bare pod and a Job's pod share it; and
# one that four pods of one Deployment share. GPULost fires once per workload.
Holder = tuple[str, str, dict[str, str]]  # namespace, pod, owner labels
LOST_SHARERS: tuple[Holder, ...] = (
    ("team-s", "serve-a", {"owner_kind": "Deployment", "owner_name": "serve"}),
    ("team-s", "serve-b", {"owner_kind": "Deployment", "owner_name": "serve"}),
    ("team-s", "notebook-z", {}),
    ("team-t", "eval-1", {"owner_kind": "Job", "owner_name": "eval"}),
)
LOST_REPLICAS: tuple[Holder, ...] = tuple(
    ("team-u", f"infer-{k}", {"owner_kind": "Deployment", "owner_name": "infer"}) for k in range(4)
)


def _lost_case(a: LostAlert, w: World) -> Case:
    n = minutes(a.for_) + 10
    mig = w.dev("a", 0) | {"uuid": "MIG-a-0-1", "parent_uuid": uuid("a", 0)}
    slice5 = {"uuid": "MIG-a-5-1", "parent_uuid": uuid("a", 5)}
    lone: Holder = (LOST_HOLDER["namespace"], LOST_HOLDER["pod"], LOST_HOLDER_OWNER)
    busy: Holder = ("team-w", "busy-0", {})  # on a GPU that answers: no alert
    on_gpu: tuple[tuple[int, tuple[Holder, ...]], ...] = (
        (2, (lone,)),
        (3, LOST_SHARERS),
        (4, LOST_REPLICAS),
        (6, (busy,)),
    )
    holds = [(gpu, ns, pod, owner) for gpu, holders in on_gpu for ns, pod, owner in holders]
    series = [
        s(c.GPU_UP, w.dev("a", 0), steady(0, n)),
        s(c.GPU_UP, mig, steady(0, n)),  # goes with its parent: no alert of its own
        s(c.GPU_UP, w.dev("a", 1), steady(1, n)),
        *(s(c.GPU_UP, w.dev("a", gpu), steady(0, n)) for gpu in (2, 3, 4, 5)),
        s(c.GPU_UP, w.dev("a", 5) | slice5, steady(0, n)),
        s(c.GPU_UP, w.dev("a", 6), steady(1, n)),
        Series(c.ALLOCATION_INFO.name, w.pod("a", 5, "team-v", "mig-0") | slice5, steady(1, n)),
    ]
    series += [
        Series(c.ALLOCATION_INFO.name, w.pod("a", gpu, ns, pod) | owner, steady(1, n))
        for gpu, ns, pod, owner in holds
    ]

    def pods(gpu: int) -> tuple[dict[str, str], ...]:
        """What the description lists: every pod on the GPU, by name."""
        found = ({"namespace": ns, "pod": pod} for g, ns, pod, _ in holds if g == gpu)
        return tuple(sorted(found, key=lambda p: p["pod"]))

    def workload(gpu: int, namespace: str, **owner: str) -> Firing:
        """GPULost of a workload with several pods on the GPU: no pod named."""
        labels = w.dev_out("a", gpu, namespace=namespace, workload=owner["owner_name"], **owner)
        return Firing(labels, 0, pods(gpu))

    def pod(gpu: int, namespace: str, name: str, **owner: str) -> Firing:
        return Firing(w.held_out("a", gpu, namespace, name, **owner), 0, pods(gpu))

    serve, eval_ = LOST_SHARERS[0][2], LOST_SHARERS[3][2]
    firing = (
        Firing(w.dev_out("a", 0), 0),
        pod(2, LOST_HOLDER["namespace"], LOST_HOLDER["pod"], **LOST_HOLDER_OWNER),
        workload(3, "team-s", **serve),
        pod(3, "team-s", "notebook-z"),
        pod(3, "team-t", "eval-1", **eval_),
        workload(4, "team-u", **LOST_REPLICAS[0][2]),
        pod(5, "team-v", "mig-0"),  # holds a MIG slice of the lost GPU
    )
    return Case(tuple(series), edges(a.for_, firing))


def _lost_runbook(a: LostAlert, q: Query) -> Runbook:
    return Runbook(
        meaning=(
            f"The exporter has read `nvidia_gpu_up 0` for the GPU for {a.for_}: NVML "
            "answers `GPU_IS_LOST` — the GPU fell off the PCIe bus (Xid 79) or is stuck "
            "needing a reset. Its MIG instances are lost with it. The other GPUs of the "
            "node keep reporting. The alert fires once per workload holding the GPU or one "
            "of its MIG slices (a time-sliced GPU's sharers: each workload, with its pod "
            "where it has one there), and once with no workload where nobody holds it."
        ),
        impact=(
            "Every pod on the GPU is failing or hung; the device plugin will mark it "
            "unhealthy, and the node advertises one GPU fewer (GPUPartiallyAdvertised). "
            "With the generated inhibit rules, the GPU's other alerts and the idle alert "
            "(GPUAllocatedIdle) of every workload that holds it stay silent while this "
            "fires — the workload's other GPUs included, since a job's other ranks wait "
            "on the lost one; an idle alert that still fires is sent once the workload "
            "no longer holds the lost GPU."
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
    per_workload=True,
)

SPECS = (GPU_ECC_UNCORRECTABLE, GPU_LOST)
