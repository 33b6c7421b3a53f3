"""The readings table: each NVML reading once, with every name it has anywhere.

A reading is one NVML call on one device (sm_clock and memory_clock are two: the same C
function, asked for two clock types). Its row says which catalog metrics it yields, where NVML
answers it, which scenario keys describe it and may declare it `unsupported`, which NVML C
functions it calls, and its line in the fake libnvidia-ml's state file. From this one table:

- the NVML sampler picks the readers to run on a GPU, a MIG-enabled GPU and a MIG instance
  (exporter/nvml/readings.py has the pynvml reader of every row, keyed by `Reading.key`);
- the simulated backend plays the values from the scenario state, and drops every row that
  calls a function an `unsupported` key faults, as a real driver's NOT_SUPPORTED does;
- the scenario schema takes its `readings:` keys, defaults and bounds, and the keys that may
  be declared `unsupported`;
- the fake's state writer (tests/fakes/fakenvml) takes its per-device value lines and the
  functions it makes answer NOT_SUPPORTED.

Adding a scalar reading touches: its catalog metric, a row here, its reader in
exporter/nvml/readings.py (READERS), fake_nvml.c (parse the line, answer the C function) and
docs/metrics.md. tests/unit/test_readings_table.py fails until they all agree. Only a value
that is fixed per device rather than time-varying (like power_limit_watts) is also a field of
the scenario's DeviceSpec.

This module imports nothing but the catalog: `--simulate` runs without NVML, so the simulated
backend must be able to read the table without loading pynvml.
"""

from __future__ import annotations

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.exporter.reading import (
    EVERY_DEVICE,
    WHOLE_GPU,
    Encoding,
    Kind,
    Reading,
    ScenarioField,
    Shape,
    Source,
    StateLine,
    Value,
    Where,
)
from kube_gpu_exporter.exporter.readings_batched import (
    CLOCK_EVENT_DURATIONS,
    GPM,
    MEMORY_TEMPERATURE,
    NVLINK_BYTES,
    NVLINK_ERRORS,
    PCIE_BYTES,
    PCIE_REPLAYS,
    POWER_MANAGEMENT_LIMIT,
    RECOVERY_ACTION,
    REMAPPED_ROWS,
)

__all__ = [
    "CLOCK_EVENT_DURATIONS",
    "DECODER",
    "ENCODER",
    "EVERY_DEVICE",
    "GPM",
    "READINGS",
    "WHOLE_GPU",
    "Encoding",
    "Kind",
    "Reading",
    "ScenarioField",
    "Shape",
    "Source",
    "StateLine",
    "Value",
    "Where",
    "declarable",
    "faulted_functions",
    "numbers_on",
    "unsupported_values",
]
UTILIZATION = Reading(
    key="utilization",
    values=(
        Value(c.UTILIZATION, "utilization"),
        Value(c.MEMORY_BANDWIDTH_UTILIZATION, "memory_bandwidth_utilization"),
    ),
    unsupported=("utilization", "memory_bandwidth_utilization"),
    functions=("nvmlDeviceGetUtilizationRates",),
    where=Where.GPU,  # NVML never answers it on MIG-enabled GPUs nor on their instances
    fields=(
        ScenarioField("utilization", 0.0, minimum=0, maximum=1),
        ScenarioField("memory_bandwidth_utilization", 0.0, minimum=0, maximum=1),
    ),
    line=StateLine(
        "utilization",
        (("utilization", Encoding.PERCENT), ("memory_bandwidth_utilization", Encoding.PERCENT)),
    ),
)
MEMORY = Reading(
    key="memory",
    values=(
        Value(c.MEMORY_USED, "memory_used_bytes"),
        Value(c.MEMORY_TOTAL, "memory_total_bytes"),
        Value(c.MEMORY_RESERVED, "memory_reserved_bytes"),
    ),
    unsupported=("memory",),
    functions=("nvmlDeviceGetMemoryInfo", "nvmlDeviceGetMemoryInfo_v2"),
    where=EVERY_DEVICE,  # the fake gives a MIG instance's on its `mig` line
    fields=(ScenarioField("memory_used_bytes", 0, Kind.BYTES),),
    line=StateLine(
        "memory",
        (
            ("memory_total_bytes", Encoding.INTEGER),
            ("memory_reserved_bytes", Encoding.INTEGER),
            ("memory_used_bytes", Encoding.INTEGER),
        ),
    ),
)
TEMPERATURE = Reading(
    key="temperature",
    values=(Value(c.TEMPERATURE, "temperature_celsius"),),
    unsupported=("temperature_celsius",),
    functions=("nvmlDeviceGetTemperature",),
    fields=(ScenarioField("temperature_celsius", 35.0, minimum=-50, maximum=200),),
    line=StateLine("temperature", (("temperature_celsius", Encoding.WHOLE),)),
)
POWER = Reading(
    key="power",
    values=(Value(c.POWER, "power_watts"),),
    unsupported=("power_watts",),
    functions=("nvmlDeviceGetPowerUsage",),
    fields=(ScenarioField("power_watts", 70.0),),
    line=StateLine("power", (("power_watts", Encoding.MILLI),)),
)
POWER_LIMIT = Reading(
    key="power_limit",
    values=(Value(c.POWER_LIMIT, "power_limit_watts"),),  # fixed: the device spec's
    unsupported=("power_limit_watts",),
    functions=("nvmlDeviceGetEnforcedPowerLimit",),
    line=StateLine("power_limit", (("power_limit_watts", Encoding.MILLI),)),
)
ENERGY = Reading(
    key="energy",
    values=(Value(c.ENERGY, "energy_joules"),),  # the scenario integrates the power curve
    unsupported=("energy",),
    functions=("nvmlDeviceGetTotalEnergyConsumption",),
    line=StateLine("energy", (("energy_joules", Encoding.MILLI),)),
)


