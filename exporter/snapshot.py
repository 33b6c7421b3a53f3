"""Immutable results of one collection cycle: every per-cycle type, in data-flow order.

NVML (or the simulated backend) yields a `NodeSample` of `DeviceSample`s; attribution adds an
`AttributionSample` (who holds which device, and what each holder uses); the collection loop
wraps both with its own state into a `Snapshot`.

A snapshot is built once per cycle and never changed, so rendering it is a pure function and a
scrape can serve it while the next cycle is being collected.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class DeviceIdentity:
    """What names a GPU or MIG instance; read once at discovery."""

    index: int  # the GPU's NVML index; for a MIG instance, its parent's
    uuid: str
    model: str
    pci_bus_id: str
    parent_uuid: str = ""  # set on MIG instances only
    mig_profile: str = ""
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    share: float = 1.0  # of its physical GPU: a MIG instance's slices over the GPU's
    # N of the GPU's /dev/nvidiaN (a MIG instance: its parent's), which GKE's device plugin
    # names devices by; it need not follow the index. None when NVML cannot tell.
    minor: int | None = None

    @property
    def is_mig(self) -> bool:
        return bool(self.parent_uuid)


def gpu_share(profile: str, slices: int | None, gpu_slices: int) -> float:
    """A MIG instance's share of its GPU: its GPU-instance slices over the GPU's.

    The GPU's slice count is its maximum number of MIG devices (7 on A100 and H100, 4 on
    A30); a profile the driver names without attributes falls back to its leading number.
    """
    if not slices and profile[:1].isdigit():
        slices = int(profile.split("g", 1)[0])
    return min(1.0, slices / gpu_slices) if slices and gpu_slices else 1.0


@dataclass(frozen=True, slots=True)
class ProcessSample:
    """A compute process on a device, as NVML lists it (host PID)."""

    pid: int
    used_memory_bytes: float | None  # None where NVML cannot say (its NVML_VALUE_NOT_AVAILABLE)
    sm_utilization: float | None = None  # ratio; None where NVML cannot sample it (MIG)


@dataclass(frozen=True, slots=True)
class DeviceSample:
    """One device's readings. A metric absent from `values` is unsupported, not zero."""

    identity: DeviceIdentity
    up: bool
    values: Mapping[str, float] = field(
        default_factory=dict
    )  # catalog metric name → value in base units
    clock_events: frozenset[str] | None = None  # active reasons; None when not readable
    xid_counts: Mapping[int, int] = field(default_factory=dict)
    processes: tuple[ProcessSample, ...] | None = None  # None when NVML cannot list them
    # (catalog metric name, *its extra labels' values in the metric's order: link, cause,
    # reason; link and type) → value
    labelled: Mapping[tuple[str, ...], float] = field(default_factory=dict)
    # Whether the GPU's Xid events are counted (registered with the Xid watch): where they are
    # not, `xid_counts` is empty because nobody counts, and no "no Xid" would be true.
    xid_watched: bool = False


@dataclass(frozen=True, slots=True)
class NodeSample:
    """What one backend read in one cycle."""

    nvml_up: bool
    driver_version: str = ""
    devices: tuple[DeviceSample, ...] = ()
    errors: Mapping[str, int] = field(default_factory=dict)  # error kind → count this cycle
    # Whether NVML lists every container's processes (hostPID); None: not known (simulated)
    host_pid_namespace: bool | None = None
    # Unix time the Xid counts of `devices` count from (the Xid watch's start, renewed with the
    # NVML session); None: no Xid watch. Alerts tell a first Xid from an old one by it.
    xid_watch_start: float | None = None


# --- attribution: which container holds which device ----------------------------------------


@dataclass(frozen=True, slots=True, order=True)
class Holder:
    namespace: str
    pod: str
    container: str


@dataclass(frozen=True, slots=True)
class AllocationSample:
    device: DeviceIdentity
    holder: Holder
    resource: str
    sharing: str  # "exclusive" or "shared"
    labels: Mapping[str, str] = field(default_factory=dict)  # owner and allowlisted pod labels


@dataclass(frozen=True, slots=True)
class PodUsage:
    device: DeviceIdentity
    holder: Holder
    utilization: float | None
    memory_used_bytes: float | None


@dataclass(frozen=True, slots=True)
class Capacity:
    driver_gpus: int
    advertised: Mapping[str, int] | None  # None while the kubelet cannot be asked
    allocated: Mapping[str, int] | None
    free_gpus: int | None
    # The uuids of the devices (GPUs, MIG instances) the kubelet lists as allocatable: its
    # device plugins' healthy devices; None while the kubelet cannot be asked
    offered: frozenset[str] | None = None


@dataclass(frozen=True, slots=True)
class AttributionSample:
    allocations: tuple[AllocationSample, ...]
    usage: tuple[PodUsage, ...]
    capacity: Capacity
    unmapped: Mapping[str, int]  # resource → device ids that name no NVML device


@dataclass(frozen=True, slots=True)
class ExporterState:
    """The exporter's own health, rendered beside the device metrics."""

    collection_duration_seconds: float
    last_success_timestamp: float
    collections_total: int
    errors_total: Mapping[str, int]
    pod_resources_up: bool | None = None  # None: attribution disabled
    pod_resources_last_success: float = 0.0
    kubernetes_api_up: bool | None = None  # None: Kubernetes API disabled
    simulated: bool = False  # the readings come from a scenario (`serve --simulate`), not NVML


@dataclass(frozen=True, slots=True)
class HeldXid:
    """An Xid whose catalog action its GPU still owes (exposition/health_memory.py holds it
    until the GPU shows it was acted on)."""

    code: int
    action: str  # the catalog's, in nvidia_gpu_action_required's words: reset_gpu, reboot
    since: float  # unix time the exporter first saw the event (NVML's events carry no time)


@dataclass(frozen=True, slots=True)
class ActionMemory:
    """What one cycle's readings cannot say alone of a GPU's needed action: the Xid it owes,
    and since when the exporter has seen each (action, source) it serves."""

    xid: HeldXid | None = None
    since: Mapping[tuple[str, str], float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Snapshot:
    node: NodeSample
    exporter: ExporterState
    taken_at: float  # unix time the cycle finished
    attribution: AttributionSample | None = None  # None: attribution disabled
    # NVIDIA GPUs on the PCI bus, from sysfs beside NVML; None: not read or unreadable
    pci_gpus: int | None = None
    # Per GPU uuid, what the collection loop remembers of its needed action; empty where no
    # loop kept it (a snapshot rendered on its own): no Xid held, no "since" served.
    health: Mapping[str, ActionMemory] = field(default_factory=dict)
