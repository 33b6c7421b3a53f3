"""Profiling metrics from NVML's GPU Performance Monitoring (GPM), Hopper and newer.

GPM reads the same hardware performance counters as DCGM's profiling fields
(`DCGM_FI_PROF_*`), without DCGM: each value is computed between two GPM samples, the
previous collection cycle's and this one's, so a device has none in its first cycle. They are
served per GPU and per MIG instance (`nvmlGpmMigSampleGet`, the only non-DCGM source of a MIG
instance's activity). A device without GPM support, or a metric its GPU does not count, simply
lacks the series. GPM and DCGM profiling share the counters: do not run both on one node.

`nvidia_gpu_utilization_ratio` only says that *a* kernel ran during the sample period; these
say how much of the GPU the kernels used, which is what waste is judged by.
"""

from __future__ import annotations

from kube_gpu_exporter.exporter.catalog.metric import Metric, MetricType, Scope

G = MetricType.GAUGE
D = Scope.DEVICE


def _activity(name: str, what: str) -> Metric:
    return Metric(f"nvidia_gpu_{name}_ratio", G, "ratio", what, D)


GRAPHICS_ACTIVE = _activity(
    "graphics_active",
    "Fraction of time the graphics or compute engine was active (GPM; DCGM GR_ENGINE_ACTIVE).",
)
SM_ACTIVE = _activity(
    "sm_active",
    "Fraction of time SMs had at least one warp resident, averaged over all SMs (GPM; DCGM "
    "SM_ACTIVE).",
)
SM_OCCUPANCY = _activity(
    "sm_occupancy",
    "Resident warps as a fraction of the SMs' maximum, averaged over time (GPM; DCGM "
    "SM_OCCUPANCY).",
)
TENSOR_ACTIVE = _activity(
    "tensor_active",
    "Fraction of time any tensor pipe was active (GPM; DCGM PIPE_TENSOR_ACTIVE).",
)
DRAM_ACTIVE = _activity(
    "dram_active",
    "Fraction of the device memory bandwidth used (GPM; DCGM DRAM_ACTIVE).",
)
FP64_ACTIVE = _activity(
    "fp64_active", "Fraction of time the FP64 (non-tensor) pipe was active (GPM)."
)
FP32_ACTIVE = _activity(
    "fp32_active", "Fraction of time the FP32 (non-tensor) pipe was active (GPM)."
)
FP16_ACTIVE = _activity(
    "fp16_active", "Fraction of time the FP16 (non-tensor) pipe was active (GPM)."
)


def _rate(name: str, what: str) -> Metric:
    return Metric(f"nvidia_gpu_{name}_bytes_per_second", G, "bytes_per_second", what, D)


PCIE_TRANSMIT_RATE = _rate("pcie_transmit", "PCIe traffic from the GPU (GPM; DCGM PCIE_TX_BYTES).")
PCIE_RECEIVE_RATE = _rate("pcie_receive", "PCIe traffic to the GPU (GPM; DCGM PCIE_RX_BYTES).")
NVLINK_TRANSMIT_RATE = _rate(
    "nvlink_transmit", "NVLink traffic from the GPU, all links (GPM; DCGM NVLINK_TX_BYTES)."
)
NVLINK_RECEIVE_RATE = _rate(
    "nvlink_receive", "NVLink traffic to the GPU, all links (GPM; DCGM NVLINK_RX_BYTES)."
)

# In render order.
PROFILING_METRICS: tuple[Metric, ...] = (
    GRAPHICS_ACTIVE,
    SM_ACTIVE,
    SM_OCCUPANCY,
    TENSOR_ACTIVE,
    DRAM_ACTIVE,
    FP64_ACTIVE,
    FP32_ACTIVE,
    FP16_ACTIVE,
    PCIE_TRANSMIT_RATE,
    PCIE_RECEIVE_RATE,
    NVLINK_TRANSMIT_RATE,
    NVLINK_RECEIVE_RATE,
)
