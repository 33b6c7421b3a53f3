"""The fake libnvidia-ml's field values, GPM and video-engine calls, through the real pynvml.

The exporter's field-value and GPM readers trust these answers, so they are pinned here the
way a real H100 gives them: every field value and every GPM metric carries its own return
code, a 32-bit counter wraps, GPM samples closer than 100 ms read 0 (DRAM bandwidth NaN), and
GPM on a GPU instance goes through the MIG-enabled GPU's handle. The last tests pin the state
writer's `codec`, `field`, `gpm_supported`, `gpm` and `mig_gpm` lines, which come from the
readings table.
"""

from __future__ import annotations

import ctypes
import json
import math
import textwrap
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pynvml
import pytest

from fakenvml import _ENCODE, NVLINK_LINK_COUNT_FIELD, render_state, write_state
from kube_gpu_exporter.exporter.reading import Encoding, from_nvml
from kube_gpu_exporter.exporter.readings_table import GPM, READINGS, Source
from kube_gpu_exporter.exporter.simulated.scenario import NodeState, Scenario
from support import json_from_script

GAP = 0.12  # seconds between GPM samples that measure something (NVML needs 100 ms)
UINT = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
ULL = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
OK = pynvml.NVML_SUCCESS
NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED

# NVML field ids (nvml.h NVML_FI_DEV_*) and GPM metric ids (NVML_GPM_METRIC_*).
PCIE_TX, PCIE_RX, PCIE_REPLAYS, MEMORY_TEMP, NVLINK_TX, NVLINK_RX = 197, 198, 94, 82, 138, 139
REMAPPED_COR, SW_THERMAL_NS, POWER_LIMIT = 142, 269, 190
GRAPHICS, SM, SM_OCCUPANCY, TENSOR, DRAM_BW, FP64, PCIE_RX_RATE = 1, 2, 3, 5, 10, 11, 21

NODE = Scenario.parse(
    """
devices:
  - nvlink_links: 2
    unsupported: [fp64_active, pcie_replays]
    readings: {graphics_active: 0.9, sm_active: 0.75, sm_occupancy: 0.29, tensor_active: 0.5,
               dram_active: 0.125, pcie_receive_bytes_per_second: 1048576,
               pcie_transmit_bytes: 4000000000, nvlink_transmit_bytes: 5000,
               memory_temperature_celsius: 71, remapped_rows_correctable: 3,
               sw_thermal_slowdown_seconds: 1.5, encoder_utilization: 0.25,
               decoder_utilization: 0.5}
    timeline:
      - {at: 10, readings: {pcie_transmit_bytes: 5000000000, sm_active: 0.5}}
      - {at: 30, lost: true}
  - readings: {graphics_active: 0.5}
    mig:
      - {profile: 3g.40gb, gpu_instance_id: 2, memory_total_bytes: 40GiB,
         readings: {graphics_active: 0.25, sm_active: 0.125, tensor_active: 0.0625}}
      - {profile: 1g.10gb, gpu_instance_id: 9, memory_total_bytes: 10GiB}
  - name: NVIDIA A100-SXM4-40GB
    unsupported: [gpm, decoder_utilization]
"""
)


@pytest.fixture
def state(nvml_state: Path) -> Path:
    """The node at t=0, NVML initialised on the fake."""
    write_state(nvml_state, NODE.state_at(0))
    pynvml.nvmlInit()
    return nvml_state


@pytest.fixture
def samples() -> Iterator[list[Any]]:
    """GPM samples a test allocates; freed afterwards (while NVML is still initialised)."""
    allocated: list[Any] = []
    yield allocated
    for sample in allocated:
        pynvml.nvmlGpmSampleFree(sample)


def gpu(index: int) -> Any:
    return pynvml.nvmlDeviceGetHandleByIndex(index)


def mig(index: int, slot: int) -> Any:
    return pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu(index), slot)


def fields(handle: Any, ids: Sequence[int | tuple[int, int]]) -> list[Any]:
    return list(pynvml.nvmlDeviceGetFieldValues(handle, list(ids)))


def field_value(entry: Any) -> int:
    assert entry.nvmlReturn == OK
    return int(entry.value.uiVal if entry.valueType == UINT else entry.value.ullVal)


def alloc(samples: list[Any]) -> Any:
    sample = pynvml.nvmlGpmSampleAlloc()
    samples.append(sample)
    return sample


