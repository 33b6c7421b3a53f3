"""The readings table's rows read in batches: field values and GPM metrics.

A FIELDS row is a share of one `nvmlDeviceGetFieldValues` call per GPU per cycle (nvml.h's
NVML_FI_DEV_* ids); a GPM row's values come from one pair of GPM samples per device per cycle
(NVML_GPM_METRIC_* ids), per GPU and, through the GPU instance id, per MIG instance. Either
way each value carries its own return code, so one value NVML lacks drops one series, and the
scenario may declare each value unsupported by its name. exporter/readings_table.py lists
these rows in READINGS beside the ones read by their own calls.
"""

from __future__ import annotations

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.exporter.reading import (
    EVERY_DEVICE,
    Encoding,
    Kind,
    Reading,
    ScenarioField,
    Source,
    Value,
)


def _fields(key: str, values: tuple[Value, ...], *fields: ScenarioField) -> Reading:
    """Values of the device's one batched nvmlDeviceGetFieldValues call (whole GPUs only)."""
    return Reading(
        key=key,
        values=values,
        unsupported=(key,),
        functions=("nvmlDeviceGetFieldValues",),
        source=Source.FIELDS,
        fields=fields,
    )


def _count(name: str, default: float = 0) -> ScenarioField:
    return ScenarioField(name, default, Kind.COUNT)


# NVML field ids (nvml.h NVML_FI_DEV_*). The link count is asked once per GPU, with its first
# batch: it says how many per-link fields (scopeId = link) the GPU has.
NVLINK_LINK_COUNT_FIELD = 91  # NVML_FI_DEV_NVLINK_LINK_COUNT
PCIE_BYTES = _fields(
    "pcie_bytes",
    (
        Value(c.PCIE_TRANSMIT_BYTES, "pcie_transmit_bytes", nvml_id=197, bits=32),
        Value(c.PCIE_RECEIVE_BYTES, "pcie_receive_bytes", nvml_id=198, bits=32),
    ),
    _count("pcie_transmit_bytes"),
    _count("pcie_receive_bytes"),
)
PCIE_REPLAYS = _fields(
    "pcie_replays",
    (Value(c.PCIE_REPLAYS, "pcie_replays", nvml_id=94, bits=32),),
    _count("pcie_replays"),
)
NVLINK_BYTES = _fields(
    "nvlink_bytes",
    (
        Value(
            c.NVLINK_TRANSMIT_BYTES,
            "nvlink_transmit_bytes",
            nvml_id=138,
            per_link=True,
            encoding=Encoding.KIB,
        ),
        Value(
            c.NVLINK_RECEIVE_BYTES,
            "nvlink_receive_bytes",
            nvml_id=139,
            per_link=True,
            encoding=Encoding.KIB,
        ),
    ),
    _count("nvlink_transmit_bytes"),  # per link: every link of the device carries this much
    _count("nvlink_receive_bytes"),
)


def _link_ids(first: int, later: int) -> tuple[int, ...]:
    """An NVLink error counter's field id per link: nvml.h numbers _L0…_L5 from `first` and
    _L6…_L11, added later, from `later`."""
    return (*range(first, first + 6), *range(later, later + 6))


def _nvlink_errors(kind: str, first: int, later: int) -> Value:
    ids = _link_ids(first, later)
    state = f"nvlink_{kind}_errors"
    return Value(c.NVLINK_ERRORS, state, nvml_id=ids[0], per_link=True, link_ids=ids, label=kind)


