"""Device metrics: one series per GPU or MIG instance, read from NVML.

Identity labels are `gpu` and `uuid` (MIG instances add MIG_LABELS); fixed facts live only on
`nvidia_gpu_info`.
"""

from __future__ import annotations

from kube_gpu_exporter.exporter.catalog.metric import INFO_LABELS, Metric, MetricType, Scope

G, C = MetricType.GAUGE, MetricType.COUNTER
D = Scope.DEVICE

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
    "Compute processes NVML lists on the device; absent where the list cannot be all there "
    "is (no hostPID, or short of the device's memory or activity).",
    D,
)
SHARE = Metric(
    "nvidia_gpu_share_ratio",
    G,
    "ratio",
    "The device's share of its physical GPU: 1 for a whole GPU, a MIG instance's slices over "
    "the GPU's (1g.10gb on an A100 = 1/7); weights allocations and idle cost.",
    D,
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