def request(first: Any, second: Any, ids: Sequence[int]) -> Any:
    mg = pynvml.c_nvmlGpmMetricsGet_t()
    mg.version = pynvml.NVML_GPM_METRICS_GET_VERSION
    mg.numMetrics = len(ids)
    mg.sample1, mg.sample2 = first, second
    for i, metric_id in enumerate(ids):
        mg.metrics[i].metricId = metric_id
    return mg


def metrics(first: Any, second: Any, ids: Sequence[int]) -> dict[int, tuple[int, float]]:
    """{metric id: (nvmlReturn, value)} between two samples."""
    mg = pynvml.nvmlGpmMetricsGet(request(first, second, ids))
    return {m: (mg.metrics[i].nvmlReturn, mg.metrics[i].value) for i, m in enumerate(ids)}


def two_samples(samples: list[Any], take: Any, gap: float = GAP) -> tuple[Any, Any]:
    first, second = alloc(samples), alloc(samples)
    take(first)
    time.sleep(gap)
    take(second)
    return first, second


# --- layouts ---------------------------------------------------------------------------------


def test_pynvml_struct_layouts_are_the_ones_the_fake_asserts() -> None:
    """fake_nvml.c has _Static_asserts of the same sizes; a binding change shows here first."""
    assert ctypes.sizeof(pynvml.c_nvmlFieldValue_t) == 40
    assert ctypes.sizeof(pynvml.c_nvmlGpmSupport_t) == 8
    assert ctypes.sizeof(pynvml.c_nvmlGpmMetric_t) == 40
    assert pynvml.c_nvmlGpmMetricsGet_t.metrics.offset == 24


# --- field values ----------------------------------------------------------------------------


def test_field_values_answer_each_entry_on_its_own(state: Path) -> None:
    before = int(time.time() * 1e6)
    answers = fields(
        gpu(0),
        [PCIE_TX, PCIE_REPLAYS, MEMORY_TEMP, REMAPPED_COR, SW_THERMAL_NS, POWER_LIMIT, 999, 0],
    )
    after = int(time.time() * 1e6)
    *answers, zero = answers
    assert (zero.nvmlReturn, zero.timestamp) == (pynvml.NVML_ERROR_INVALID_ARGUMENT, 0)
    tx, replays, temperature, remapped, thermal, limit, unknown = answers
    assert (tx.valueType, field_value(tx)) == (UINT, 4_000_000_000)
    assert replays.nvmlReturn == NOT_SUPPORTED  # declared unsupported: that field alone
    assert unknown.nvmlReturn == NOT_SUPPORTED  # no line for it
    assert (temperature.valueType, field_value(temperature)) == (UINT, 71)
    assert (remapped.valueType, field_value(remapped)) == (ULL, 3)
    assert (thermal.valueType, field_value(thermal)) == (ULL, 1_500_000_000)  # ns
    assert (limit.valueType, field_value(limit)) == (UINT, 700_000)  # mW
    for entry in answers:
        assert before <= entry.timestamp <= after
        assert entry.latencyUsec == 0


def test_a_32_bit_counter_above_2_to_the_32_reads_wrapped(state: Path) -> None:
    write_state(state, NODE.state_at(10))  # 5e9 bytes sent
    (tx,) = fields(gpu(0), [PCIE_TX])
    assert (tx.valueType, field_value(tx)) == (UINT, 5_000_000_000 - (1 << 32))


def test_nvlink_fields_per_link_and_the_link_count(state: Path) -> None:
    ids = [
        (NVLINK_LINK_COUNT_FIELD, 0),
        *((f, link) for f in (NVLINK_TX, NVLINK_RX) for link in (0, 1, 2)),
    ]
    count, tx0, tx1, tx2, rx0, rx1, rx2 = fields(gpu(0), ids)
    assert (count.valueType, field_value(count)) == (UINT, 2)
    assert [field_value(e) for e in (tx0, tx1, rx0, rx1)] == [5, 5, 0, 0]  # KiB, rounded
    assert (tx0.scopeId, tx1.scopeId) == (0, 1)
    assert tx2.nvmlReturn == rx2.nvmlReturn == NOT_SUPPORTED  # the GPU has two links
    # No NVLinks: neither the count nor any link.
    assert [
        e.nvmlReturn for e in fields(gpu(2), [(NVLINK_LINK_COUNT_FIELD, 0), (NVLINK_TX, 0)])
    ] == [
        NOT_SUPPORTED,
        NOT_SUPPORTED,
    ]


