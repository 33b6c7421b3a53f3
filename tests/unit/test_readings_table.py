"""The readings table's contract: one row per NVML reading, and every place agrees with it.

Adding a reading touches its row (exporter/readings_table.py), its reader, fake_nvml.c and
docs/metrics.md; these tests fail until all of them know it.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pynvml
import pytest

from fakenvml import SOURCE, UNSUPPORTED_FUNCTIONS, render_state, write_state
from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.exporter.nvml.readings import (
    READERS,
    DriverFeatures,
    ProcessReader,
    read_clock_events,
)
from kube_gpu_exporter.exporter.readings_batched import NVLINK_BYTES, NVLINK_ERRORS
from kube_gpu_exporter.exporter.readings_table import (
    CLOCK_EVENTS,
    PROCESSES,
    READINGS,
    Reading,
    Shape,
    Source,
    Value,
    Where,
)
from kube_gpu_exporter.exporter.simulated.scenario import READING_KEYS, Readings, Scenario

REPO = Path(__file__).resolve().parents[2]
C_SOURCE = SOURCE.read_text(encoding="utf-8")
ROWS = {row.key: row for row in READINGS}

# Device metrics that are not a reading: discovery gives the facts (and a MIG instance's share),
# `up` says whether the device answered, Xids come from the NVML event thread rather than a
# call per cycle, and the action a GPU needs is computed from other readings.
NOT_READINGS = {
    c.GPU_INFO,
    c.GPU_UP,
    c.SHARE,
    c.XID_ERRORS,
    c.ACTION_REQUIRED,
    c.ACTION_REQUIRED_SINCE,
    c.KUBELET_ALLOCATABLE,
}

# One GPU, one MIG-enabled GPU: every state value a row names must exist on them.
NODE = Scenario.parse(
    """
devices:
  - {}
  - mig: [{profile: 1g.10gb, gpu_instance_id: 9, memory_total_bytes: 10GiB}]
