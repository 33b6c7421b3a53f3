"""Node alerts (group kube-gpu-exporter.nodes): what the kubelet offers versus what the driver
sees, and drivers that differ across the fleet.

The advertised-device alerts count every GPU resource (`nvidia.com/gpu`, MIG resources,
replicas, DRA) and hold back while the exporter cannot reach pod-resources, where
KubeGpuExporterPodResourcesDown speaks instead.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import Field

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.rules.alert_text import AlertText, in_cluster, where
from kube_gpu_exporter.rules.promql import Query, agg
from kube_gpu_exporter.rules.promtool_cases import (
    Case,
    Check,
    Firing,
    Series,
    World,
    edges,
    later,
    minutes,
    s,
    steady,
)
from kube_gpu_exporter.rules.runbook_parts import NODE_GPUS, Runbook, find_node, promql, sh
from kube_gpu_exporter.rules.settings.alert import AlertSettings
from kube_gpu_exporter.rules.settings.values import Duration, Severity
from kube_gpu_exporter.rules.spec import AlertSpec


def _driver_and_advertised(q: Query) -> tuple[str, str]:
    """GPUs the driver sees per node, and devices the kubelet advertises per node."""
    driver = agg("max", q.node, q.sel(c.NODE_DRIVER_GPUS))
    return driver, agg("sum", q.node, q.sel(c.NODE_ADVERTISED))


def _advertised_guard(q: Query) -> str:
    """Only while pod-resources answers: otherwise KubeGpuExporterPodResourcesDown says it."""
    return f"and {q.on(q.node)} {q.sel(c.POD_RESOURCES_UP)} == 1"


def _node_series(
    w: World, n: int, nodes: Mapping[str, tuple[int, Mapping[str, int], int]]
) -> tuple[Series, ...]:
    """Per node: (driver GPUs, advertised devices by resource, pod-resources up)."""
    out: list[Series] = []
    for node, (gpus, advertised, up) in nodes.items():
        out.append(s(c.NODE_DRIVER_GPUS, w.node(node), steady(gpus, n)))
        out.append(s(c.POD_RESOURCES_UP, w.node(node), steady(up, n)))
        for resource, count in advertised.items():
            labels = w.node(node) | {"resource": resource}
            out.append(s(c.NODE_ADVERTISED, labels, steady(count, n)))
    return tuple(out)


def _allocatable(*more: str) -> str:
    """The runbooks' kubectl: what the node offers, then `more`."""
    return sh("kubectl get node $NODE -o jsonpath='{.status.allocatable}'; echo", *more)


# --- GPUNotAdvertised ----------------------------------------------------------------------------


class NotAdvertisedAlert(AlertSettings):
    for_: Duration = Field(default="10m", alias="for")


def _not_advertised_rule(a: NotAdvertisedAlert, q: Query) -> AlertText:
    driver, advertised = _driver_and_advertised(q)
    return AlertText(
        # Only where the kubelet said what it advertises: an exporter serves no advertised
        # series where the kubelet cannot list allocatable devices (before 1.21, or with the
        # feature gate off) and a 0 where it lists none.
        f"{driver} > 0\nunless {q.on(q.node)}\n{advertised} > 0\n"
        f"and {q.on(q.node)}\n{advertised}\n{_advertised_guard(q)}",
        f"The NVIDIA driver {where(q)} sees {{{{ $value | humanize }}}} GPUs but the kubelet "
        f"has advertised no GPU device (nvidia.com/gpu, MIG or DRA resources) for {a.for_}: "
        "the device plugin is down, so no GPU pod can be scheduled on the node.",
    )


def _not_advertised_case(a: NotAdvertisedAlert, w: World) -> Case:
    n = minutes(a.for_) + 10
    nodes = {
        "a": (8, {"nvidia.com/gpu": 0}, 1),  # device plugin gone
        "b": (2, {"nvidia.com/mig-1g.10gb": 14}, 1),  # MIG: more devices than GPUs
        "c": (4, {}, 0),  # pod-resources down: that alert speaks instead
        "d": (8, {"nvidia.com/gpu": 0, "nvidia.com/mig-1g.10gb": 0}, 1),  # nothing at all
        "e": (8, {}, 1),  # a kubelet that cannot list allocatable devices: unknown, silent
        # The exporter on a node whose driver sees no GPU, which advertises none: nothing is
        # missing (the driver must see more than 0 GPUs, not at least 0).
        "f": (0, {"nvidia.com/gpu": 0}, 1),
    }
    firing = (Firing(w.node_out("a"), 8), Firing(w.node_out("d"), 8))
    return Case(_node_series(w, n, nodes), edges(a.for_, firing))