def test_field_values_of_a_mig_device_and_of_a_mig_enabled_gpu(state: Path) -> None:
    assert [e.nvmlReturn for e in fields(mig(1, 0), [MEMORY_TEMP, PCIE_TX])] == [
        NOT_SUPPORTED,
        NOT_SUPPORTED,
    ]
    (temperature,) = fields(gpu(1), [MEMORY_TEMP])
    assert field_value(temperature) == 40  # the scenario's default


def test_the_field_value_call_fails_as_a_whole(nvml_state: Path) -> None:
    write_state(nvml_state, NODE.state_at(0), errors={(0, "nvmlDeviceGetFieldValues"): 999})
    pynvml.nvmlInit()
    with pytest.raises(pynvml.NVMLError_Unknown):
        fields(gpu(0), [MEMORY_TEMP])
    assert field_value(fields(gpu(2), [MEMORY_TEMP])[0]) == 40
    with pytest.raises(pynvml.NVMLError_InvalidArgument):  # as a real H100 answers
        fields(gpu(2), [])

    handle = gpu(0)
    write_state(nvml_state, NODE.state_at(31))  # GPU 0 is lost
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        fields(handle, [MEMORY_TEMP])

    write_state(nvml_state, NODE.state_at(0), delay_ms=120)
    started = time.monotonic()
    fields(gpu(2), [MEMORY_TEMP])  # two slow calls: the handle and the fields
    assert time.monotonic() - started >= 0.24


# --- encoder and decoder ---------------------------------------------------------------------


def test_encoder_and_decoder_utilization(state: Path) -> None:
    assert pynvml.nvmlDeviceGetEncoderUtilization(gpu(0)) == [25, 100_000]
    assert pynvml.nvmlDeviceGetDecoderUtilization(gpu(0)) == [50, 100_000]
    assert pynvml.nvmlDeviceGetEncoderUtilization(gpu(1)) == [0, 100_000]  # MIG-enabled GPU
    for read in (pynvml.nvmlDeviceGetEncoderUtilization, pynvml.nvmlDeviceGetDecoderUtilization):
        with pytest.raises(pynvml.NVMLError_NotSupported):
            read(mig(1, 0))
    # A CALL row declared unsupported faults its function alone.
    assert pynvml.nvmlDeviceGetEncoderUtilization(gpu(2)) == [0, 100_000]
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetDecoderUtilization(gpu(2))


def test_encoder_and_decoder_errors_lost_and_delay(nvml_state: Path) -> None:
    errors = {(0, "nvmlDeviceGetEncoderUtilization"): 999}
    write_state(nvml_state, NODE.state_at(0), errors=errors)
    pynvml.nvmlInit()
    handle = gpu(0)
    with pytest.raises(pynvml.NVMLError_Unknown):
        pynvml.nvmlDeviceGetEncoderUtilization(handle)
    assert pynvml.nvmlDeviceGetDecoderUtilization(handle) == [50, 100_000]

    write_state(nvml_state, NODE.state_at(31))
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceGetDecoderUtilization(handle)

    write_state(nvml_state, NODE.state_at(0), delay_ms=150)
    started = time.monotonic()
    pynvml.nvmlDeviceGetDecoderUtilization(handle)
    assert time.monotonic() - started >= 0.15


# --- GPM -------------------------------------------------------------------------------------


def test_gpm_metrics_between_samples_100ms_apart(state: Path, samples: list[Any]) -> None:
    handle = gpu(0)
    assert pynvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice == 1
    first, second = two_samples(samples, lambda s: pynvml.nvmlGpmSampleGet(handle, s))
    ids = [GRAPHICS, SM, SM_OCCUPANCY, TENSOR, DRAM_BW, FP64, PCIE_RX_RATE, 99]
    assert metrics(first, second, ids) == {
        GRAPHICS: (OK, 90.0),
        SM: (OK, 75.0),
        SM_OCCUPANCY: (OK, 29.0),
        TENSOR: (OK, 50.0),
        DRAM_BW: (OK, 12.5),
        FP64: (NOT_SUPPORTED, 0.0),  # declared unsupported: that metric alone
        PCIE_RX_RATE: (OK, 1.0),  # MiB/s
        99: (NOT_SUPPORTED, 0.0),  # no value for it
    }


def test_gpm_answers_the_second_samples_values(state: Path, samples: list[Any]) -> None:
    handle = gpu(0)
    first = alloc(samples)
    pynvml.nvmlGpmSampleGet(handle, first)
    write_state(state, NODE.state_at(10))  # sm_active 0.75 → 0.5
    time.sleep(GAP)
    second = alloc(samples)
    pynvml.nvmlGpmSampleGet(handle, second)
    write_state(state, NODE.state_at(0))  # a sample keeps what it copied
    assert metrics(first, second, [SM]) == {SM: (OK, 50.0)}
    assert metrics(second, first, [SM])[SM] == (OK, 0.0)  # sample2 first: as too close


