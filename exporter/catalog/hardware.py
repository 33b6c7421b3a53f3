"""Hardware health and traffic counters, most of them read through `nvmlDeviceGetFieldValues`.

One batched field-value call per GPU per cycle gives them all, each value with its own return
code, so a field the GPU or driver lacks drops that one series. NVML's PCIe byte counters are
32 bits wide and wrap every 4 GiB; the exporter accumulates their increments, so the served
counters only reset when the exporter restarts. The encoder and decoder utilizations come
from their own (cheap) calls.
"""

from __future__ import annotations

from kube_gpu_exporter.exporter.catalog.metric import Metric, MetricType, Scope

G, C = MetricType.GAUGE, MetricType.COUNTER
D = Scope.DEVICE

PCIE_TRANSMIT_BYTES = Metric(
    "nvidia_gpu_pcie_transmit_bytes_total", C, "bytes", "Bytes the GPU sent over PCIe.", D
)
PCIE_RECEIVE_BYTES = Metric(
    "nvidia_gpu_pcie_receive_bytes_total", C, "bytes", "Bytes the GPU received over PCIe.", D
)
PCIE_REPLAYS = Metric(
    "nvidia_gpu_pcie_replays_total",
    C,
    "",
    "PCIe link-level retransmissions (replays) since the driver loaded; a rising rate means a "
    "degrading link or riser.",
    D,
)
NVLINK_TRANSMIT_BYTES = Metric(
    "nvidia_gpu_nvlink_transmit_bytes_total",
    C,
    "bytes",
    "Data bytes the GPU sent over one NVLink (protocol overhead excluded).",
    D,
    ("link",),
)
NVLINK_RECEIVE_BYTES = Metric(
    "nvidia_gpu_nvlink_receive_bytes_total",
    C,
    "bytes",
    "Data bytes the GPU received over one NVLink (protocol overhead excluded).",
    D,
    ("link",),
)
NVLINK_ERRORS = Metric(
    "nvidia_gpu_nvlink_errors_total",
    C,
    "",
    "Errors one NVLink counted since the driver loaded, by type: crc_flit and crc_data (a "
    "flit or data failed its CRC), replay (resent), recovery (the link retrained).",
    D,
    ("link", "type"),
)
REMAPPED_ROWS = Metric(
    "nvidia_gpu_remapped_rows",
    G,
    "",
    "Memory rows remapped to spares, by the kind of error that caused it; kept across reboots.",
    D,
    ("cause",),
)
ROW_REMAP_PENDING = Metric(
    "nvidia_gpu_row_remap_pending",
    G,
    "",
    "1 while a row remapping waits for a GPU reset to take effect.",
    D,
)
ROW_REMAP_FAILED = Metric(
    "nvidia_gpu_row_remap_failed",
    G,
    "",
    "1 if a row remapping failed (no spare row left): the GPU needs service.",
    D,
)
RECOVERY_ACTION = Metric(
    "nvidia_gpu_recovery_action",
    G,
    "",
    "The recovery the driver asks for (R570+): 0 none, 1 GPU reset, 2 node reboot, 3 drain "
    "peer-to-peer, 4 drain and reset.",
    D,
)
ACTION_REQUIRED = Metric(
    "nvidia_gpu_action_required",
    G,
    "",
    "1 for each action the GPU needs now and the source that asks for it (recovery_action, "
    "row_remap_pending, row_remap_failed, or xid with the Xid's code, held until the GPU is "
    "reset); action none (source nvml) when NVML's recovery action says nothing is needed "
    "and nothing else asks; absent where NVML cannot say.",
    D,
    ("action", "source", "xid"),
)
ACTION_REQUIRED_SINCE = Metric(
    "nvidia_gpu_action_required_since_timestamp_seconds",
    G,
    "seconds",
    "Unix time the exporter first saw the nvidia_gpu_action_required series of the same "
    "labels (an Xid's: the collection cycle that saw its event).",
    D,
    ("action", "source", "xid"),
)
MEMORY_TEMPERATURE = Metric(
    "nvidia_gpu_memory_temperature_celsius", G, "celsius", "HBM memory temperature.", D
)
CLOCK_EVENT_DURATION = Metric(
    "nvidia_gpu_clock_event_duration_seconds_total",
    C,
    "seconds",
    "Time the clocks were held down for the reason since the driver loaded.",
    D,
    ("reason",),
)
POWER_MANAGEMENT_LIMIT = Metric(
    "nvidia_gpu_power_management_limit_watts",
    G,
    "watts",
    "Power limit set by the administrator (the enforced limit may be lower).",
    D,
)
ENCODER_UTILIZATION = Metric(
    "nvidia_gpu_encoder_utilization_ratio",
    G,
    "ratio",
    "Fraction of the last sample period in which the video encoder (NVENC) was busy.",
    D,
)
DECODER_UTILIZATION = Metric(
    "nvidia_gpu_decoder_utilization_ratio",
    G,
    "ratio",
    "Fraction of the last sample period in which the video decoder (NVDEC) was busy.",
    D,
)

# One number per device, in render order.
HARDWARE_VALUE_METRICS: tuple[Metric, ...] = (
    PCIE_TRANSMIT_BYTES,
    PCIE_RECEIVE_BYTES,
    PCIE_REPLAYS,
    ROW_REMAP_PENDING,
    ROW_REMAP_FAILED,
    RECOVERY_ACTION,
    MEMORY_TEMPERATURE,
    POWER_MANAGEMENT_LIMIT,
    ENCODER_UTILIZATION,
    DECODER_UTILIZATION,
)
# One number per device and value of the metric's extra labels, in render order.
HARDWARE_LABELLED_METRICS: tuple[Metric, ...] = (
    NVLINK_TRANSMIT_BYTES,
    NVLINK_RECEIVE_BYTES,
    NVLINK_ERRORS,
    REMAPPED_ROWS,
    CLOCK_EVENT_DURATION,
)
