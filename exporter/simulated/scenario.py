"""Scenario files: a simulated node's devices and their readings over time.

One format drives both the `--simulate` backend and the fake libnvidia-ml that the tests
compile from C, so the demo and the tests describe a node the same way. A scenario is parsed
and validated once; `Scenario.state_at(t)` gives the node as it is `t` seconds into the run.

Readings change at timeline keyframes: a keyframe holds its values until the next one, or,
with `ramp: true`, the values move linearly from the previous keyframe to it (timeline.py);
a keyframe's `processes` replace the list, and ramp the same way, process by process.
The `readings:` keys, their defaults and bounds, and the keys that may be declared
`unsupported` come from the readings table (exporter/readings_table.py), as do the names the
evaluated state holds. Every number must be finite and within 2**53 (a float sample's exact
range), whichever key holds it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from kube_gpu_exporter.exporter.catalog import CLOCK_EVENT_REASONS
from kube_gpu_exporter.exporter.input_errors import InputError, validation_problem
from kube_gpu_exporter.exporter.input_yaml import load_yaml, parse_yaml
from kube_gpu_exporter.exporter.readings_table import (
    READINGS,
    Kind,
    ScenarioField,
    Where,
    declarable,
    numbers_on,
)
from kube_gpu_exporter.exporter.simulated.process_timeline import processes_at
from kube_gpu_exporter.exporter.simulated.timeline import (
    CLOCK_EVENTS_KEY,
    FIELDS,
    NUMERIC,
    energy_at,
    number,
    throttled_seconds,
    value_at,
)
from kube_gpu_exporter.exporter.units import parse_duration, parse_size


class ScenarioError(InputError):
    """A scenario file that cannot be used; the message names the file, key and value."""


def _size(value: Any) -> Any:
    return parse_size(value) if isinstance(value, str) else value


def _duration(value: Any) -> Any:
    return parse_duration(value) if isinstance(value, str) else value


Bytes = Annotated[int, BeforeValidator(_size), Field(ge=0)]
Seconds = Annotated[float, BeforeValidator(_duration), Field(ge=0)]
Ratio = Annotated[float, Field(ge=0, le=1)]
ClockEvent = Annotated[str, Field(pattern="^(" + "|".join(CLOCK_EVENT_REASONS) + ")$")]

# Reading keys that may be declared unsupported (NVML answers NOT_SUPPORTED for them): a row's
# keys, and each value of a field-value or GPM row on its own.
READING_KEYS = tuple(key for row in READINGS for key in declarable(row))
ReadingKey = Annotated[str, Field(pattern="^(" + "|".join(READING_KEYS) + ")$")]


# Every number of a scenario ends as a float sample: beyond 2**53 a float no longer holds
# every whole number, and YAML reads .inf, .nan and 400-digit integers without complaint
# (one in memory_total_bytes started the exporter and then failed every cycle).
MAX_NUMBER = 2**53
# Time-slicing replicas of one GPU: the demo's kubelet lists one device id per replica.
MAX_REPLICAS = 1024


def _check_numbers(value: Any) -> None:
    """Raise ValueError for a number, anywhere in a field's value, that is not finite or is
    beyond ±MAX_NUMBER (lists and mappings, keys included, are looked into)."""
    if isinstance(value, bool):
        return
    if isinstance(value, (int, float)):
        # abs() first: math.isfinite() cannot take an int beyond a float's range
        if abs(value) > MAX_NUMBER or not math.isfinite(value):
            raise ValueError(f"must be a finite number within ±2**53 ({MAX_NUMBER})")
    elif isinstance(value, Mapping):
        for key, item in value.items():
            _check_numbers(key)
            _check_numbers(item)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for item in value:
            _check_numbers(item)


class _Model(BaseModel):
    """Every scenario model: unknown keys refused, and every number finite and within 2**53,
    whichever field holds it (a new field needs no bound of its own to be safe)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="after")
    @classmethod
    def _numbers_within_reason(cls, value: Any) -> Any:
        _check_numbers(value)
        return value


def _annotation(value: ScenarioField) -> Any:
    """The type a table field is validated as; None (absent) holds the previous value."""
    if value.kind is Kind.REASONS:
        return list[ClockEvent] | None
    if value.kind is Kind.BYTES:
        return Bytes | None
    number = int if value.kind is Kind.COUNT else float
    return Annotated[number, Field(ge=value.minimum, le=value.maximum)] | None


if TYPE_CHECKING:  # the fields are the table's; code reads them by name (getattr)

    class Readings(_Model):
        """Values that change over time. Absent keys keep their previous value."""

else:
    Readings = create_model(
        "Readings",
        __base__=_Model,
        __doc__="Values that change over time. Absent keys keep their previous value.",
        __module__=__name__,
        **{name: (_annotation(value), None) for name, value in FIELDS.items()},
    )


