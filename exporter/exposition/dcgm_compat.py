"""dcgm-exporter's metric names, units and labels, served beside our own (`--compat.dcgm-exporter`).

For a migration: NVIDIA's Grafana dashboard 12239 and alerts written for dcgm-exporter keep
working while the `nvidia_gpu_*` series are adopted. The schema is dcgm-exporter's classic one
(3.x to 4.8.2): `DCGM_FI_DEV_*` names in DCGM's units (%, MiB, MHz, mJ), labels `gpu`, `UUID`,
`pci_bus_id`, `device`, `modelName`, `Hostname`, `DCGM_FI_DRIVER_VERSION`, MIG instances'
`GPU_I_PROFILE` and `GPU_I_ID`, and `namespace`, `pod`, `container` of the device's holder.
docs/migrating-from-dcgm-exporter.md has the mapping and every difference.

Where this departs from dcgm-exporter, it is on purpose:

- A device shared by time-slicing, MPS or several containers is emitted once, without pod
  labels: its values are the device's, and copying them onto every sharer (dcgm-exporter's
  best-known defect) makes each look as if it used all of it. The per-pod split lives in
  `nvidia_gpu_pod_*`.
- A MIG-partitioned GPU's device-wide readings (temperature, power, clocks, energy, Xid) are
  emitted once, on the GPU's own series without MIG labels, instead of copied onto each MIG
  instance; the instances carry what is theirs (framebuffer) and their holder's pod labels.
  Sums such as dashboard 12239's "GPU Power Total" stay right.

Families are built once per collection cycle on the collector thread (`DcgmCompat.families`);
the renderer only encodes them.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from prometheus_client import Metric as Family

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.exporter.catalog.xid import HARDWARE_XIDS, XID_NAMES
from kube_gpu_exporter.exporter.snapshot import (
    AttributionSample,
    DeviceIdentity,
    DeviceSample,
    Holder,
    Snapshot,
)

MIB = float(1 << 20)

# DCGM's counters do not end in `_total`. prometheus-client writes a counter's samples with a
# `_total` suffix (and OpenMetrics requires it), so these are typed `unknown` (`untyped` in the
# text format): the names stay dcgm-exporter's, and PromQL's rate() does not look at the type.
GAUGE, UNKNOWN = "gauge", "unknown"


@dataclass(frozen=True, slots=True)
class CompatMetric:
    """One dcgm-exporter metric read from one catalog metric: value × factor, rounded."""

    name: str
    type: str
    help: str
    source: str  # catalog metric name (base units)
    factor: float = 1.0
    digits: int | None = None  # round to this many decimals (float noise of ×100, ÷1e6, ×1000)

    def convert(self, value: float) -> float:
        scaled = value * self.factor
        return round(scaled, self.digits) if self.digits is not None else scaled


# In the order of dcgm-exporter's default-counters.csv, then the opt-in fields we can serve.
SM_CLOCK = CompatMetric(
    "DCGM_FI_DEV_SM_CLOCK", GAUGE, "SM clock frequency (in MHz).", c.SM_CLOCK.name, 1e-6, 6
)
MEM_CLOCK = CompatMetric(
    "DCGM_FI_DEV_MEM_CLOCK",
    GAUGE,
    "Memory clock frequency (in MHz).",
    c.MEMORY_CLOCK.name,
    1e-6,
    6,
)
GPU_TEMP = CompatMetric(
    "DCGM_FI_DEV_GPU_TEMP", GAUGE, "GPU temperature (in C).", c.TEMPERATURE.name
)
POWER_USAGE = CompatMetric("DCGM_FI_DEV_POWER_USAGE", GAUGE, "Power draw (in W).", c.POWER.name)
TOTAL_ENERGY = CompatMetric(
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    UNKNOWN,
    "Total energy consumption since the driver loaded (in mJ); a counter.",
    c.ENERGY.name,
    1000.0,
    3,
)
GPU_UTIL = CompatMetric(
    "DCGM_FI_DEV_GPU_UTIL", GAUGE, "GPU utilization (in %).", c.UTILIZATION.name, 100.0, 6
)
MEM_COPY_UTIL = CompatMetric(
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    GAUGE,
    "Memory utilization (in %).",
    c.MEMORY_BANDWIDTH_UTILIZATION.name,
    100.0,
    6,
)
FB_USED = CompatMetric(
    "DCGM_FI_DEV_FB_USED", GAUGE, "Framebuffer memory used (in MiB).", c.MEMORY_USED.name, 1 / MIB
)
FB_RESERVED = CompatMetric(
    "DCGM_FI_DEV_FB_RESERVED",
    GAUGE,
    "Framebuffer memory reserved (in MiB).",
    c.MEMORY_RESERVED.name,
    1 / MIB,
)
FB_TOTAL = CompatMetric(
    "DCGM_FI_DEV_FB_TOTAL",
    GAUGE,
    "Framebuffer memory total (in MiB).",
    c.MEMORY_TOTAL.name,
    1 / MIB,
)
ECC_SBE = CompatMetric(
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    UNKNOWN,
    "Total number of single-bit volatile ECC errors; a counter.",
    c.ECC_CORRECTED.name,
)
ECC_DBE = CompatMetric(
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    UNKNOWN,
    "Total number of double-bit volatile ECC errors; a counter.",
    c.ECC_UNCORRECTED.name,
)
ENFORCED_POWER_LIMIT = CompatMetric(
    "DCGM_FI_DEV_ENFORCED_POWER_LIMIT",
    GAUGE,
    "Effective power limit that the driver enforces (in W).",
    c.POWER_LIMIT.name,
)

FB_FREE_NAME = "DCGM_FI_DEV_FB_FREE"
FB_FREE_HELP = "Framebuffer memory free (in MiB)."
XID_NAME = "DCGM_FI_DEV_XID_ERRORS"
XID_HELP = "Value of the last XID error encountered."
# DCGM field 112 under both its names: DCGM 3.3 renamed it, collector CSVs use either.
CLOCK_REASONS_NAMES = ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS")
CLOCK_REASONS_HELP = "Current clock event (throttle) reasons, a bitmask of NVML's reason bits."

# Readings of the whole GPU, and of each MIG instance (its framebuffer slice).
BEFORE_FB: tuple[CompatMetric, ...] = (
    SM_CLOCK,
    MEM_CLOCK,
    GPU_TEMP,
    POWER_USAGE,
    TOTAL_ENERGY,
    GPU_UTIL,
    MEM_COPY_UTIL,
)
FRAMEBUFFER: tuple[CompatMetric, ...] = (FB_USED, FB_RESERVED, FB_TOTAL)
AFTER_FB: tuple[CompatMetric, ...] = (ECC_SBE, ECC_DBE, ENFORCED_POWER_LIMIT)

# Every name this module can emit, for docs and tests.
METRIC_NAMES: tuple[str, ...] = (
    *(m.name for m in BEFORE_FB),
    XID_NAME,
    FB_FREE_NAME,
    *(m.name for m in FRAMEBUFFER),
    *(m.name for m in AFTER_FB),
    *CLOCK_REASONS_NAMES,
)
LABEL_NAMES: tuple[str, ...] = (
    "gpu",
    "UUID",
    "pci_bus_id",
    "device",
    "modelName",
    "GPU_I_PROFILE",
    "GPU_I_ID",
    "Hostname",
    "DCGM_FI_DRIVER_VERSION",
    "namespace",
    "pod",
    "container",
    "err_code",
    "err_msg",
)


def _xid_rank(xid: int) -> tuple[bool, int]:
    """When several Xid codes arrive within one collection cycle their order is not known (NVML
    events are counted per code): the one reported as "last" is a hardware Xid if there is one
    (the catalog's hardware codes, GPUXidErrors' default list), else the highest code."""
    return xid in HARDWARE_XIDS, xid


class LastXid:
    """dcgm-exporter's Xid gauge holds the last Xid code seen; NVML events are counted per code.

    Each cycle compares a GPU's per-code counts with the previous cycle's: a code whose count
    grew is the newest. Like dcgm-exporter's, the value never returns to 0 (until restart).
    """

    def __init__(self) -> None:
        self._counts: dict[str, dict[int, int]] = {}
        self._last: dict[str, int] = {}

    def update(self, uuid: str, counts: Mapping[int, int]) -> int:
        before = self._counts.get(uuid, {})
        if any(counts.get(xid, 0) < n for xid, n in before.items()):
            before = {}  # the counts restarted (a new Xid watcher): every code counts as new
        grown = [xid for xid, n in counts.items() if n > before.get(xid, 0)]
        if grown:
            self._last[uuid] = max(grown, key=_xid_rank)
        self._counts[uuid] = dict(counts)
        return self._last.get(uuid, 0)


@dataclass(frozen=True, slots=True)
class _Entity:
    """One series' worth of labels and readings: a whole GPU, or one MIG GPU instance."""

    labels: dict[str, str]
    values: Mapping[str, float]
    up: bool
    gpu: DeviceSample | None  # the whole GPU's sample (Xid, clock events); None for MIG


