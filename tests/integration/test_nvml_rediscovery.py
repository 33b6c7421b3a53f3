"""What the NVML sampler remembers of each device across rediscovery and re-initialisation,
through the real pynvml over the fake libnvidia-ml (which counts every call it answers).

Rediscovery (every 60 s) picks up replaced GPUs and MIG repartitioning; what is known of a
device still there (readings NVML refused, counters' running sums, Xid bindings) must survive
it, and what is known of a device gone must go with it. A new driver session (re-init after
the driver was replaced) knows nothing yet, so it forgets everything.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pynvml
import pytest

from fakenvml import call_count, write_state
from kube_gpu_exporter.exporter.nvml.devices import discover
from kube_gpu_exporter.exporter.nvml.field_values import FieldReader
from kube_gpu_exporter.exporter.nvml.readings import fields_on
from kube_gpu_exporter.exporter.nvml.sampler import NvmlSampler
from kube_gpu_exporter.exporter.readings_table import Where
from kube_gpu_exporter.exporter.simulated.scenario import NodeState, Scenario
from kube_gpu_exporter.exporter.snapshot import DeviceSample, NodeSample
from support import wait_until

OLD = "GPU-0a0a0a0a-0000-4000-8000-000000000000"
NEW = "GPU-0b0b0b0b-0000-4000-8000-000000000000"
OTHER = "GPU-0c0c0c0c-0000-4000-8000-000000000000"
POWER = "nvidia_gpu_power_watts"
POWER_CALL = "nvmlDeviceGetPowerUsage"
REDISCOVER = 60.0


def node(uuid: str = OLD, *, unsupported: str = "[power_watts]", xid: str = "[]") -> NodeState:
    """GPU 0 (`uuid`) without power readings unless told, and a second GPU that stays."""
    return Scenario.parse(
        f"""
devices:
  - uuid: {uuid}
    unsupported: {unsupported}
    readings: {{power_watts: 300}}
    timeline: [{{at: 0, xid: {xid}}}]
  - uuid: {OTHER}
    unsupported: [power_watts]
"""
    ).state_at(0)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def by_uuid(sample: NodeSample) -> dict[str, DeviceSample]:
    return {d.identity.uuid: d for d in sample.devices}


def power_calls() -> int:
    return call_count(pynvml.nvmlLib, POWER_CALL)


def test_a_refused_reading_is_not_asked_again_after_rediscovery(nvml_state: Path) -> None:
    """NOT_SUPPORTED is remembered per GPU uuid: rediscovery every minute does not ask again."""
    write_state(nvml_state, node())
    clock = Clock()
    sampler = NvmlSampler(watch_xids=False, clock=clock, rediscover_seconds=REDISCOVER)
    try:
        before = power_calls()
        sampler.sample()
        asked = power_calls() - before
        assert asked == 2  # once per GPU: both refuse
        for _ in range(3):
            clock.now += REDISCOVER + 1
            sample = sampler.sample()
            assert sample.nvml_up and POWER not in by_uuid(sample)[OLD].values
        assert power_calls() - before == asked
    finally:
        sampler.close()


def test_a_replaced_gpu_is_asked_afresh_and_the_one_that_stays_is_not(nvml_state: Path) -> None:
    """Only what is known of devices gone is forgotten: the GPU now at index 0 is new and is
    asked (it has power readings), the other GPU, still there, is not asked again."""
    write_state(nvml_state, node())
    clock = Clock()
    sampler = NvmlSampler(watch_xids=False, clock=clock, rediscover_seconds=REDISCOVER)
    try:
        sampler.sample()
        write_state(nvml_state, node(NEW, unsupported="[]"))
        clock.now += REDISCOVER + 1
        before = power_calls()
        replaced = by_uuid(sampler.sample())
        assert replaced[NEW].values[POWER] == 300
        assert OLD not in replaced
        assert power_calls() - before == 1  # the new GPU only
    finally:
        sampler.close()


def test_a_new_driver_session_asks_again(nvml_state: Path) -> None:
    """A driver replaced under the sampler (re-init) may support what the old one refused: its
    refusals are not carried into the new session, rediscovery or not."""
    write_state(nvml_state, node())
    sampler = NvmlSampler(watch_xids=False, clock=Clock(), rediscover_seconds=REDISCOVER)
    try:
        assert POWER not in by_uuid(sampler.sample())[OLD].values
        # A driver upgrade without a reboot: every GPU answers LIB_RM_VERSION_MISMATCH.
        mismatch = {
            (index, "nvmlDeviceGetMemoryInfo_v2"): pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH
            for index in range(2)
        }
        write_state(nvml_state, node(), errors=mismatch)
        assert not sampler.sample().nvml_up
        write_state(nvml_state, node(unsupported="[]"))
        assert by_uuid(sampler.sample())[OLD].values[POWER] == 300
    finally:
        sampler.close()


def test_a_failing_device_count_is_counted_and_logged(
    nvml_state: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A non-session error of nvmlDeviceGetCount, asked to judge a session code, is no reason
    to re-initialise, but it is counted by its kind and logged, not dropped."""
    write_state(nvml_state, node())
    sampler = NvmlSampler(watch_xids=False, clock=Clock(), rediscover_seconds=REDISCOVER)
    try:
        sampler.sample()
        write_state(
            nvml_state,
            node(),
            errors={(0, "nvmlDeviceGetTemperature"): pynvml.NVML_ERROR_UNINITIALIZED},
            node_errors={"nvmlDeviceGetCount_v2": pynvml.NVML_ERROR_UNKNOWN},
        )
        with caplog.at_level(logging.WARNING):
            sample = sampler.sample()
    finally:
        sampler.close()
    assert sample.nvml_up and len(sample.devices) == 2
    assert sample.errors == {"session": 1, "unknown": 1}
    assert any("nvmlDeviceGetCount" in r.getMessage() for r in caplog.records)


