"""Building prometheus-client metric families from catalog rows."""

from __future__ import annotations

from prometheus_client import Metric as Family
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.exporter.snapshot import DeviceIdentity


def device_labels(identity: DeviceIdentity) -> dict[str, str]:
    """The identity labels of every device series (see docs/metrics.md)."""
    labels = {"gpu": str(identity.index), "uuid": identity.uuid}
    if identity.is_mig:
        labels["parent_uuid"] = identity.parent_uuid
        labels["gpu_instance_id"] = str(identity.gpu_instance_id)
        labels["compute_instance_id"] = str(identity.compute_instance_id)
    return labels


def family(metric: c.Metric) -> GaugeMetricFamily | CounterMetricFamily:
    cls = CounterMetricFamily if metric.type is c.MetricType.COUNTER else GaugeMetricFamily
    return cls(metric.family, metric.help, unit=metric.unit if metric.unit else "")


def add(fam: Family, labels: dict[str, str], value: float) -> None:
    """Add one sample; counters get their `_total` suffix as prometheus-client expects."""
    suffix = "_total" if fam.type == "counter" else ""
    fam.add_sample(fam.name + suffix, labels, value)