def test_samples_too_close_read_zero_and_nan(state: Path, samples: list[Any]) -> None:
    handle = gpu(0)
    first, second = two_samples(samples, lambda s: pynvml.nvmlGpmSampleGet(handle, s), gap=0)
    answer = metrics(first, second, [GRAPHICS, SM, DRAM_BW, FP64, 99])
    assert {m: r for m, (r, _v) in answer.items()} == dict.fromkeys(answer, OK)
    assert [answer[m][1] for m in (GRAPHICS, SM, FP64, 99)] == [0.0] * 4
    assert math.isnan(answer[DRAM_BW][1])


def test_only_the_requested_metrics_are_touched(state: Path, samples: list[Any]) -> None:
    handle = gpu(0)
    first, second = two_samples(samples, lambda s: pynvml.nvmlGpmSampleGet(handle, s))
    mg = request(first, second, [SM, TENSOR])
    mg.metrics[2].metricId = SM
    mg.metrics[2].nvmlReturn = 77
    mg.metrics[2].value = 1.25
    pynvml.nvmlGpmMetricsGet(mg)
    assert (mg.metrics[1].nvmlReturn, mg.metrics[1].value) == (OK, 50.0)
    assert not mg.metrics[1].metricInfo.shortName  # metricInfo left NULL
    assert (mg.metrics[2].nvmlReturn, mg.metrics[2].value) == (77, 1.25)


def test_a_gpu_without_gpm(state: Path, samples: list[Any]) -> None:
    handle = gpu(2)
    assert pynvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice == 0
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlGpmSampleGet(handle, alloc(samples))
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlGpmMigSampleGet(handle, 0, alloc(samples))


def test_gpm_per_mig_instance_through_the_parent_gpu(state: Path, samples: list[Any]) -> None:
    parent = gpu(1)
    assert pynvml.nvmlGpmQueryDeviceSupport(mig(1, 0)).isSupportedDevice == 1  # its GPU's
    big = two_samples(samples, lambda s: pynvml.nvmlGpmMigSampleGet(parent, 2, s))
    assert metrics(*big, [GRAPHICS, SM, TENSOR]) == {
        GRAPHICS: (OK, 25.0),
        SM: (OK, 12.5),
        TENSOR: (OK, 6.25),
    }
    small = two_samples(samples, lambda s: pynvml.nvmlGpmMigSampleGet(parent, 9, s))
    assert metrics(*small, [SM]) == {SM: (OK, 0.0)}  # an idle slice reads 0
    whole = two_samples(samples, lambda s: pynvml.nvmlGpmSampleGet(parent, s))
    assert metrics(*whole, [GRAPHICS]) == {GRAPHICS: (OK, 50.0)}
    with pytest.raises(pynvml.NVMLError_InvalidArgument):  # mixes the GPU and an instance
        pynvml.nvmlGpmMetricsGet(request(whole[0], big[1], [SM]))
    with pytest.raises(pynvml.NVMLError_InvalidArgument):  # two instances
        pynvml.nvmlGpmMetricsGet(request(small[0], big[1], [SM]))


def test_mig_samples_need_a_mig_enabled_gpu_and_one_of_its_instances(
    state: Path, samples: list[Any]
) -> None:
    sample = alloc(samples)
    for handle, gi in ((gpu(0), 0), (gpu(1), 5), (mig(1, 0), 2)):
        with pytest.raises(pynvml.NVMLError_InvalidArgument):
            pynvml.nvmlGpmMigSampleGet(handle, gi, sample)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlGpmSampleGet(mig(1, 0), sample)  # an instance: nvmlGpmMigSampleGet


