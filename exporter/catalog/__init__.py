"""The metric catalog: the one table of every metric the project exposes.

The exporter renders from it, and the rules generator and dashboards take their metric names
from it, so a test can prove that every name a rule or panel uses exists. Adding a metric is
adding one row here.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class MetricType(Enum):
    GAUGE = "gauge"
    COUNTER = "counter"


class Scope(Enum):
    """What one series of the metric describes, which fixes its identity labels."""

    DEVICE = "device"  # one GPU or MIG instance: gpu, uuid (+ MIG labels)
    POD = "pod"  # a device as one container uses it: device labels + namespace, pod, container
    NODE = "node"  # the node as a whole (capacity)
    EXPORTER = "exporter"  # the exporter process itself


@dataclass(frozen=True, slots=True)
class Metric:
    name: str
    type: MetricType
    unit: str
    help: str
    scope: Scope
    labels: tuple[str, ...] = ()  # labels beyond the scope's identity labels

    @property
    def family(self) -> str:
        """The name prometheus-client wants: counters without their `_total` suffix."""
        if self.type is MetricType.COUNTER and self.name.endswith("_total"):
            return self.name.removesuffix("_total")
        return self.name


G, C = MetricType.GAUGE, MetricType.COUNTER
D, P, N, X = Scope.DEVICE, Scope.POD, Scope.NODE, Scope.EXPORTER

# Identity labels of every device series. MIG instances add MIG_LABELS.
DEVICE_LABELS: tuple[str, ...] = ("gpu", "uuid")
MIG_LABELS: tuple[str, ...] = ("parent_uuid", "gpu_instance_id", "compute_instance_id")
INFO_LABELS: tuple[str, ...] = ("model", "driver_version", "pci_bus_id", "mig_profile")
POD_LABELS: tuple[str, ...] = ("namespace", "pod", "container")

GPU_INFO = Metric(
    "nvidia_gpu_info", G, "", "Fixed facts of a GPU or MIG instance; always 1.", D, INFO_LABELS
)
GPU_UP = Metric(
    "nvidia_gpu_up", G, "", "1 if the device answered NVML, 0 if lost or unreadable.", D
)
UTILIZATION = Metric(
    "nvidia_gpu_utilization_ratio",
    G,
    "ratio",
    "Fraction of the last sample period in which a kernel ran on the GPU (absent on MIG).",
    D,
)
MEMORY_BANDWIDTH_UTILIZATION = Metric(
    "nvidia_gpu_memory_bandwidth_utilization_ratio",
    G,
    "ratio",
    "Fraction of the last sample period in which device memory was read or written.",
    D,
)
MEMORY_USED = Metric(
    "nvidia_gpu_memory_used_bytes",
    G,
    "bytes",
    "Framebuffer memory in use by allocations (excludes driver-reserved memory on NVML v2).",
    D,
)
MEMORY_TOTAL = Metric(
    "nvidia_gpu_memory_total_bytes", G, "bytes", "Framebuffer memory installed.", D
)
MEMORY_RESERVED = Metric(
    "nvidia_gpu_memory_reserved_bytes",
    G,
    "bytes",
    "Framebuffer memory reserved by the driver and firmware (NVML v2 drivers only).",
    D,
)
TEMPERATURE = Metric("nvidia_gpu_temperature_celsius", G, "celsius", "GPU die temperature.", D)
POWER = Metric("nvidia_gpu_power_watts", G, "watts", "Power draw of the board.", D)
POWER_LIMIT = Metric(
    "nvidia_gpu_power_limit_watts", G, "watts", "Power limit the driver enforces.", D
)
ENERGY = Metric(
    "nvidia_gpu_energy_joules_total", C, "joules", "Energy consumed since the driver loaded.", D
)
SM_CLOCK = Metric("nvidia_gpu_sm_clock_hertz", G, "hertz", "Current SM clock.", D)
MEMORY_CLOCK = Metric("nvidia_gpu_memory_clock_hertz", G, "hertz", "Current memory clock.", D)
CLOCK_EVENT_ACTIVE = Metric(
    "nvidia_gpu_clock_event_active",
    G,
    "",
    "1 while the clock-event (throttle) reason holds, 0 otherwise.",
    D,
    ("reason",),
)
ECC_CORRECTED = Metric(
    "nvidia_gpu_ecc_corrected_errors_total",
    C,
    "",
    "Single-bit ECC errors corrected since the driver loaded (volatile counter).",
    D,
)
ECC_UNCORRECTED = Metric(
    "nvidia_gpu_ecc_uncorrected_errors_total",
    C,
    "",
    "Double-bit ECC errors not corrected since the driver loaded (volatile counter).",
    D,
)
XID_ERRORS = Metric(
    "nvidia_gpu_xid_errors_total",
    C,
    "",
    "Xid error events NVML delivered since the exporter started, by Xid code.",
    D,
    ("xid",),
)

COMPUTE_PROCESSES = Metric(
    "nvidia_gpu_compute_processes",
    G,
    "",
    "Compute processes NVML lists on the device (absent where NVML cannot list them).",
    D,
)

# --- attribution: which pod uses which device --------------------------------------------------

ALLOCATION_INFO = Metric(
    "nvidia_gpu_allocation_info",
    G,
    "",
    "1 per device allocated to a container, from the kubelet's pod-resources API.",
    P,
    ("resource", "sharing"),
)
POD_UTILIZATION = Metric(
    "nvidia_gpu_pod_utilization_ratio",
    G,
    "ratio",
    "The container's share of device time: the device's utilization when it holds the device "
    "alone, the SM utilization of its own processes on a shared device.",
    P,
)
POD_MEMORY_USED = Metric(
    "nvidia_gpu_pod_memory_used_bytes",
    G,
    "bytes",
    "Framebuffer the container uses: the device's when it holds it alone, its own processes' "
    "on a shared device.",
    P,
)
NODE_DRIVER_GPUS = Metric(
    "nvidia_gpu_node_driver_gpus", G, "", "Whole GPUs the NVIDIA driver sees on the node.", N
)
NODE_ADVERTISED = Metric(
    "nvidia_gpu_node_advertised_devices",
    G,
    "",
    "Devices the kubelet advertises as allocatable, by resource name (device plugin or DRA).",
    N,
    ("resource",),
)
NODE_ALLOCATED = Metric(
    "nvidia_gpu_node_allocated_devices",
    G,
    "",
    "Devices allocated to running containers, by resource name.",
    N,
    ("resource",),
)
NODE_FREE_GPUS = Metric(
    "nvidia_gpu_node_free_gpus",
    G,
    "",
    "Whole GPUs on which nothing is allocated (no container, MIG instance or replica).",
    N,
)

BUILD_INFO = Metric(
    "kube_gpu_exporter_build_info", G, "", "Version of the exporter; always 1.", X, ("version",)
)
NVML_UP = Metric(
    "kube_gpu_exporter_nvml_up", G, "", "1 if NVML is initialised and answering, 0 if not.", X
)
COLLECTION_DURATION = Metric(
    "kube_gpu_exporter_collection_duration_seconds",
    G,
    "seconds",
    "Wall time of the collection cycle that produced these metrics.",
    X,
)
LAST_SUCCESS = Metric(
    "kube_gpu_exporter_last_collection_success_timestamp_seconds",
    G,
    "seconds",
    "Unix time of the last collection cycle in which NVML answered.",
    X,
)
COLLECTIONS = Metric(
    "kube_gpu_exporter_collections_total", C, "", "Collection cycles completed.", X
)
POD_RESOURCES_UP = Metric(
    "kube_gpu_exporter_pod_resources_up",
    G,
    "",
    "1 if the last call to the kubelet's pod-resources API succeeded, 0 if not.",
    X,
)
POD_RESOURCES_LAST_SUCCESS = Metric(
    "kube_gpu_exporter_pod_resources_last_success_timestamp_seconds",
    G,
    "seconds",
    "Unix time of the last successful pod-resources List.",
    X,
)
UNMAPPED_DEVICES = Metric(
    "kube_gpu_exporter_unmapped_device_ids",
    G,
    "",
    "Device ids the kubelet reports that match no NVML device, by resource name.",
    X,
    ("resource",),
)
KUBERNETES_API_UP = Metric(
    "kube_gpu_exporter_kubernetes_api_up",
    G,
    "",
    "1 if the watches of this node's pods and ResourceSlices are established, 0 if not "
    "(absent when disabled).",
    X,
)
COLLECTION_ERRORS = Metric(
    "kube_gpu_exporter_collection_errors_total",
    C,
    "",
    "Errors met while collecting, by kind (NVML error name, or init).",
    X,
    ("kind",),
)

# Device metrics whose value is one plain number per device, in render order.
DEVICE_VALUE_METRICS: tuple[Metric, ...] = (
    UTILIZATION,
    MEMORY_BANDWIDTH_UTILIZATION,
    MEMORY_USED,
    MEMORY_TOTAL,
    MEMORY_RESERVED,
    TEMPERATURE,
    POWER,
    POWER_LIMIT,
    ENERGY,
    SM_CLOCK,
    MEMORY_CLOCK,
    ECC_CORRECTED,
    ECC_UNCORRECTED,
)

ALL_METRICS: tuple[Metric, ...] = (
    GPU_INFO,
    GPU_UP,
    *DEVICE_VALUE_METRICS,
    CLOCK_EVENT_ACTIVE,
    XID_ERRORS,
    COMPUTE_PROCESSES,
    ALLOCATION_INFO,
    POD_UTILIZATION,
    POD_MEMORY_USED,
    NODE_DRIVER_GPUS,
    NODE_ADVERTISED,
    NODE_ALLOCATED,
    NODE_FREE_GPUS,
    BUILD_INFO,
    NVML_UP,
    COLLECTION_DURATION,
    LAST_SUCCESS,
    COLLECTIONS,
    COLLECTION_ERRORS,
    POD_RESOURCES_UP,
    POD_RESOURCES_LAST_SUCCESS,
    UNMAPPED_DEVICES,
    KUBERNETES_API_UP,
)

BY_NAME: dict[str, Metric] = {m.name: m for m in ALL_METRICS}

# NVML clock-event reason bits (nvml.h nvmlClocksEventReason*), label value → bit.
CLOCK_EVENT_REASONS: dict[str, int] = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clock_setting": 0x100,
}

# Collection error kinds pre-created at 0 so that rate() works from the first scrape.
ERROR_KINDS: tuple[str, ...] = (
    "init",
    "gpu_is_lost",
    "unknown",
    "timeout",
    "no_permission",
    "reset_required",
    "other",
)
