"""The metric catalog: the one table of every metric the project exposes.

The exporter renders from it, and the rules generator and dashboards take their metric names
from it, so a test can prove that every name a rule or panel uses exists. Adding a metric is
adding one row to the area's module (device.py, attribution.py, self_monitoring.py) and to
ALL_METRICS below; error kinds live in errors.py and Xid codes in xid.py.

This module is the package's face: `from kube_gpu_exporter.exporter import catalog as c`
and `c.MEMORY_USED` reach every row.
"""

from __future__ import annotations

from kube_gpu_exporter.exporter.catalog.attribution import (
    ALLOCATION_INFO,
    NODE_ADVERTISED,
    NODE_ALLOCATED,
    NODE_DRIVER_GPUS,
    NODE_FREE_GPUS,
    NVIDIA_DRA_DRIVER,
    POD_MEMORY_USED,
    POD_UTILIZATION,
)
from kube_gpu_exporter.exporter.catalog.device import (
    CLOCK_EVENT_ACTIVE,
    CLOCK_EVENT_REASONS,
    COMPUTE_PROCESSES,
    DEVICE_VALUE_METRICS,
    ECC_CORRECTED,
    ECC_UNCORRECTED,
    ENERGY,
    GPU_INFO,
    GPU_UP,
    MEMORY_BANDWIDTH_UTILIZATION,
    MEMORY_CLOCK,
    MEMORY_RESERVED,
    MEMORY_TOTAL,
    MEMORY_USED,
    POWER,
    POWER_LIMIT,
    SM_CLOCK,
    TEMPERATURE,
    UTILIZATION,
    XID_ERRORS,
)
from kube_gpu_exporter.exporter.catalog.errors import (
    COLLECTION_ERROR_KINDS,
    KUBERNETES_ERROR_KINDS,
    NVML_ERROR_KINDS,
    POD_RESOURCES_ERROR_KINDS,
    PodResourcesErrorKind,
)
from kube_gpu_exporter.exporter.catalog.metric import (
    DEVICE_LABELS,
    INFO_LABELS,
    MIG_LABELS,
    POD_LABELS,
    Metric,
    MetricType,
    Scope,
)
from kube_gpu_exporter.exporter.catalog.self_monitoring import (
    BUILD_INFO,
    COLLECTION_DURATION,
    COLLECTION_ERRORS,
    COLLECTIONS,
    KUBERNETES_API_UP,
    LAST_SUCCESS,
    NVML_UP,
    POD_RESOURCES_LAST_SUCCESS,
    POD_RESOURCES_UP,
    UNMAPPED_DEVICES,
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

__all__ = [
    "ALLOCATION_INFO",
    "ALL_METRICS",
    "BUILD_INFO",
    "BY_NAME",
    "CLOCK_EVENT_ACTIVE",
    "CLOCK_EVENT_REASONS",
    "COLLECTIONS",
    "COLLECTION_DURATION",
    "COLLECTION_ERRORS",
    "COLLECTION_ERROR_KINDS",
    "COMPUTE_PROCESSES",
    "DEVICE_LABELS",
    "DEVICE_VALUE_METRICS",
    "ECC_CORRECTED",
    "ECC_UNCORRECTED",
    "ENERGY",
    "GPU_INFO",
    "GPU_UP",
    "INFO_LABELS",
    "KUBERNETES_API_UP",
    "KUBERNETES_ERROR_KINDS",
    "LAST_SUCCESS",
    "MEMORY_BANDWIDTH_UTILIZATION",
    "MEMORY_CLOCK",
    "MEMORY_RESERVED",
    "MEMORY_TOTAL",
    "MEMORY_USED",
    "MIG_LABELS",
    "NODE_ADVERTISED",
    "NODE_ALLOCATED",
    "NODE_DRIVER_GPUS",
    "NODE_FREE_GPUS",
    "NVIDIA_DRA_DRIVER",
    "NVML_ERROR_KINDS",
    "NVML_UP",
    "POD_LABELS",
    "POD_MEMORY_USED",
    "POD_RESOURCES_ERROR_KINDS",
    "POD_RESOURCES_LAST_SUCCESS",
    "POD_RESOURCES_UP",
    "POD_UTILIZATION",
    "POWER",
    "POWER_LIMIT",
    "SM_CLOCK",
    "TEMPERATURE",
    "UNMAPPED_DEVICES",
    "UTILIZATION",
    "XID_ERRORS",
    "Metric",
    "MetricType",
    "PodResourcesErrorKind",
    "Scope",
]