def test_gpm_arguments(state: Path, samples: list[Any]) -> None:
    handle = gpu(0)
    first, second = two_samples(samples, lambda s: pynvml.nvmlGpmSampleGet(handle, s))
    other = alloc(samples)
    pynvml.nvmlGpmSampleGet(gpu(1), other)
    unsampled = alloc(samples)
    for one, two in ((first, other), (unsampled, second), (None, second), (first, None)):
        with pytest.raises(pynvml.NVMLError_InvalidArgument):
            pynvml.nvmlGpmMetricsGet(request(one, two, [SM]))
    mg = request(first, second, [SM])
    mg.version = 2
    with pytest.raises(pynvml.NVMLError_ArgumentVersionMismatch):
        pynvml.nvmlGpmMetricsGet(mg)
    # Driver 580.159's limits: 210 metric ids, 210 metrics a call.
    assert metrics(first, second, [0, 209, 210]) == {
        0: (pynvml.NVML_ERROR_INVALID_ARGUMENT, 0.0),
        209: (NOT_SUPPORTED, 0.0),
        210: (pynvml.NVML_ERROR_INVALID_ARGUMENT, 0.0),
    }
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlGpmMetricsGet(request(first, second, [SM] * 211))
    support = pynvml.c_nvmlGpmSupport_t()
    support.version = 2
    query = pynvml._nvmlGetFunctionPointer("nvmlGpmQueryDeviceSupport")
    assert query(handle, ctypes.byref(support)) == pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH

    freed = pynvml.nvmlGpmSampleAlloc()
    pynvml.nvmlGpmSampleFree(freed)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlGpmSampleFree(freed)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlGpmSampleGet(handle, freed)


def test_gpm_errors_and_lost_gpus(nvml_state: Path, samples: list[Any]) -> None:
    errors = {(0, "nvmlGpmSampleGet"): 999, (1, "nvmlGpmMetricsGet"): 4}
    write_state(nvml_state, NODE.state_at(0), errors=errors)
    pynvml.nvmlInit()
    with pytest.raises(pynvml.NVMLError_Unknown):
        pynvml.nvmlGpmSampleGet(gpu(0), alloc(samples))
    parent = gpu(1)
    pair = two_samples(samples, lambda s: pynvml.nvmlGpmMigSampleGet(parent, 2, s))
    with pytest.raises(pynvml.NVMLError_NoPermission):
        pynvml.nvmlGpmMetricsGet(request(*pair, [SM]))

    write_state(nvml_state, NODE.state_at(0))
    handle = gpu(0)
    pynvml.nvmlGpmSampleGet(handle, alloc(samples))
    write_state(nvml_state, NODE.state_at(31))
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlGpmSampleGet(handle, alloc(samples))
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlGpmQueryDeviceSupport(handle)


def test_every_gpm_and_field_value_reads_back_as_the_scenario_wrote_it(
    state: Path, samples: list[Any]
) -> None:
    """Through from_nvml, as the readers convert: the writer is its exact inverse here."""
    device = NODE.state_at(0).devices[0]
    handle = gpu(0)
    first, second = two_samples(samples, lambda s: pynvml.nvmlGpmSampleGet(handle, s))
    answer = metrics(first, second, [v.nvml_id for v in GPM.values])
    for value in GPM.values:
        code, number = answer[value.nvml_id]
        if value.state in device.unsupported:
            assert code == NOT_SUPPORTED, value.state
        else:
            assert (code, from_nvml(value.encoding, number)) == (OK, device.readings[value.state])
    plain = [
        v
        for row in READINGS
        if row.source is Source.FIELDS and row.key not in device.unsupported
        for v in row.values
        if not v.per_link and v.encoding is not Encoding.KIB
    ]
    for value, entry in zip(plain, fields(handle, [v.nvml_id for v in plain]), strict=True):
        assert from_nvml(value.encoding, field_value(entry)) == device.readings[value.state]


def test_the_old_driver_variant_has_field_values_and_gpm(
    fake_nvml_old_dir: Path, tmp_path: Path
) -> None:
    """In a subprocess: pynvml's function-pointer cache must not see the old variant."""
    state = tmp_path / "state"
    write_state(state, NODE.state_at(0))
    script = textwrap.dedent(
        """
        import json, pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        (temperature,) = pynvml.nvmlDeviceGetFieldValues(h, [82])
        sample = pynvml.nvmlGpmSampleAlloc()
        pynvml.nvmlGpmSampleGet(h, sample)
        pynvml.nvmlGpmSampleFree(sample)
        out = {
            "memory_temperature": temperature.value.uiVal,
            "gpm": pynvml.nvmlGpmQueryDeviceSupport(h).isSupportedDevice,
            "encoder": pynvml.nvmlDeviceGetEncoderUtilization(h),
        }
        pynvml.nvmlShutdown()
        print(json.dumps(out))
        """
    )
    env = {"LD_LIBRARY_PATH": str(fake_nvml_old_dir), "FAKE_NVML_STATE": str(state)}
    assert json_from_script(script, env) == {
        "memory_temperature": 71,
        "gpm": 1,
        "encoder": [25, 100_000],
    }


