"""The series dcgm-exporter would emit for a snapshot: one per GPU and per MIG GPU instance, with
its device labels and, where one container holds the device alone, that container's labels.

Where this departs from dcgm-exporter, it is on purpose:

- A device shared by time-slicing, MPS or several containers is emitted once, without pod
  labels: its values are the device's, and copying them onto every sharer (as dcgm-exporter
  does, for every field but utilization and framebuffer in its per-process mode) makes each
  look as if it used all of it. The per-pod split lives in `nvidia_gpu_pod_*`.
- A MIG-partitioned GPU's device-wide readings (temperature, power, clocks, energy, Xid) are
  emitted once, on the GPU's own series without MIG labels, instead of copied onto each MIG
  instance; the instances carry what is theirs (framebuffer, GPM activity) and their holder's
  pod labels. Sums such as dashboard 12239's "GPU Power Total" stay right.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.exporter.exposition.dcgm_fields import SchemaLabels
from kube_gpu_exporter.exporter.snapshot import (
    AttributionSample,
    DeviceIdentity,
    DeviceSample,
    Holder,
    Snapshot,
)

# A partitioned GPU's framebuffer readings: its instances', emitted there.
_FB_SOURCES = frozenset({c.MEMORY_USED.name, c.MEMORY_TOTAL.name, c.MEMORY_RESERVED.name})


@dataclass(frozen=True, slots=True)
class Entity:
    """One series' worth of labels and readings: a whole GPU, or one MIG GPU instance."""

    labels: dict[str, str]
    values: Mapping[str, float]
    up: bool
    gpu: DeviceSample | None  # the whole GPU's sample (Xid, clock events, labelled); None: MIG


def entities(snapshot: Snapshot, hostname: str, names: SchemaLabels) -> list[Entity]:
    """The snapshot's series in device order, labelled as the schema (`names`) spells them."""
    devices = snapshot.node.devices
    driver = snapshot.node.driver_version
    gpus = {d.identity.uuid: d.identity for d in devices if not d.identity.is_mig}
    partitioned = {d.identity.parent_uuid for d in devices if d.identity.is_mig}
    holders = _holders(snapshot.attribution)

    # dcgm-exporter reports per GPU instance: a GPU instance split into several compute
    # instances (one NVML MIG device each) is one series, held by whoever holds any of them.
    groups: dict[tuple[str, str, int | None], list[DeviceSample]] = {}
    for device in devices:
        ident = device.identity
        key = (
            ("mig", ident.parent_uuid, ident.gpu_instance_id)
            if ident.is_mig
            else ("gpu", ident.uuid, None)
        )
        groups.setdefault(key, []).append(device)

    out: list[Entity] = []
    for members in groups.values():
        first = members[0]
        ident = first.identity
        up = all(m.up for m in members)
        if ident.is_mig:
            pods = _union(holders.get(m.identity.uuid, set()) for m in members)
            labels = _labels(ident, gpus.get(ident.parent_uuid), driver, hostname, names)
            out.append(Entity(labels | _pod_labels(pods), first.values, up, None))
        elif ident.uuid in partitioned:
            # Its framebuffer is its instances', emitted there; pods hold instances, not it.
            values = {k: v for k, v in first.values.items() if k not in _FB_SOURCES}
            labels = _labels(ident, ident, driver, hostname, names)
            out.append(Entity(labels, values, up, first))
        else:
            pods = holders.get(ident.uuid, set())
            labels = _labels(ident, ident, driver, hostname, names) | _pod_labels(pods)
            out.append(Entity(labels, first.values, up, first))
    return out


def _labels(
    ident: DeviceIdentity,
    gpu: DeviceIdentity | None,
    driver: str,
    hostname: str,
    names: SchemaLabels,
) -> dict[str, str]:
    """dcgm-exporter's device labels. A MIG instance carries its GPU's index, UUID, bus id and
    model (dcgm-exporter reads them from the parent device) plus GPU_I_PROFILE and GPU_I_ID."""
    labels = {
        "gpu": str(ident.index),
        "UUID": gpu.uuid if gpu is not None else ident.parent_uuid or ident.uuid,
        "pci_bus_id": (gpu or ident).pci_bus_id,
        "device": f"nvidia{ident.index}",
        "modelName": (gpu or ident).model,
    }
    if ident.is_mig:
        labels["GPU_I_PROFILE"] = ident.mig_profile
        labels["GPU_I_ID"] = str(ident.gpu_instance_id)
    if hostname:
        labels[names.hostname] = hostname
    if driver:
        labels[names.driver] = driver
    return labels


def _holders(attr: AttributionSample | None) -> dict[str, set[Holder] | None]:
    """Device uuid → the containers holding it, or None when it is shared (time-slicing or
    MPS replicas, a `.shared` resource, or several containers: see attribution.py)."""
    if attr is None:
        return {}
    seen: dict[str, set[Holder]] = {}
    shared: set[str] = set()
    for a in attr.allocations:
        seen.setdefault(a.device.uuid, set()).add(a.holder)
        if a.sharing != "exclusive":
            shared.add(a.device.uuid)
    return {uuid: None if uuid in shared or len(h) > 1 else h for uuid, h in seen.items()}


def _pod_labels(holders: set[Holder] | None) -> dict[str, str]:
    """Pod labels only for a device held by exactly one container, alone."""
    if holders is None or len(holders) != 1:
        return {}
    (holder,) = holders
    return {"namespace": holder.namespace, "pod": holder.pod, "container": holder.container}


def _union(sets: Iterable[set[Holder] | None]) -> set[Holder] | None:
    """The holders of several devices taken as one; None (shared) if any of them is shared."""
    out: set[Holder] = set()
    for holders in sets:
        if holders is None:
            return None
        out |= holders
    return out
