"""Metric families of the attribution: allocations, per-pod usage and node capacity."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import Metric as Family

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.exporter.exposition.families import add, device_labels, family
from kube_gpu_exporter.exporter.snapshot import AttributionSample, DeviceIdentity, Holder


def _labels(device: DeviceIdentity, holder: Holder) -> dict[str, str]:
    return device_labels(device) | {
        "namespace": holder.namespace,
        "pod": holder.pod,
        "container": holder.container,
    }


def attribution_families(attr: AttributionSample) -> Iterator[Family]:
    info = family(c.ALLOCATION_INFO)
    for a in attr.allocations:
        extra = {"resource": a.resource, "sharing": a.sharing, **a.labels}
        add(info, _labels(a.device, a.holder) | extra, 1)
    yield info

    utilization = family(c.POD_UTILIZATION)
    memory = family(c.POD_MEMORY_USED)
    for u in attr.usage:
        if u.utilization is not None:
            add(utilization, _labels(u.device, u.holder), u.utilization)
        if u.memory_used_bytes is not None:
            add(memory, _labels(u.device, u.holder), u.memory_used_bytes)
    yield utilization
    yield memory

    cap = attr.capacity
    driver = family(c.NODE_DRIVER_GPUS)
    add(driver, {}, cap.driver_gpus)
    yield driver
    for metric, per_resource in (
        (c.NODE_ADVERTISED, cap.advertised),
        (c.NODE_ALLOCATED, cap.allocated),
    ):
        fam = family(metric)
        for resource, count in (per_resource or {}).items():
            add(fam, {"resource": resource}, count)
        yield fam
    if cap.free_gpus is not None:
        free = family(c.NODE_FREE_GPUS)
        add(free, {}, cap.free_gpus)
        yield free

    unmapped = family(c.UNMAPPED_DEVICES)
    for resource, count in sorted(attr.unmapped.items()):
        add(unmapped, {"resource": resource}, count)
    yield unmapped