class Process(_Model):
    pid: Annotated[int, Field(gt=0)]
    used_memory_bytes: Bytes = 0
    sm_utilization: Ratio = 0.0
    gpu_instance_id: Annotated[int, Field(ge=0)] | None = None
    compute_instance_id: Annotated[int, Field(ge=0)] | None = None


class Keyframe(_Model):
    at: Seconds
    ramp: bool = False
    readings: Readings = Readings()
    lost: bool | None = None
    xid: list[Annotated[int, Field(gt=0)]] = []
    processes: list[Process] | None = None


class MigKeyframe(_Model):
    at: Seconds
    ramp: bool = False
    readings: Readings = Readings()


class MigSpec(_Model):
    profile: Annotated[str, Field(pattern=r"^\d+g\.\d+gb(\+\w+)?$")]
    gpu_instance_id: Annotated[int, Field(ge=0)]
    compute_instance_id: Annotated[int, Field(ge=0)] = 0
    uuid: str | None = None
    memory_total_bytes: Bytes
    readings: Readings = Readings()
    timeline: list[MigKeyframe] = []


class DeviceSpec(_Model):
    uuid: str | None = None
    name: str = "NVIDIA H100 80GB HBM3"
    pci_bus_id: str | None = None
    # N of /dev/nvidiaN; the driver need not number GPUs in NVML's order (default: the index)
    minor: Annotated[int, Field(ge=0, le=255)] | None = None
    memory_total_bytes: Bytes = 80 << 30
    memory_reserved_bytes: Bytes = 512 << 20
    power_limit_watts: Annotated[float, Field(gt=0)] = 700.0
    energy_joules: Annotated[float, Field(ge=0)] = 0.0
    nvlink_links: Annotated[int, Field(ge=0, le=18)] = 0  # NVLinks the field values report
    readings: Readings = Readings()
    unsupported: list[ReadingKey] = []
    processes: list[Process] = []
    mig: list[MigSpec] = []
    timeline: list[Keyframe] = []


class PodSpec(_Model):
    """A container the kubelet reports as holding one device, named by its index in `devices`
    (and in that device's `mig` list); `replica` n makes the id `<uuid>::<n>` (time-slicing)."""

    namespace: str = Field(min_length=1)
    name: str = Field(min_length=1)
    container: str = Field(default="main", min_length=1)
    device: Annotated[int, Field(ge=0)]
    mig: Annotated[int, Field(ge=0)] | None = None
    replica: Annotated[int, Field(ge=0)] | None = None


class KubeletSpec(_Model):
    """What the node's kubelet reports through pod-resources: read by the demo's kubelet, not
    by the exporter. `replicas` maps a device index to its time-slicing replica count."""

    pods: list[PodSpec] = []
    replicas: dict[int, Annotated[int, Field(ge=2, le=MAX_REPLICAS)]] = {}


class ScenarioSpec(_Model):
    description: str = ""
    driver_version: str = "550.54.15"
    devices: list[DeviceSpec] = Field(min_length=1)
    kubelet: KubeletSpec = KubeletSpec()

    @model_validator(mode="after")
    def _minor_numbers_unique(self) -> ScenarioSpec:
        minors = [i if d.minor is None else d.minor for i, d in enumerate(self.devices)]
        if len(set(minors)) != len(minors):
            raise ValueError(f"devices: two GPUs have the same minor number ({minors})")
        return self

    @model_validator(mode="after")
    def _kubelet_names_real_devices(self) -> ScenarioSpec:
        for index in self.kubelet.replicas:
            if not 0 <= index < len(self.devices) or self.devices[index].mig:
                raise ValueError(f"kubelet.replicas: {index} is not a whole GPU of `devices`")
        for pod in self.kubelet.pods:
            where = f"kubelet.pods: {pod.namespace}/{pod.name}"
            if pod.device >= len(self.devices):
                raise ValueError(f"{where}: device {pod.device} is not in `devices`")
            migs = self.devices[pod.device].mig
            if (pod.mig is None) != (not migs) or (pod.mig is not None and pod.mig >= len(migs)):
                raise ValueError(f"{where}: mig must name one of device {pod.device}'s instances")
            shared = pod.device in self.kubelet.replicas
            if (pod.replica is not None) != shared or (
                pod.replica is not None and pod.replica >= self.kubelet.replicas[pod.device]
            ):
                raise ValueError(f"{where}: replica must be set exactly on time-sliced devices")
        return self


# --- the evaluated state at one moment -------------------------------------------------------


class _ByName:
    """A state's numbers by scenario name, also as attributes: `state.power_watts`.

    They are keyed by the names the readings table plays its metrics from, so a new reading
    needs no new field here.
    """

    __slots__ = ()
    readings: Mapping[str, float]

    def __getattr__(self, name: str) -> float:
        if name != "readings" and name in self.readings:
            return self.readings[name]
        raise AttributeError(f"{type(self).__name__} has no {name!r}")