class DcgmCompat:
    """Builds the dcgm-exporter families of each snapshot; keeps the last Xid across cycles.

    Call `families()` once per collection cycle, from one thread (the collector's).
    """

    def __init__(self, hostname: str | None = None) -> None:
        self.hostname = hostname or socket.gethostname()
        self._xids = LastXid()

    def families(self, snapshot: Snapshot) -> tuple[Family, ...]:
        entities = _entities(snapshot, self.hostname)
        out: list[Family] = []
        for metric in BEFORE_FB:
            out.append(_value_family(metric, entities))

        xid = Family(XID_NAME, XID_HELP, GAUGE)
        for entity in entities:
            if entity.gpu is not None:
                last = self._xids.update(entity.gpu.identity.uuid, entity.gpu.xid_counts)
                labels = entity.labels | {"err_code": str(last)}
                # NVIDIA's name for the code; dcgm-exporter's own texts may be worded
                # differently: match alerts on `err_code`, show `err_msg`.
                if last in XID_NAMES:
                    labels["err_msg"] = XID_NAMES[last]
                xid.add_sample(XID_NAME, labels, last)
        out.append(xid)

        free = Family(FB_FREE_NAME, FB_FREE_HELP, GAUGE)
        for entity in entities:
            value = _fb_free_mib(entity.values)
            if entity.up and value is not None:
                free.add_sample(FB_FREE_NAME, entity.labels, value)
        out.append(free)
        for metric in (*FRAMEBUFFER, *AFTER_FB):
            out.append(_value_family(metric, entities))

        masks = [
            (entity.labels, sum(c.CLOCK_EVENT_REASONS.get(r, 0) for r in entity.gpu.clock_events))
            for entity in entities
            if entity.up and entity.gpu is not None and entity.gpu.clock_events is not None
        ]
        for name in CLOCK_REASONS_NAMES:
            reasons = Family(name, CLOCK_REASONS_HELP, GAUGE)
            for labels, mask in masks:
                reasons.add_sample(name, labels, mask)
            out.append(reasons)
        return tuple(out)