"""
).state_at(0)


def test_every_device_metric_nvml_reads_has_exactly_one_row() -> None:
    read = {m for m in c.ALL_METRICS if m.scope is c.Scope.DEVICE} - NOT_READINGS
    rows = Counter(m for row in READINGS for m in set(row.metrics))
    assert {m.name: rows[m] for m in read if rows[m] != 1} == {}, "rows per metric"
    assert {m.name for m in rows} <= {m.name for m in read}


def test_rows_have_distinct_keys_and_scenario_keys() -> None:
    assert len(ROWS) == len(READINGS)
    assert len(READING_KEYS) == len(set(READING_KEYS))
    fields = [f.name for row in READINGS for f in row.fields]
    assert len(fields) == len(set(fields))


def test_rows_of_numbers_follow_the_catalog_order() -> None:
    """The scenario's keys come in table order; the catalog's order is the one to keep."""
    calls = [row for row in READINGS if row.shape is Shape.NUMBERS and row.source is Source.CALL]
    order = [m for row in calls for m in row.metrics]
    assert order == [*c.DEVICE_VALUE_METRICS, c.ENCODER_UTILIZATION, c.DECODER_UTILIZATION]
    batched = [m for row in READINGS if row.source is not Source.CALL for m in row.metrics]
    listed = [*c.PROFILING_METRICS, *c.HARDWARE_VALUE_METRICS, *c.HARDWARE_LABELLED_METRICS]
    assert set(batched) == set(listed) - set(order)


def test_every_row_has_a_reader() -> None:
    numbers = {
        row.key for row in READINGS if row.shape is Shape.NUMBERS and row.source is Source.CALL
    }
    assert set(READERS) == numbers
    # Field values and GPM metrics are read in one batch per device, by their NVML ids.
    for row in READINGS:
        if row.source is not Source.CALL:
            assert all(v.nvml_id > 0 for v in row.values), row.key
            assert row.line is None and row.shape is Shape.NUMBERS, row.key
    labelled = [v for row in READINGS for v in row.values if v.label or v.per_link]
    assert {v.metric for v in labelled} == set(c.HARDWARE_LABELLED_METRICS)
    # A value fills each of its metric's extra labels: `link` first when per link, then `label`.
    for v in labelled:
        assert len(v.metric.labels) == int(v.per_link) + int(bool(v.label)), v.state
        assert not v.per_link or v.metric.labels[0] == "link", v.state
    # The NVML sampler reads the other shapes with their own code.
    assert {row.key: row.shape for row in READINGS if row.shape is not Shape.NUMBERS} == {
        CLOCK_EVENTS.key: Shape.REASONS,
        PROCESSES.key: Shape.PROCESSES,
    }


def test_every_row_applies_to_whole_gpus() -> None:
    """A reading NVML answers on no plain GPU would never be read: the sampler starts there."""
    assert all(Where.GPU in row.where for row in READINGS)


@pytest.mark.parametrize("row", READINGS, ids=lambda row: row.key)
def test_scenario_keys_exist_in_the_scenario_schema(row: Reading) -> None:
    assert set(row.unsupported) <= set(READING_KEYS)
    for field in row.fields:
        assert field.name in Readings.model_fields
        assert Readings.model_fields[field.name].default is None  # absent: hold the value
    states: list[object] = list(NODE.devices)
    if Where.MIG_INSTANCE in row.where and row.shape is Shape.NUMBERS:
        states += [m for d in NODE.devices for m in d.mig]
    for state in states:
        for value in row.values:
            getattr(state, value.state)  # raises AttributeError when the state lacks it
        for name, _ in row.line.values if row.line else ():
            getattr(state, name)


@pytest.mark.parametrize("row", READINGS, ids=lambda row: row.key)
def test_c_functions_and_state_line_are_in_the_fake(row: Reading) -> None:
    for function in row.functions:
        assert re.search(rf"\bAPI nvmlReturn_t {function}\(", C_SOURCE), function
    if row.source is Source.CALL:
        for key in row.unsupported:
            assert UNSUPPORTED_FUNCTIONS[key] == row.functions
    if row.source is Source.FIELDS:
        assert '!strcmp(key, "field")' in C_SOURCE
    elif row.source is Source.GPM:
        assert '!strcmp(key, "gpm")' in C_SOURCE and '!strcmp(key, "mig_gpm")' in C_SOURCE
    elif row.line is not None:
        assert f'!strcmp(key, "{row.line.name}")' in C_SOURCE
        assert re.search(rf"^ \*   {row.line.name} ", C_SOURCE, re.MULTILINE), "C header"
    else:
        assert row.shape is Shape.PROCESSES  # one `process` line per process instead


def test_the_fake_writes_one_line_per_state_line() -> None:
    lines = [line.split()[0] for line in render_state(NODE).splitlines()]
    names = {row.line.name for row in READINGS if row.line is not None}
    assert all(lines.count(name) == len(NODE.devices) for name in names)


@pytest.mark.parametrize("row", READINGS, ids=lambda row: row.key)
def test_metrics_are_documented(row: Reading) -> None:
    doc = (REPO / "docs" / "metrics.md").read_text(encoding="utf-8")
    for metric in row.metrics:
        assert f"`{metric.name}`" in doc or f"`{metric.name}{{" in doc, metric.name


@pytest.mark.parametrize("value", NVLINK_ERRORS.values, ids=lambda v: v.label)
def test_nvlink_error_counters_are_nvml_h_fields_one_id_per_link(value: Value) -> None:
    kind = value.label.upper()
    ids = tuple(getattr(pynvml, f"NVML_FI_DEV_NVLINK_{kind}_ERROR_COUNT_L{n}") for n in range(12))
    assert value.link_ids == ids and value.nvml_id == ids[0]
    assert value.metric is c.NVLINK_ERRORS and value.metric.labels == ("link", "type")


def test_per_link_values_are_asked_per_link_and_not_without_nvlink() -> None:
    """Byte counters: one id, scopeId = link. Error counters: each link its own id (scopeId 0),
    and nvml.h has ids for links 0-11 only, so an 18-link H100 reads 12 links' errors."""
    tx = NVLINK_BYTES.values[0]
    crc = NVLINK_ERRORS.values[0]
    assert [(e.field_id, e.scope, e.labels) for e in tx.entries(2)] == [
        (138, 0, ("0",)),
        (138, 1, ("1",)),
    ]
    assert [(e.field_id, e.scope, e.labels) for e in crc.entries(2)] == [
        (32, 0, ("0", "crc_flit")),
        (33, 0, ("1", "crc_flit")),
    ]
    assert len(tx.entries(18)) == 18 and len(crc.entries(18)) == 12
    assert crc.entries(18)[-1].field_id == pynvml.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L11
    assert tx.entries(0) == crc.entries(0) == ()


