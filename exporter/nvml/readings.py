"""Reading one device's values through NVML, with per-metric error isolation.

Each reading (a row of exporter/readings_table.py) is one small function here, from a handle
to catalog values in base units. A reading that NVML answers NOT_SUPPORTED is remembered per
device and not asked again; GPU_IS_LOST aborts the device (it is reported down); any other
error drops that one reading this cycle.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from functools import cache
from types import MappingProxyType
from typing import Any

import pynvml

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.exporter import readings_table as t
from kube_gpu_exporter.exporter.catalog.errors import NVML_ERROR_KINDS
from kube_gpu_exporter.exporter.snapshot import ProcessSample

Values = dict[str, float]


def error_kind(exc: pynvml.NVMLError) -> str:
    """The `kind` label of a failed reading (catalog/errors.py lists them)."""
    return NVML_ERROR_KINDS.get(exc.value, "other")


class DriverFeatures:
    """Which versioned NVML entry points this driver has; found out on first use."""

    def __init__(self) -> None:
        self.memory_v2 = True
        self.clock_event_reasons = True


def read_memory(handle: Any, features: DriverFeatures) -> Values:
    """Memory v2 separates driver-reserved memory from `used`; v1 (old drivers) folds it in."""
    if features.memory_v2:
        try:
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
            return {
                c.MEMORY_USED.name: float(mem.used),
                c.MEMORY_TOTAL.name: float(mem.total),
                c.MEMORY_RESERVED.name: float(mem.reserved),
            }
        except pynvml.NVMLError_FunctionNotFound:
            features.memory_v2 = False
    mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
    return {c.MEMORY_USED.name: float(mem.used), c.MEMORY_TOTAL.name: float(mem.total)}


def read_utilization(handle: Any, _: DriverFeatures) -> Values:
    rates = pynvml.nvmlDeviceGetUtilizationRates(handle)
    return {
        c.UTILIZATION.name: rates.gpu / 100.0,
        c.MEMORY_BANDWIDTH_UTILIZATION.name: rates.memory / 100.0,
    }


def read_temperature(handle: Any, _: DriverFeatures) -> Values:
    celsius = pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)
    return {c.TEMPERATURE.name: float(celsius)}


def read_power(handle: Any, _: DriverFeatures) -> Values:
    return {c.POWER.name: pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0}


def read_power_limit(handle: Any, _: DriverFeatures) -> Values:
    return {c.POWER_LIMIT.name: pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0}


def read_energy(handle: Any, _: DriverFeatures) -> Values:
    return {c.ENERGY.name: pynvml.nvmlDeviceGetTotalEnergyConsumption(handle) / 1000.0}


def read_sm_clock(handle: Any, _: DriverFeatures) -> Values:
    mhz = pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)
    return {c.SM_CLOCK.name: mhz * 1e6}


def read_memory_clock(handle: Any, _: DriverFeatures) -> Values:
    mhz = pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM)
    return {c.MEMORY_CLOCK.name: mhz * 1e6}


def read_ecc(handle: Any, _: DriverFeatures) -> Values:
    def count(kind: int) -> float:
        return float(pynvml.nvmlDeviceGetTotalEccErrors(handle, kind, pynvml.NVML_VOLATILE_ECC))

    return {
        c.ECC_CORRECTED.name: count(pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED),
        c.ECC_UNCORRECTED.name: count(pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
    }


def read_encoder(handle: Any, _: DriverFeatures) -> Values:
    utilization, _period_us = pynvml.nvmlDeviceGetEncoderUtilization(handle)
    return {c.ENCODER_UTILIZATION.name: utilization / 100.0}


def read_decoder(handle: Any, _: DriverFeatures) -> Values:
    utilization, _period_us = pynvml.nvmlDeviceGetDecoderUtilization(handle)
    return {c.DECODER_UTILIZATION.name: utilization / 100.0}


def read_clock_events(handle: Any, features: DriverFeatures) -> frozenset[str]:
    """Active clock-event reasons; drivers before R535 only have the "throttle reasons" call."""
    if features.clock_event_reasons:
        try:
            mask = pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle)
            return _reasons(mask)
        except pynvml.NVMLError_FunctionNotFound:
            features.clock_event_reasons = False
    return _reasons(pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle))


def _reasons(mask: int) -> frozenset[str]:
    return frozenset(name for name, bit in c.CLOCK_EVENT_REASONS.items() if mask & bit)


# The inode of the kernel's initial PID namespace (include/linux/proc_ns.h PROC_PID_INIT_INO).
HOST_PID_NAMESPACE_INODE = 0xEFFFFFFC


def in_host_pid_namespace(ns_link: str = "/proc/self/ns/pid") -> bool | None:
    """Whether this process shares the host's PID namespace (a pod with hostPID).

    NVML lists only the compute processes of the caller's PID namespace: on a real H100, a
    process in its own namespace saw an empty list while another namespace's process held
    1.7 GB. Without hostPID the exporter sees none of the workloads' processes, so a zero
    process count means nothing. None when it cannot be told (no /proc).
    """
    try:
        return os.stat(ns_link).st_ino == HOST_PID_NAMESPACE_INODE
    except OSError:
        return None


class ProcessReader:
    """Compute processes and their SM utilization since the previous cycle, per device.

    NVML keeps a ring of utilization samples; asking with the newest timestamp already seen
    returns only newer ones, so each cycle averages exactly the samples of its own window.
    A process without a sample in the window ran no kernel: its share is 0.
    """

    def __init__(self) -> None:
        self._last_seen: dict[str, int] = {}

    def read(self, uuid: str, handle: Any, with_utilization: bool) -> tuple[ProcessSample, ...]:
        procs = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
        shares = self._utilization(uuid, handle) if with_utilization else None
        return tuple(
            ProcessSample(
                pid=int(p.pid),
                # pynvml's None is NVML_VALUE_NOT_AVAILABLE: unknown, not none used
                used_memory_bytes=None if p.usedGpuMemory is None else float(p.usedGpuMemory),
                sm_utilization=None if shares is None else shares.get(int(p.pid), 0.0),
            )
            for p in procs
        )

    def _utilization(self, uuid: str, handle: Any) -> dict[int, float] | None:
        try:
            samples = pynvml.nvmlDeviceGetProcessUtilization(handle, self._last_seen.get(uuid, 0))
        except pynvml.NVMLError_NotFound:
            return {}  # no process ran a kernel since the last cycle
        except pynvml.NVMLError_NotSupported:
            return None
        per_pid: dict[int, list[float]] = {}
        for sample in samples:
            per_pid.setdefault(int(sample.pid), []).append(sample.smUtil / 100.0)
            self._last_seen[uuid] = max(self._last_seen.get(uuid, 0), int(sample.timeStamp))
        return {pid: sum(v) / len(v) for pid, v in per_pid.items()}

    def forget(self, uuids: set[str]) -> None:
        """Drop the newest sample time of the devices named (no longer discovered)."""
        for uuid in uuids & set(self._last_seen):
            del self._last_seen[uuid]


Reader = Callable[[Any, DriverFeatures], Values]

# The reader of every row of plain numbers in the readings table, by the row's key. The rows
# of other shapes have their own code: read_clock_events and ProcessReader.
READERS: Mapping[str, Reader] = MappingProxyType(
    {
        t.UTILIZATION.key: read_utilization,
        t.MEMORY.key: read_memory,
        t.TEMPERATURE.key: read_temperature,
        t.POWER.key: read_power,
        t.POWER_LIMIT.key: read_power_limit,
        t.ENERGY.key: read_energy,
        t.SM_CLOCK.key: read_sm_clock,
        t.MEMORY_CLOCK.key: read_memory_clock,
        t.ECC.key: read_ecc,
        t.ENCODER.key: read_encoder,
        t.DECODER.key: read_decoder,
    }
)


@cache
def readers_on(where: t.Where) -> Mapping[str, Reader]:
    """What is read from one kind of device, by row key: the table says where NVML answers.

    A MIG instance has its own framebuffer slice and nothing else; utilization is skipped on
    MIG-enabled GPUs, where NVML never answers it.
    """
    rows = (row for row in t.numbers_on(where) if row.source is t.Source.CALL)
    return MappingProxyType({row.key: READERS[row.key] for row in rows})


def fields_on(where: t.Where) -> tuple[t.Reading, ...]:
    """The rows read through the device's one batched field-value call."""
    return tuple(row for row in t.numbers_on(where) if row.source is t.Source.FIELDS)