def _value_family(metric: CompatMetric, entities: Iterable[_Entity]) -> Family:
    fam = Family(metric.name, metric.help, metric.type)
    for entity in entities:
        value = entity.values.get(metric.source)
        if entity.up and value is not None:
            fam.add_sample(metric.name, entity.labels, metric.convert(value))
    return fam


def _fb_free_mib(values: Mapping[str, float]) -> float | None:
    """DCGM's FB_FREE: total − used − reserved (reserved is 0 where the driver folds it into
    used, before the NVML v2 memory API)."""
    total, used = values.get(c.MEMORY_TOTAL.name), values.get(c.MEMORY_USED.name)
    if total is None or used is None:
        return None
    reserved = values.get(c.MEMORY_RESERVED.name, 0.0)
    return max(0.0, total - used - reserved) / MIB


_FB_SOURCES = frozenset({c.MEMORY_USED.name, c.MEMORY_TOTAL.name, c.MEMORY_RESERVED.name})


def _entities(snapshot: Snapshot, hostname: str) -> list[_Entity]:
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

    entities: list[_Entity] = []
    for members in groups.values():
        first = members[0]
        ident = first.identity
        up = all(m.up for m in members)
        if ident.is_mig:
            pods = _union(holders.get(m.identity.uuid, set()) for m in members)
            labels = _labels(ident, gpus.get(ident.parent_uuid), driver, hostname)
            entities.append(_Entity(labels | _pod_labels(pods), first.values, up, None))
        elif ident.uuid in partitioned:
            # Its framebuffer is its instances', emitted there; pods hold instances, not it.
            values = {k: v for k, v in first.values.items() if k not in _FB_SOURCES}
            labels = _labels(ident, ident, driver, hostname)
            entities.append(_Entity(labels, values, up, first))
        else:
            pods = holders.get(ident.uuid, set())
            labels = _labels(ident, ident, driver, hostname) | _pod_labels(pods)
            entities.append(_Entity(labels, first.values, up, first))
    return entities


def _labels(
    ident: DeviceIdentity, gpu: DeviceIdentity | None, driver: str, hostname: str
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
        labels["Hostname"] = hostname
    if driver:
        labels["DCGM_FI_DRIVER_VERSION"] = driver
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
