"""What a row of the readings table is (exporter/readings_table.py holds the rows).

A row is one NVML reading on one device: which catalog metrics it yields, how the exporter
reads it (its own call, a share of the device's one batched field-value call, or a GPM metric
computed between two cycles' samples), where NVML answers it, its scenario keys, and how the
fake libnvidia-ml writes it in its state file. This module imports nothing but the catalog.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, Flag, auto

from kube_gpu_exporter.exporter import catalog as c


class Where(Flag):
    """The devices NVML answers a reading for."""

    GPU = auto()  # a whole GPU, MIG mode off
    MIG_ENABLED_GPU = auto()  # a GPU partitioned into MIG instances
    MIG_INSTANCE = auto()  # one MIG instance: its own framebuffer slice, nothing else


WHOLE_GPU = Where.GPU | Where.MIG_ENABLED_GPU
EVERY_DEVICE = WHOLE_GPU | Where.MIG_INSTANCE


class Shape(Enum):
    """What a reading gives, and so where a DeviceSample holds it."""

    NUMBERS = "numbers"  # one number per metric (DeviceSample.values); a generic reader
    REASONS = "reasons"  # the active clock-event reasons (DeviceSample.clock_events)
    PROCESSES = "processes"  # the compute processes (DeviceSample.processes)


class Source(Enum):
    """How the NVML sampler reads a row of plain numbers."""

    CALL = "call"  # its own NVML call(s): a reader in exporter/nvml/readings.py
    FIELDS = "fields"  # field values: every such row of a device in one batched call a cycle
    GPM = "gpm"  # GPM metrics between the previous cycle's sample and this cycle's


class Kind(Enum):
    """How the scenario schema validates a value."""

    NUMBER = "number"  # a float within the field's bounds
    COUNT = "count"  # an integer within the field's bounds
    BYTES = "bytes"  # an integer or a size string ("80GiB")
    REASONS = "reasons"  # a list of clock-event reason names


class Encoding(Enum):
    """How the fake's state file writes a state value: in the integer unit NVML answers in."""

    INTEGER = "integer"  # as it is (bytes, counts)
    WHOLE = "whole"  # rounded half up, never negative (°C, MHz)
    MILLI = "milli"  # ×1000 and rounded (W → mW, J → mJ)
    PERCENT = "percent"  # a ratio as whole percents, rounded half up
    MASK = "mask"  # clock-event reason names as the nvmlClocksEventReason bit mask, hex
    NANO = "nano"  # ×1e9 and rounded (s → ns): clock-event durations
    KIB = "kib"  # ÷1024 and rounded (bytes → KiB): NVLink throughput counters
    GPM_PERCENT = "gpm_percent"  # a ratio as a percent with decimals (GPM's unit)
    GPM_MIB_RATE = "gpm_mib_rate"  # bytes/s as MiB/s with decimals (GPM's unit)


# Each encoding's NVML unit in the metric's base unit: what a reader multiplies NVML's number
# by (the fake's state writer divides by it).
NVML_UNIT: dict[Encoding, float] = {
    Encoding.INTEGER: 1.0,
    Encoding.WHOLE: 1.0,
    Encoding.MILLI: 1e-3,
    Encoding.PERCENT: 1e-2,
    Encoding.NANO: 1e-9,
    Encoding.KIB: 1024.0,
    Encoding.GPM_PERCENT: 1e-2,
    Encoding.GPM_MIB_RATE: float(1 << 20),
}


def from_nvml(encoding: Encoding, number: float) -> float:
    """NVML's number in the metric's base unit. Sub-unit factors divide (75 / 100 is exactly
    0.75, 75 * 0.01 is not), so a reading equals the value the scenario wrote for the fake."""
    factor = NVML_UNIT[encoding]
    return number / round(1 / factor) if factor < 1 else number * factor


@dataclass(frozen=True, slots=True)
class ScenarioField:
    """A value a scenario may set, and change over time, under `readings:`."""

    name: str
    default: float | tuple[str, ...]
    kind: Kind = Kind.NUMBER
    minimum: float | None = 0
    maximum: float | None = None


@dataclass(frozen=True, slots=True)
class Entry:
    """One (fieldId, scopeId) of a GPU's batched field-value call, and the label values of the
    series its answer becomes (the metric's extra labels, in the metric's order)."""

    field_id: int
    scope: int
    labels: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Value:
    """One catalog metric of a reading and the scenario state value it is played from.

    `state` names a ScenarioField, or a fixed value of the device spec (memory_total_bytes,
    power_limit_watts, ...); `scale` turns the state's unit into the metric's base unit.

    Values of FIELDS and GPM rows also say which NVML number they are (`nvml_id`: the field
    id or the GPM metric id) and in which unit NVML gives it (`encoding`); `bits` is the width
    of a field's unsigned value (32: NVML_VALUE_TYPE_UNSIGNED_INT, which wraps), `per_link`
    reads the field once per NVLink: with one field id and scopeId = link, or, where nvml.h
    gives each link its own id (`link_ids`, the _L0…_L11 fields), with link n's id. `label`
    is the value of the metric's extra label after `link`; the scenario may declare the value
    unsupported by its `state` name.
    """

    metric: c.Metric
    state: str
    scale: float = 1.0
    nvml_id: int = 0
    encoding: Encoding = Encoding.INTEGER
    bits: int = 64
    per_link: bool = False
    link_ids: tuple[int, ...] = ()
    label: str = ""

    def entries(self, links: int) -> tuple[Entry, ...]:
        """What this value is asked as on a GPU with `links` NVLinks, and its series' labels.

        One entry for a device-wide value (for a value not read as a field value only its
        labels count); one per link for a per-link one. The _L0…_L11 fields predate scopeId
        (the member was `unused`, to be 0): the link is in the id, so they are asked with
        scopeId 0, and only for the links nvml.h has ids for (an H100's links 12–17 have none).
        """
        tail = (self.label,) if self.label else ()
        if not self.per_link:
            return (Entry(self.nvml_id, 0, tail),)
        if self.link_ids:
            count = min(links, len(self.link_ids))
            return tuple(Entry(self.link_ids[n], 0, (str(n), *tail)) for n in range(count))
        return tuple(Entry(self.nvml_id, n, (str(n), *tail)) for n in range(links))


@dataclass(frozen=True, slots=True)
class StateLine:
    """A whole GPU's line in the fake's state file: `name`, then each state value encoded.

    Rows naming the same line share it, each adding its values in table order.
    """

    name: str
    values: tuple[tuple[str, Encoding], ...]


@dataclass(frozen=True, slots=True)
class Reading:
    """One NVML reading: one row of the table."""

    key: str  # the reader's key, and the NVML sampler's NOT_SUPPORTED memory per device
    values: tuple[Value, ...]
    unsupported: tuple[str, ...]  # scenario keys that declare it unsupported
    functions: tuple[str, ...]  # the NVML C functions it calls
    where: Where = WHOLE_GPU
    shape: Shape = Shape.NUMBERS
    source: Source = Source.CALL
    fields: tuple[ScenarioField, ...] = ()  # its time-varying scenario values
    line: StateLine | None = None  # None: the fake writes it its own way

    @property
    def metrics(self) -> tuple[c.Metric, ...]:
        return tuple(value.metric for value in self.values)