def _not_advertised_runbook(a: NotAdvertisedAlert, q: Query) -> Runbook:
    return Runbook(
        meaning=(
            "The NVIDIA driver on the node sees GPUs, but for "
            f"{a.for_} the kubelet has advertised no GPU device at all — under any "
            "resource: `nvidia.com/gpu`, MIG resources such as `nvidia.com/mig-1g.10gb`, "
            "shared replicas, or DRA. Counting every resource is what makes the rule right "
            "with MIG and time-slicing, where the number of devices is not the number of "
            "GPUs: zero devices while the driver sees GPUs is wrong in every setup. (For a "
            "node that advertises some devices but too few, see GPUPartiallyAdvertised.) "
            "The rule holds back while the exporter cannot reach pod-resources, and on "
            "kubelets that cannot list allocatable devices (before 1.21, or 1.21–1.22 with "
            "the KubeletPodResourcesGetAllocatable gate off: no advertised series), since "
            "then it cannot tell; a kubelet that refuses the listing for another reason "
            "raises KubeGpuExporterAllocatableRefused instead."
        ),
        impact="No GPU pod can be scheduled on the node: its GPUs sit idle, unbilled.",
        diagnosis="\n\n".join(
            (
                promql(q.sel(c.NODE_DRIVER_GPUS), q.sel(c.NODE_ADVERTISED)),
                find_node(q),
                _allocatable(
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


GPU_NOT_ADVERTISED = AlertSpec(
    name="GPUNotAdvertised",
    summary="The driver sees GPUs that the kubelet does not advertise.",
    settings=NotAdvertisedAlert,
    rule=_not_advertised_rule,
    cases=_not_advertised_case,
    runbook=_not_advertised_runbook,
)

# --- GPUPartiallyAdvertised ----------------------------------------------------------------------


class PartiallyAdvertisedAlert(AlertSettings):
    for_: Duration = Field(default="30m", alias="for")


def _partially_rule(a: PartiallyAdvertisedAlert, q: Query) -> AlertText:
    driver, advertised = _driver_and_advertised(q)
    return AlertText(
        f"{driver}\n  > {q.on(q.node)}\n({advertised} > 0)\n{_advertised_guard(q)}",
        f"The NVIDIA driver {where(q)} sees {{{{ $value | humanize }}}} GPUs but the kubelet "
        f"has advertised fewer devices than that, over all GPU resources, for {a.for_}. "
        "Every GPU backs at least one device (a whole GPU, a MIG instance or a replica), so "
        "at least one GPU is not schedulable: marked unhealthy or left out of the device "
        "plugin's configuration.",
    )


def _partially_case(a: PartiallyAdvertisedAlert, w: World) -> Case:
    n = minutes(a.for_) + 10
    nodes = {
        "a": (8, {"nvidia.com/gpu": 7}, 1),  # one GPU unhealthy
        "b": (2, {"nvidia.com/mig-1g.10gb": 14}, 1),
        "c": (8, {"nvidia.com/gpu": 0}, 1),  # GPUNotAdvertised's case
        "d": (4, {"nvidia.com/gpu": 2, "nvidia.com/mig-3g.40gb": 4}, 1),  # mixed, all used
        "e": (8, {"nvidia.com/gpu": 8}, 1),  # exactly one device per GPU: none missing
    }
    # Node a, one device short, fires; node e, with as many devices as GPUs, must not.
    return Case(_node_series(w, n, nodes), edges(a.for_, (Firing(w.node_out("a"), 8),)))


def _partially_runbook(a: PartiallyAdvertisedAlert, q: Query) -> Runbook:
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
                _allocatable("kubectl describe node $NODE | grep -i -A3 nvidia"),
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


GPU_PARTIALLY_ADVERTISED = AlertSpec(
    name="GPUPartiallyAdvertised",
    summary="The kubelet advertises fewer GPU devices than the driver sees GPUs.",
    settings=PartiallyAdvertisedAlert,
    rule=_partially_rule,
    cases=_partially_case,
    runbook=_partially_runbook,
)

# --- GPUDriverVersionMismatch --------------------------------------------------------------------


class DriverMismatchAlert(AlertSettings):
    for_: Duration = Field(default="1h", alias="for")
    severity: Severity = "info"


def _mismatch_rule(a: DriverMismatchAlert, q: Query) -> AlertText:
    versions = agg("count", (*q.cluster, "driver_version"), q.sel(c.GPU_INFO, 'parent_uuid=""'))
    scope = in_cluster(q)
    return AlertText(
        f"{agg('count', q.cluster, versions)} > 1",
        f"{{{{ $value | humanize }}}} NVIDIA driver versions have been running on the GPU "
        f"nodes{scope} for {a.for_}, more than the 1 expected. Multi-node jobs (NCCL) and "
        "images built for one driver misbehave across versions.",
    )


def _mismatch_case(a: DriverMismatchAlert, w: World) -> Case:
    switch = 10  # node b moves from the common driver to another one at minute 10
    n = switch + minutes(a.for_) + 20
    info = {"model": "NVIDIA H100 80GB HBM3", "pci_bus_id": "00000000:18:00.0", "mig_profile": ""}
    old, new = {"driver_version": "550.54.15"}, {"driver_version": "535.161.08"}
    series = (
        s(c.GPU_INFO, w.dev("a", 0, **info, **old), steady(1, n)),
        s(c.GPU_INFO, w.dev("b", 0, **info, **old), steady(1, switch - 1)),
        s(c.GPU_INFO, w.dev("b", 0, **info, **new), later(switch, steady(1, n))),
    )
    # A vanished series stays visible for the 5-minute lookback: two versions from `switch`,
    # so the alert fires exactly when `for` has held after it (with no `for`, at `switch`).
    checks = (Check(switch - 2, ()), *edges(a.for_, (Firing(w.scope, 2),), start=switch))
    return Case(series, checks)


def _mismatch_runbook(a: DriverMismatchAlert, q: Query) -> Runbook:
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


GPU_DRIVER_VERSION_MISMATCH = AlertSpec(
    name="GPUDriverVersionMismatch",
    summary="GPU nodes run different NVIDIA driver versions.",
    settings=DriverMismatchAlert,
    rule=_mismatch_rule,
    cases=_mismatch_case,
    runbook=_mismatch_runbook,
)

SPECS = (GPU_NOT_ADVERTISED, GPU_PARTIALLY_ADVERTISED, GPU_DRIVER_VERSION_MISMATCH)
