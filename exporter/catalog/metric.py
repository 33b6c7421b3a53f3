"""What a catalog row is: a metric's name, type, unit, help and the scope fixing its labels.

Every row of the catalog (device.py, attribution.py, self_monitoring.py) is one `Metric`; the
renderer, the rules generator and the dashboards all read these rows, so a name used anywhere
is a name that exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class MetricType(Enum):
    GAUGE = "gauge"
    COUNTER = "counter"
    HISTOGRAM = "histogram"  # the cluster view's scheduling wait; built by its own module


class Scope(Enum):
    """What one series of the metric describes, which fixes its identity labels."""

    DEVICE = "device"  # one GPU or MIG instance: gpu, uuid (+ MIG labels)
    POD = "pod"  # a device as one container uses it: device labels + namespace, pod, container
    NODE = "node"  # the node as a whole (capacity)
    EXPORTER = "exporter"  # the exporter process itself
    CLUSTER = "cluster"  # the cluster view (`kube-gpu-exporter cluster`): labels per row


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


# Identity labels of every device series. MIG instances add MIG_LABELS.
DEVICE_LABELS: tuple[str, ...] = ("gpu", "uuid")
MIG_LABELS: tuple[str, ...] = ("parent_uuid", "gpu_instance_id", "compute_instance_id")
INFO_LABELS: tuple[str, ...] = ("model", "driver_version", "pci_bus_id", "mig_profile")
POD_LABELS: tuple[str, ...] = ("namespace", "pod", "container")