# NVML_FI_DEV_NVLINK_{CRC_FLIT,CRC_DATA,REPLAY,RECOVERY}_ERROR_COUNT_L0…_L11: a GPU without
# NVLink reports no links, so none is asked and its series are absent, not 0.
NVLINK_ERRORS = _fields(
    "nvlink_errors",
    (
        _nvlink_errors("crc_flit", 32, 96),
        _nvlink_errors("crc_data", 39, 102),
        _nvlink_errors("replay", 46, 108),
        _nvlink_errors("recovery", 53, 114),
    ),
    _count("nvlink_crc_flit_errors"),  # per link: every link of the device has this many
    _count("nvlink_crc_data_errors"),
    _count("nvlink_replay_errors"),
    _count("nvlink_recovery_errors"),
)
REMAPPED_ROWS = _fields(
    "remapped_rows",
    (
        Value(c.REMAPPED_ROWS, "remapped_rows_correctable", nvml_id=142, label="correctable"),
        Value(c.REMAPPED_ROWS, "remapped_rows_uncorrectable", nvml_id=143, label="uncorrectable"),
        Value(c.ROW_REMAP_PENDING, "row_remap_pending", nvml_id=144),
        Value(c.ROW_REMAP_FAILED, "row_remap_failed", nvml_id=145),
    ),
    _count("remapped_rows_correctable"),
    _count("remapped_rows_uncorrectable"),
    ScenarioField("row_remap_pending", 0, Kind.COUNT, maximum=1),
    ScenarioField("row_remap_failed", 0, Kind.COUNT, maximum=1),
)
RECOVERY_ACTION = _fields(
    "recovery_action",
    (Value(c.RECOVERY_ACTION, "recovery_action", nvml_id=230, bits=32),),
    ScenarioField("recovery_action", 0, Kind.COUNT, maximum=7),
)
MEMORY_TEMPERATURE = _fields(
    "memory_temperature",
    (
        Value(
            c.MEMORY_TEMPERATURE,
            "memory_temperature_celsius",
            nvml_id=82,
            bits=32,
            encoding=Encoding.WHOLE,
        ),
    ),
    ScenarioField("memory_temperature_celsius", 40.0, minimum=-50, maximum=200),
)
CLOCK_EVENT_DURATIONS = _fields(
    "clock_event_durations",
    tuple(
        Value(
            c.CLOCK_EVENT_DURATION,
            f"{reason}_seconds",
            nvml_id=field_id,
            label=reason,
            encoding=Encoding.NANO,
        )
        for reason, field_id in (
            ("sw_thermal_slowdown", 269),
            ("hw_thermal_slowdown", 270),
            ("hw_power_brake_slowdown", 271),
        )
    ),
    ScenarioField("sw_thermal_slowdown_seconds", 0.0),
    ScenarioField("hw_thermal_slowdown_seconds", 0.0),
    ScenarioField("hw_power_brake_slowdown_seconds", 0.0),
)
POWER_MANAGEMENT_LIMIT = _fields(
    "power_management_limit",
    # fixed: the device spec's power limit (NVML_FI_DEV_POWER_CURRENT_LIMIT, scope GPU)
    (
        Value(
            c.POWER_MANAGEMENT_LIMIT,
            "power_limit_watts",
            nvml_id=190,
            bits=32,
            encoding=Encoding.MILLI,
        ),
    ),
)


def _gpm(metric: c.Metric, metric_id: int, encoding: Encoding = Encoding.GPM_PERCENT) -> Value:
    state = metric.name.removeprefix("nvidia_gpu_").removesuffix("_ratio")
    return Value(metric, state, nvml_id=metric_id, encoding=encoding)


_GPM_VALUES = (
    _gpm(c.GRAPHICS_ACTIVE, 1),
    _gpm(c.SM_ACTIVE, 2),
    _gpm(c.SM_OCCUPANCY, 3),
    _gpm(c.TENSOR_ACTIVE, 5),
    _gpm(c.DRAM_ACTIVE, 10),
    _gpm(c.FP64_ACTIVE, 11),
    _gpm(c.FP32_ACTIVE, 12),
    _gpm(c.FP16_ACTIVE, 13),
    _gpm(c.PCIE_TRANSMIT_RATE, 20, Encoding.GPM_MIB_RATE),
    _gpm(c.PCIE_RECEIVE_RATE, 21, Encoding.GPM_MIB_RATE),
    _gpm(c.NVLINK_TRANSMIT_RATE, 61, Encoding.GPM_MIB_RATE),
    _gpm(c.NVLINK_RECEIVE_RATE, 60, Encoding.GPM_MIB_RATE),
)
# NVML GPM metric ids (nvml.h NVML_GPM_METRIC_*); per GPU and, through the GPU instance id,
# per MIG instance. Every metric has its own return code: one the GPU does not count drops.
GPM = Reading(
    key="gpm",
    values=_GPM_VALUES,
    unsupported=("gpm",),
    functions=("nvmlGpmQueryDeviceSupport",),
    where=EVERY_DEVICE,
    source=Source.GPM,
    fields=tuple(
        ScenarioField(
            v.state,
            0.0,
            maximum=1 if v.encoding is Encoding.GPM_PERCENT else None,
        )
        for v in _GPM_VALUES
    ),
)