def test_rediscovery_that_cannot_count_keeps_the_devices_and_says_so_each_cycle(
    nvml_state: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """While the device count fails, the last known devices are sampled, every cycle retries
    and counts the failure; it is logged once, and its end too."""
    write_state(nvml_state, node())
    clock = Clock()
    sampler = NvmlSampler(watch_xids=False, clock=clock, rediscover_seconds=REDISCOVER)
    try:
        sampler.sample()
        failing = {"nvmlDeviceGetCount_v2": pynvml.NVML_ERROR_UNKNOWN}
        write_state(nvml_state, node(NEW), node_errors=failing)
        clock.now += REDISCOVER + 1
        with caplog.at_level(logging.INFO):
            samples = [sampler.sample() for _ in range(3)]
            write_state(nvml_state, node(NEW))
            recovered = sampler.sample()
    finally:
        sampler.close()
    for sample in samples:
        assert sample.nvml_up and sample.errors == {"unknown": 1}
        assert set(by_uuid(sample)) == {OLD, OTHER}  # the last known devices
    assert set(by_uuid(recovered)) == {NEW, OTHER} and recovered.errors == {}
    messages = [r.getMessage() for r in caplog.records if "discover" in r.getMessage()]
    assert len(messages) == 2, messages


def test_xids_of_a_replaced_gpu_count_under_its_own_uuid(nvml_state: Path) -> None:
    """NVML hands the GPU now at index 0 the same handle as the one before it: its Xid events
    belong to the new uuid, not to the GPU that left."""
    write_state(nvml_state, node())
    clock = Clock()
    sampler = NvmlSampler(clock=clock, rediscover_seconds=REDISCOVER)
    try:
        sampler.sample()
        write_state(nvml_state, node(NEW))
        clock.now += REDISCOVER + 1
        sampler.sample()
        write_state(nvml_state, node(NEW, xid="[79]"))

        def counted() -> dict[int, int]:
            return dict(by_uuid(sampler.sample())[NEW].xid_counts)

        assert wait_until(counted, timeout=10, what="the Xid under the new uuid") == {79: 1}
    finally:
        sampler.close()


def test_field_values_forget_the_gpus_named(nvml_state: Path) -> None:
    """`forget(uuids)` drops what is known of those GPUs: a forgotten GPU's 32-bit counter
    starts again from what NVML reads, not from the running sum across its wraps."""
    wrapped = "{pcie_transmit_bytes: 4294967396}"  # 2**32 + 100: NVML reads 100
    text = f"devices:\n  - uuid: {OLD}\n    readings: {{pcie_transmit_bytes: 4294967196}}\n"
    write_state(nvml_state, Scenario.parse(text).state_at(0))
    pynvml.nvmlInit()
    try:
        rows = fields_on(Where.GPU)
        reader = FieldReader()
        [gpu] = discover()
        sent = "nvidia_gpu_pcie_transmit_bytes_total"
        assert reader.read(OLD, gpu.handle, rows).values[sent] == 4294967196
        text = text.replace("{pcie_transmit_bytes: 4294967196}", wrapped)
        write_state(nvml_state, Scenario.parse(text).state_at(0))
        assert reader.read(OLD, gpu.handle, rows).values[sent] == 2**32 + 100  # summed
        reader.forget({OLD})
        assert reader.read(OLD, gpu.handle, rows).values[sent] == 100
    finally:
        pynvml.nvmlShutdown()