@dataclass(frozen=True, slots=True)
class MigState(_ByName):
    uuid: str
    profile: str
    gpu_instance_id: int
    compute_instance_id: int
    readings: Mapping[str, float] = field(hash=False)  # memory_used_bytes, memory_total_bytes


@dataclass(frozen=True, slots=True)
class DeviceState(_ByName):
    index: int
    uuid: str
    name: str
    pci_bus_id: str
    minor: int
    lost: bool
    readings: Mapping[str, float] = field(hash=False)  # the table's and the spec's fixed ones
    clock_events: frozenset[str]
    unsupported: frozenset[str]
    nvlink_links: int
    xids: tuple[int, ...]  # every Xid event up to now, oldest first
    processes: tuple[Process, ...]
    mig: tuple[MigState, ...]


@dataclass(frozen=True, slots=True)
class NodeState:
    driver_version: str
    devices: tuple[DeviceState, ...]


_MIG = [f.name for row in numbers_on(Where.MIG_INSTANCE) for f in row.fields]


class Scenario:
    """A validated scenario; evaluate it at any time with `state_at`."""

    def __init__(self, spec: ScenarioSpec, source: str = "<scenario>") -> None:
        self.spec = spec
        self.source = source
        self._frames = [sorted(d.timeline, key=lambda f: f.at) for d in spec.devices]
        self._mig_frames = [
            [sorted(m.timeline, key=lambda f: f.at) for m in d.mig] for d in spec.devices
        ]

    @classmethod
    def load(cls, path: str | Path) -> Scenario:
        """The scenario in a file, read by the one input-file reader (input_yaml.py)."""
        try:
            data = load_yaml(path, "scenario")
        except InputError as exc:
            raise ScenarioError(str(exc)) from None
        return cls._validated(data, str(path))

    @classmethod
    def parse(cls, text: str, source: str = "<scenario>") -> Scenario:
        try:
            data = parse_yaml(text, source)
        except InputError as exc:
            raise ScenarioError(str(exc)) from None
        return cls._validated(data, source)

    @classmethod
    def _validated(cls, data: Any, source: str) -> Scenario:
        try:
            spec = ScenarioSpec.model_validate(data)
        except ValidationError as exc:
            raise ScenarioError(f"{source}: {validation_problem(exc)}") from None
        return cls(spec, source)

    def state_at(self, t: float) -> NodeState:
        devices = tuple(self._device_at(i, d, t) for i, d in enumerate(self.spec.devices))
        return NodeState(driver_version=self.spec.driver_version, devices=devices)

    def _device_at(self, index: int, spec: DeviceSpec, t: float) -> DeviceState:
        frames = self._frames[index]
        past = [f for f in frames if f.at <= t]
        lost = next((f.lost for f in reversed(past) if f.lost is not None), False)
        values = {key: value_at(key, spec.readings, frames, t) for key in FIELDS}
        mig = tuple(self._mig_at(index, j, m, t) for j, m in enumerate(spec.mig))
        numbers = {key: number(key, values[key]) for key in NUMERIC}
        # A MIG-enabled GPU's framebuffer holds at least what its instances use.
        used = sum(m.memory_used_bytes for m in mig)
        numbers["memory_used_bytes"] = max(numbers["memory_used_bytes"], used)
        return DeviceState(
            index=index,
            uuid=spec.uuid or f"GPU-{index:08x}-0000-4000-8000-{index:012x}",
            name=spec.name,
            pci_bus_id=spec.pci_bus_id or f"00000000:{0x18 + index:02X}:00.0",
            minor=index if spec.minor is None else spec.minor,
            lost=lost,
            readings={
                **numbers,
                "memory_total_bytes": spec.memory_total_bytes,
                "memory_reserved_bytes": spec.memory_reserved_bytes,
                "power_limit_watts": spec.power_limit_watts,
                "energy_joules": energy_at(spec.energy_joules, spec.readings, frames, t),
                **throttled_seconds(spec.readings, frames, t),
            },
            clock_events=frozenset(values[CLOCK_EVENTS_KEY]),
            unsupported=frozenset(spec.unsupported),
            nvlink_links=spec.nvlink_links,
            xids=tuple(x for f in past for x in f.xid),
            processes=processes_at(spec.processes, frames, t),
            mig=mig,
        )

    def _mig_at(self, index: int, j: int, spec: MigSpec, t: float) -> MigState:
        frames = self._mig_frames[index][j]
        numbers = {key: number(key, value_at(key, spec.readings, frames, t)) for key in _MIG}
        return MigState(
            uuid=spec.uuid or f"MIG-{index:04x}{spec.gpu_instance_id:04x}-0000-4000-8000-{j:012x}",
            profile=spec.profile,
            gpu_instance_id=spec.gpu_instance_id,
            compute_instance_id=spec.compute_instance_id,
            # A MIG instance's framebuffer slice has no driver-reserved part.
            readings={
                **numbers,
                "memory_total_bytes": spec.memory_total_bytes,
                "memory_reserved_bytes": 0,
            },
        )
