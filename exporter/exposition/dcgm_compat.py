"""dcgm-exporter's metric names, units and labels, served beside our own (`--compat.dcgm-exporter`).

For a migration: NVIDIA's Grafana dashboard 12239 and alerts written for dcgm-exporter keep
working while the `nvidia_gpu_*` series are adopted. Three schemas (dcgm_fields.py): `classic`
(dcgm-exporter 3.x to 4.8.2, the default), `4.8.3` (its `hostname` label) and `4.9` (DCGM 4.7's
field names in base units). Every value comes from the same snapshot as ours, so a reading NVML
cannot give is absent here too, never 0. The series and their labels are dcgm_entities.py's;
docs/migrating-from-dcgm-exporter.md has the mapping and every difference.

Two fields are not plain readings:

- The Xid gauge holds the last Xid code seen (dcgm-exporter's meaning), with `err_code` and
  `err_msg` on every code: the catalog's name, dcgm-exporter's "No Error" for 0 and its
  "Unknown Error" for a code the catalog does not name. It is served only on GPUs whose Xid
  events are watched: elsewhere nothing is counted and "No Error" is not known.
- NVLINK_BANDWIDTH_TOTAL (4.9: NVLINK_THROUGHPUT_TOTAL, the same DCGM field 449) is, despite
  dcgm-exporter's `counter` type, DCGM's rate of NVML's NVLink data counters: KiB per second
  over all links and both directions ÷ 1000 ("MB/s"), as an integer. It is computed here the
  same way between two collection cycles, so it is absent in the first.

Counters keep dcgm-exporter's names, which do not end in `_total`: they are `UnsuffixedCounter`s
(text_counters.py), typed `counter` in the Prometheus text format, as dcgm-exporter types them,
and `unknown` in OpenMetrics, which requires a counter's samples to end in `_total`.

Families are built once per collection cycle on the collector thread (`DcgmCompat.families`),
which is also the only thread that touches the state kept across cycles (last Xid, NVLink
counters); the renderer only encodes them.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping

from prometheus_client import Metric as Family

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.exporter.catalog.xid import HARDWARE_XIDS, XID_NAMES
from kube_gpu_exporter.exporter.exposition.dcgm_entities import Entity, entities
from kube_gpu_exporter.exporter.exposition.dcgm_fields import (
    CLASSIC,
    COUNTER,
    FIELDS,
    LABELS,
    SCHEMAS,
    CompatField,
    Name,
    Schema,
)
from kube_gpu_exporter.exporter.exposition.text_counters import UnsuffixedCounter
from kube_gpu_exporter.exporter.snapshot import DeviceSample, Snapshot

GAUGE = "gauge"
# dcgm-exporter's err_msg for code 0 and for a code beyond its table of Xid texts.
NO_ERROR, UNKNOWN_ERROR = "No Error", "Unknown Error"
KIB = 1024.0
_NVLINK = (c.NVLINK_TRANSMIT_BYTES.name, c.NVLINK_RECEIVE_BYTES.name)


def xid_message(code: int) -> str:
    """`err_msg` of an Xid code: NVIDIA's name for it (dcgm-exporter's own wording may differ
    a little: match alerts on `err_code`, show `err_msg`)."""
    return NO_ERROR if code == 0 else XID_NAMES.get(code, UNKNOWN_ERROR)


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


class NvlinkThroughput:
    """DCGM's NVLink "bandwidth" of a GPU between this cycle and the previous one: the growth
    of its NVLink data counters (both directions, every link) in KiB per second ÷ 1000,
    truncated to an integer as DCGM stores it. None (absent) without a previous reading, or
    when the counters went back (an exporter or driver restart)."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[float, float]] = {}

    def update(self, uuid: str, total_bytes: float | None, at: float) -> float | None:
        if total_bytes is None:
            self._last.pop(uuid, None)
            return None
        before = self._last.get(uuid)
        self._last[uuid] = (at, total_bytes)
        if before is None:
            return None
        then, previous = before
        if at <= then or total_bytes < previous:
            return None
        return float(int((total_bytes - previous) / KIB / (at - then) / 1000))


class DcgmCompat:
    """Builds the dcgm-exporter families of each snapshot in one schema; keeps the last Xid and
    the NVLink counters across cycles.

    Call `families()` once per collection cycle, from one thread (the collector's).
    """

    def __init__(self, hostname: str | None = None, schema: Schema = CLASSIC) -> None:
        if schema not in SCHEMAS:
            raise ValueError(f"unknown dcgm-exporter schema {schema!r} (one of {SCHEMAS})")
        self.hostname = hostname or socket.gethostname()
        self.schema = schema
        self._xids = LastXid()
        self._nvlink = NvlinkThroughput()

    def families(self, snapshot: Snapshot) -> tuple[Family, ...]:
        series = entities(snapshot, self.hostname, LABELS[self.schema])
        out: list[Family] = []
        for field in FIELDS:
            name = field.named(self.schema)
            if name is None:
                continue
            family = (
                UnsuffixedCounter(name.name, name.help)
                if field.type == COUNTER
                else Family(name.name, name.help, GAUGE)
            )
            for entity in series:
                sample = self._sample(field, name, entity, snapshot.taken_at)
                if sample is not None:
                    family.add_sample(name.name, *sample)
            out.append(family)
        return tuple(out)

    def _sample(
        self, field: CompatField, name: Name, entity: Entity, at: float
    ) -> tuple[dict[str, str], float] | None:
        """The entity's labels and value for one field, or None where it has none."""
        gpu = entity.gpu
        if field.kind == "xid":
            # Per GPU (not per MIG instance), and kept for a lost GPU: typically its 79. Only
            # where Xid events are watched: elsewhere its 0 ("No Error") is not known.
            if gpu is None or not gpu.xid_watched:
                return None
            last = self._xids.update(gpu.identity.uuid, gpu.xid_counts)
            return entity.labels | {"err_code": str(last), "err_msg": xid_message(last)}, last
        if not entity.up:
            return None
        value: float | None
        if field.kind == "value":
            value = entity.values.get(field.source)
        elif field.kind == "fb_free":
            value = _fb_free_bytes(entity.values)
        elif gpu is None:
            return None  # the rest are the whole GPU's
        elif field.kind == "labelled":
            value = gpu.labelled.get((field.source, field.label))
        elif field.kind == "nvlink":
            value = self._nvlink.update(gpu.identity.uuid, _nvlink_bytes(gpu), at)
        else:
            value = _clock_event_mask(gpu)
        return None if value is None else (entity.labels, name.convert(value))


def _fb_free_bytes(values: Mapping[str, float]) -> float | None:
    """DCGM's FB_FREE: total − used − reserved (reserved is 0 where the driver folds it into
    used, before the NVML v2 memory API)."""
    total, used = values.get(c.MEMORY_TOTAL.name), values.get(c.MEMORY_USED.name)
    if total is None or used is None:
        return None
    reserved = values.get(c.MEMORY_RESERVED.name, 0.0)
    return max(0.0, total - used - reserved)


def _nvlink_bytes(gpu: DeviceSample) -> float | None:
    """Bytes over every NVLink of the GPU in both directions; None if NVML gave no link's."""
    counts = [v for (name, *_link), v in gpu.labelled.items() if name in _NVLINK]
    return sum(counts) if counts else None


def _clock_event_mask(gpu: DeviceSample) -> float | None:
    """DCGM's clock event reasons: the sum of NVML's bits of the active reasons."""
    if gpu.clock_events is None:
        return None
    return float(sum(c.CLOCK_EVENT_REASONS.get(r, 0) for r in gpu.clock_events))
