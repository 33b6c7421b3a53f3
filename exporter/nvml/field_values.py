"""Hardware counters through `nvmlDeviceGetFieldValues`: one batched call per GPU per cycle.

The readings table's FIELDS rows (exporter/readings_batched.py) name the field ids; every
value comes back with its own return code, so a field the GPU or driver lacks is dropped for
good and the rest stay. NVLink fields are per link (scopeId = link, or one field id per link
for the error counters): the link count is asked once, with the first batch, and per-link
fields are read from the next cycle on; a GPU without NVLink asks none.

Counters are accumulated from their increments, modulo the width of the value NVML returns:
the PCIe byte counters are 32-bit and wrap every 4 GiB, so a served counter only resets when
the exporter restarts. One wrap per cycle is the limit: at more than 4 GiB per collection
interval (0.8 GB/s at 5 s) use the GPM PCIe rate instead.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pynvml

from kube_gpu_exporter.exporter.catalog import MetricType
from kube_gpu_exporter.exporter.reading import Entry, Reading, Value, from_nvml
from kube_gpu_exporter.exporter.readings_batched import NVLINK_LINK_COUNT_FIELD

SCOPE_DEVICE = 0

# NVML value type → the member of nvmlValue_t holding it, and its width in bits.
VALUE_TYPES: dict[int, tuple[str, int]] = {
    pynvml.NVML_VALUE_TYPE_DOUBLE: ("dVal", 0),
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: ("uiVal", 32),
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: ("ulVal", 64),
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: ("ullVal", 64),
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: ("sllVal", 0),
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: ("siVal", 0),
    pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: ("usVal", 16),
}

Series = tuple[str, ...]  # (catalog metric name, *its extra labels' values)


@dataclass(frozen=True, slots=True)
class _Ask:
    """One (field id, scope) of the batch and where its answer goes."""

    value: Value
    entry: Entry


@dataclass
class FieldResult:
    """One GPU's field values this cycle."""

    values: dict[str, float]
    labelled: dict[Series, float]
    failed: list[int]  # return codes other than NOT_SUPPORTED


class FieldReader:
    """Field values of every GPU, keyed by uuid: what to ask, and the counters' running sums."""

    def __init__(self) -> None:
        self._links: dict[str, int] = {}
        self._unsupported: set[tuple[str, int, int]] = set()  # (uuid, field id, scope)
        self._last_raw: dict[tuple[str, int, int], int] = {}
        self._totals: dict[tuple[str, int, int], int] = {}

    def read(self, uuid: str, handle: Any, rows: Iterable[Reading]) -> FieldResult:
        asks = [a for a in self._asks(uuid, rows) if self._wanted(uuid, a)]
        ids = [(a.entry.field_id, a.entry.scope) for a in asks]
        if uuid not in self._links:
            ids.append((NVLINK_LINK_COUNT_FIELD, SCOPE_DEVICE))
        answers = pynvml.nvmlDeviceGetFieldValues(handle, ids) if ids else []
        result = FieldResult({}, {}, [])
        for ask, answer in zip(asks, answers, strict=False):
            self._take(uuid, ask, answer, result)
        if uuid not in self._links:
            count = answers[len(asks)]
            ok = count.nvmlReturn == pynvml.NVML_SUCCESS
            self._links[uuid] = int(_raw(count)) if ok else 0
        return result

    def _asks(self, uuid: str, rows: Iterable[Reading]) -> Iterable[_Ask]:
        links = self._links.get(uuid, 0)
        for row in rows:
            for value in row.values:
                for entry in value.entries(links):
                    yield _Ask(value, entry)

    def _wanted(self, uuid: str, ask: _Ask) -> bool:
        return (uuid, ask.entry.field_id, ask.entry.scope) not in self._unsupported

    def _take(self, uuid: str, ask: _Ask, answer: Any, result: FieldResult) -> None:
        key = (uuid, ask.entry.field_id, ask.entry.scope)
        if answer.nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED:
            self._unsupported.add(key)
            return
        if answer.nvmlReturn != pynvml.NVML_SUCCESS:
            result.failed.append(int(answer.nvmlReturn))
            return
        raw = _raw(answer)
        if ask.value.metric.type is MetricType.COUNTER:
            raw = self._accumulate(key, int(raw), VALUE_TYPES.get(answer.valueType, ("", 0))[1])
        number = from_nvml(ask.value.encoding, raw) * ask.value.scale
        if ask.entry.labels:
            result.labelled[(ask.value.metric.name, *ask.entry.labels)] = number
        else:
            result.values[ask.value.metric.name] = number

    def _accumulate(self, key: tuple[str, int, int], raw: int, bits: int) -> int:
        """A counter's running total: its increments summed, modulo the value's width."""
        last = self._last_raw.get(key)
        self._last_raw[key] = raw
        if last is None:
            self._totals[key] = raw
        elif raw >= last:
            self._totals[key] += raw - last
        elif 0 < bits <= 32:
            self._totals[key] += raw - last + (1 << bits)  # wrapped past its width
        else:
            self._totals[key] += raw  # a 64-bit counter went back: the GPU was reset
        return self._totals[key]

    def forget(self, uuids: set[str]) -> None:
        """Drop what is known of the GPUs named (no longer discovered): a GPU back under one of
        these uuids is asked everything afresh and its counters start from NVML's reading."""
        self._links = {u: n for u, n in self._links.items() if u not in uuids}
        self._unsupported = {k for k in self._unsupported if k[0] not in uuids}
        self._last_raw = {k: v for k, v in self._last_raw.items() if k[0] not in uuids}
        self._totals = {k: v for k, v in self._totals.items() if k[0] not in uuids}


def _raw(answer: Any) -> int | float:
    member, _bits = VALUE_TYPES.get(answer.valueType, ("ullVal", 64))
    number: int | float = getattr(answer.value, member)
    return number