# --- the state writer ------------------------------------------------------------------------


def lines_of(node: NodeState, index: int = 0) -> list[str]:
    """The state lines of one device (between its `device` line and the next)."""
    out: list[str] = []
    current = -1
    for line in render_state(node).splitlines():
        if line.startswith("device "):
            current = int(line.split()[1])
        elif current == index:
            out.append(line)
    return out


def test_the_writer_writes_field_gpm_and_codec_lines() -> None:
    node = Scenario.parse(
        """
devices:
  - nvlink_links: 2
    unsupported: [fp64_active]
    readings: {sm_active: 0.5, pcie_transmit_bytes: 5000000000, nvlink_transmit_bytes: 4096,
               pcie_transmit_bytes_per_second: 3145728, encoder_utilization: 0.125,
               decoder_utilization: 0.5, hw_thermal_slowdown_seconds: 0.25}
  - mig:
      - {profile: 3g.40gb, gpu_instance_id: 1, memory_total_bytes: 40GiB,
         readings: {sm_active: 0.25, dram_active: 0.5}}
      - {profile: 3g.40gb, gpu_instance_id: 1, compute_instance_id: 1,
         memory_total_bytes: 40GiB, readings: {sm_active: 0.75}}
      - {profile: 1g.10gb, gpu_instance_id: 9, memory_total_bytes: 10GiB}
"""
    ).state_at(0)
    first = lines_of(node, 0)
    assert "codec 13 50" in first  # whole percents, half up
    assert "field 197 0 32 705032704" in first  # 5e9 mod 2**32
    assert "field 270 0 64 250000000" in first  # seconds → ns
    assert "field 190 0 32 700000" in first  # W → mW
    assert [line for line in first if line.startswith(("field 138 ", "field 91 "))] == [
        "field 138 0 64 4",  # bytes → KiB, per link
        "field 138 1 64 4",
        "field 91 0 32 2",  # NVML_FI_DEV_NVLINK_LINK_COUNT
    ]
    assert "gpm_supported 1" in first
    assert "gpm 2 50.0" in first  # percent
    assert "gpm 20 3.0" in first  # MiB/s
    assert not [line for line in first if line.startswith(("gpm 11 ", "error", "mig_gpm"))]
    second = lines_of(node, 1)
    assert not [line for line in second if line.startswith(("field 138 ", "field 91 "))]
    mig_gpm = [line for line in second if line.startswith("mig_gpm")]
    # Once per GPU instance: the first MIG device of instance 1 gives its values.
    assert len(mig_gpm) == 2 * len(GPM.values)
    assert "mig_gpm 1 2 25.0" in mig_gpm and "mig_gpm 1 10 50.0" in mig_gpm
    assert "mig_gpm 9 2 0.0" in mig_gpm
    last_mig = max(i for i, line in enumerate(second) if line.startswith("mig "))
    assert second.index(mig_gpm[0]) == last_mig + 1  # after the `mig` lines


@pytest.mark.parametrize(
    ("unsupported", "absent", "errors"),
    [
        (["sm_active"], ["gpm 2 "], []),
        (["gpm"], ["gpm ", "mig_gpm "], []),
        (["pcie_bytes"], ["field 197 ", "field 198 "], []),
        (["pcie_transmit_bytes"], ["field 197 "], []),
        (["nvlink_bytes"], ["field 138 ", "field 139 "], []),
        (["decoder_utilization"], [], ["error nvmlDeviceGetDecoderUtilization 3"]),
    ],
)
def test_unsupported_batched_values_drop_lines_and_calls_fault_functions(
    unsupported: list[str], absent: list[str], errors: list[str]
) -> None:
    def lines(declared: list[str]) -> list[str]:
        node = Scenario.parse(
            f"""
devices:
  - nvlink_links: 1
    unsupported: {json.dumps(declared)}
    mig: [{{profile: 1g.10gb, gpu_instance_id: 3, memory_total_bytes: 10GiB}}]
"""
        ).state_at(0)
        return lines_of(node)

    written, full = lines(unsupported), lines([])
    for prefix in absent:
        assert [line for line in full if line.startswith(prefix)], prefix
        assert not [line for line in written if line.startswith(prefix)], prefix
    assert [line for line in written if line.startswith("error")] == errors
    assert ("gpm_supported 0" in written) == ("gpm" in unsupported)
    assert "field 91 0 32 1" in written  # the link count stays


def test_every_encoding_has_a_writer() -> None:
    assert set(_ENCODE) == set(Encoding)