def _clock(kind: str, metric: c.Metric, default_mhz: float) -> Reading:
    """A clock: the same C function for both, asked for one clock type; both share a line."""
    field = f"{kind}_clock_mhz"  # sm_clock_mhz, memory_clock_mhz
    return Reading(
        key=f"{kind}_clock",
        values=(Value(metric, field, scale=1e6),),
        unsupported=(field,),
        functions=("nvmlDeviceGetClockInfo",),
        fields=(ScenarioField(field, default_mhz),),
        line=StateLine("clocks", ((field, Encoding.WHOLE),)),
    )


SM_CLOCK = _clock("sm", c.SM_CLOCK, 1980.0)
MEMORY_CLOCK = _clock("memory", c.MEMORY_CLOCK, 2619.0)
CLOCK_EVENTS = Reading(
    key="clock_events",
    values=(Value(c.CLOCK_EVENT_ACTIVE, "clock_events"),),
    unsupported=("clock_events",),
    # Drivers before R535 only have the call's older name, "throttle reasons".
    functions=(
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetCurrentClocksThrottleReasons",
    ),
    shape=Shape.REASONS,
    fields=(ScenarioField("clock_events", (), Kind.REASONS),),
    line=StateLine("clock_events", (("clock_events", Encoding.MASK),)),
)
ECC = Reading(
    key="ecc",
    values=(Value(c.ECC_CORRECTED, "ecc_corrected"), Value(c.ECC_UNCORRECTED, "ecc_uncorrected")),
    unsupported=("ecc",),
    functions=("nvmlDeviceGetTotalEccErrors",),
    fields=(
        ScenarioField("ecc_corrected", 0, Kind.COUNT),
        ScenarioField("ecc_uncorrected", 0, Kind.COUNT),
    ),
    line=StateLine(
        "ecc", (("ecc_corrected", Encoding.INTEGER), ("ecc_uncorrected", Encoding.INTEGER))
    ),
)
PROCESSES = Reading(
    key="processes",
    values=(Value(c.COMPUTE_PROCESSES, "processes"),),
    unsupported=("processes",),
    functions=("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetProcessUtilization"),
    where=EVERY_DEVICE,  # per-process utilization only on GPUs without MIG
    shape=Shape.PROCESSES,  # the fake writes one `process` line per process
)


def _codec(kind: str, metric: c.Metric, function: str) -> Reading:
    """The video encoder or decoder: one call each, sharing the fake's `codec` line."""
    field = f"{kind}_utilization"
    return Reading(
        key=kind,
        values=(Value(metric, field),),
        unsupported=(field,),
        functions=(function,),
        fields=(ScenarioField(field, 0.0, minimum=0, maximum=1),),
        line=StateLine("codec", ((field, Encoding.PERCENT),)),
    )


ENCODER = _codec("encoder", c.ENCODER_UTILIZATION, "nvmlDeviceGetEncoderUtilization")
DECODER = _codec("decoder", c.DECODER_UTILIZATION, "nvmlDeviceGetDecoderUtilization")


# The numbers in the catalog's order; the scenario's `readings:` and `unsupported` keys follow
# this order too (its error messages list the keys that may be declared unsupported).
READINGS: tuple[Reading, ...] = (
    UTILIZATION,
    MEMORY,
    TEMPERATURE,
    POWER,
    POWER_LIMIT,
    ENERGY,
    SM_CLOCK,  # the two clocks: one C function, asked for two clock types
    MEMORY_CLOCK,
    CLOCK_EVENTS,
    ECC,
    PROCESSES,
    ENCODER,
    DECODER,
    GPM,
    PCIE_BYTES,
    PCIE_REPLAYS,
    NVLINK_BYTES,
    NVLINK_ERRORS,
    REMAPPED_ROWS,
    RECOVERY_ACTION,
    MEMORY_TEMPERATURE,
    CLOCK_EVENT_DURATIONS,
    POWER_MANAGEMENT_LIMIT,
)


def declarable(row: Reading) -> tuple[str, ...]:
    """The scenario keys that declare the row, or one of its values, unsupported.

    A FIELDS or GPM value has its own NVML return code, so each of its scenario values may be
    declared unsupported on its own (one series drops); the row key drops them all.
    """
    each = tuple(f.name for f in row.fields) if row.source is not Source.CALL else ()
    return row.unsupported + tuple(k for k in each if k not in row.unsupported)


def faulted_functions(unsupported: frozenset[str]) -> frozenset[str]:
    """The NVML functions that answer NOT_SUPPORTED on a device with these unsupported keys.

    Only rows read by their own calls fault a function: field values and GPM metrics answer
    NOT_SUPPORTED value by value (unsupported_values), the batched call itself succeeds.
    """
    return frozenset(
        fn
        for row in READINGS
        if row.source is Source.CALL and not unsupported.isdisjoint(row.unsupported)
        for fn in row.functions
    )


def unsupported_values(row: Reading, unsupported: frozenset[str]) -> frozenset[str]:
    """The states of the row's values NVML answers NOT_SUPPORTED for, one by one."""
    if not unsupported.isdisjoint(row.unsupported):
        return frozenset(v.state for v in row.values)
    return frozenset(v.state for v in row.values if v.state in unsupported)


def numbers_on(where: Where) -> tuple[Reading, ...]:
    """The rows of plain numbers NVML answers on this kind of device, in table order."""
    return tuple(row for row in READINGS if row.shape is Shape.NUMBERS and where in row.where)