# One GPU with a known value for every reading the per-call readers ask NVML for, in the
# scenario's units; the expected values below are the same figures in base units, written out.
KNOWN = Scenario.parse(
    """
devices:
  - power_limit_watts: 400
    energy_joules: 1234.5
    memory_total_bytes: 80GiB
    memory_reserved_bytes: 512MiB
    readings: {utilization: 0.42, memory_bandwidth_utilization: 0.17, memory_used_bytes: 3GiB,
               temperature_celsius: 61, power_watts: 250.5, sm_clock_mhz: 1500,
               memory_clock_mhz: 2619, ecc_corrected: 7, ecc_uncorrected: 2,
               encoder_utilization: 0.2, decoder_utilization: 0.3,
               clock_events: [sw_thermal_slowdown, hw_slowdown]}
    processes:
      - {pid: 4100, used_memory_bytes: 1GiB, sm_utilization: 0.3}
      - {pid: 4200, used_memory_bytes: 2GiB, sm_utilization: 0.1}
"""
)
EXPECTED = {
    c.UTILIZATION: 0.42,
    c.MEMORY_BANDWIDTH_UTILIZATION: 0.17,
    c.MEMORY_USED: 3 * 2**30,
    c.MEMORY_TOTAL: 80 * 2**30,
    c.MEMORY_RESERVED: 512 * 2**20,
    c.TEMPERATURE: 61.0,
    c.POWER: 250.5,
    c.POWER_LIMIT: 400.0,
    c.ENERGY: 1234.5,
    c.SM_CLOCK: 1.5e9,
    c.MEMORY_CLOCK: 2.619e9,
    c.ECC_CORRECTED: 7.0,
    c.ECC_UNCORRECTED: 2.0,
    c.ENCODER_UTILIZATION: 0.2,
    c.DECODER_UTILIZATION: 0.3,
}


def test_each_reader_returns_its_rows_metrics_in_base_units(nvml_state: Path) -> None:
    """Every per-call reader, over the real pynvml and the fake libnvidia-ml, gives exactly
    its row's metrics with the scenario's values in base units (MHz → Hz, mW → W, mJ → J,
    percent → ratio); the clock-event and process readers give the reasons and processes."""
    write_state(nvml_state, KNOWN.state_at(0))
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    uuid = pynvml.nvmlDeviceGetUUID(handle)
    read = {}
    for key, reader in READERS.items():
        values = reader(handle, DriverFeatures())
        assert set(values) == {m.name for m in ROWS[key].metrics}, key
        read |= values
    expected = {metric.name: value for metric, value in EXPECTED.items()}
    assert read == pytest.approx(expected, rel=1e-6)

    assert read_clock_events(handle, DriverFeatures()) == {"sw_thermal_slowdown", "hw_slowdown"}
    processes = ProcessReader().read(uuid, handle, with_utilization=True)
    assert [(p.pid, p.used_memory_bytes) for p in processes] == [
        (4100, 2**30),
        (4200, 2 * 2**30),
    ]
    assert [p.sm_utilization for p in processes] == pytest.approx([0.3, 0.1])
    assert [p.sm_utilization for p in ProcessReader().read(uuid, handle, False)] == [None, None]
