"""The fake libnvidia-ml.so.1 answers the real pynvml bindings the way a driver would.

The exporter's NVML tests trust this fake, so these tests pin its behaviour through pynvml
itself: values and units, MIG, injected faults, lost GPUs, init failures, the old-driver
variant, Xid events and slow calls.
"""

from __future__ import annotations

import ctypes
import subprocess
import textwrap
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pynvml
import pytest

from fakenvml import NO_INSTANCE, SOURCE, call_count, render_state, write_state
from kube_gpu_exporter.exporter.simulated.scenario import NodeState, Scenario
from support import json_from_script

GIB = 1 << 30
MIB = 1 << 20

NODE = Scenario.parse(
    """
driver_version: "550.54.15"
devices:
  - uuid: GPU-11111111-2222-3333-4444-555555555555
    name: NVIDIA H100 80GB HBM3
    pci_bus_id: "00000000:18:00.0"
    memory_total_bytes: 80GiB
    memory_reserved_bytes: 512MiB
    power_limit_watts: 700
    energy_joules: 1000
    readings:
      utilization: 0.42
      memory_bandwidth_utilization: 0.25
      memory_used_bytes: 10GiB
      temperature_celsius: 61.6
      power_watts: 312.5
      sm_clock_mhz: 1755
      memory_clock_mhz: 2619
      clock_events: [sw_power_cap, hw_thermal_slowdown]
      ecc_corrected: 3
      ecc_uncorrected: 1
    processes:
      - {pid: 4242, used_memory_bytes: 6GiB, sm_utilization: 0.37}
      - {pid: 4343, used_memory_bytes: 1GiB, sm_utilization: 0.05}
    timeline:
      - {at: 10, xid: [79]}
      - {at: 20, xid: [13, 48]}
  - uuid: GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee
    name: NVIDIA A100-SXM4-40GB
    memory_total_bytes: 40GiB
    mig:
      - profile: 3g.20gb
        gpu_instance_id: 1
        uuid: MIG-00000000-0000-0000-0000-000000000001
        memory_total_bytes: 20GiB
        readings: {memory_used_bytes: 4GiB}
      - profile: 1g.5gb
        gpu_instance_id: 9
        uuid: MIG-00000000-0000-0000-0000-000000000009
        memory_total_bytes: 5GiB
    processes:
      - {pid: 777, used_memory_bytes: 2GiB, gpu_instance_id: 1, compute_instance_id: 0}
      - {pid: 888, used_memory_bytes: 1GiB, gpu_instance_id: 9, compute_instance_id: 0}
    timeline:
      - {at: 30, lost: true}
"""
)


@dataclass
class FakeDriver:
    """The state file the in-process fake serves."""

    state: Path

    def write(self, node: NodeState | None, **kwargs: Any) -> None:
        write_state(self.state, node, **kwargs)


@pytest.fixture
def driver(nvml_state: Path) -> FakeDriver:
    """pynvml bound to the fake in this process (see conftest's nvml_state)."""
    return FakeDriver(nvml_state)


@pytest.fixture
def nvml(driver: FakeDriver) -> FakeDriver:
    """The node at t=10 s, with NVML initialised."""
    driver.write(NODE.state_at(10))
    pynvml.nvmlInit()
    return driver


SLEEPS, OPENED = "nvmlEventSetWait sleep", "inotify watch opened"  # the fake's own counts


def address(handle: Any) -> int:
    return ctypes.cast(handle, ctypes.c_void_p).value or 0


def test_whole_gpu_identity(nvml: FakeDriver) -> None:
    assert pynvml.nvmlDeviceGetCount() == 2
    assert pynvml.nvmlSystemGetDriverVersion() == "550.54.15"
    assert pynvml.nvmlSystemGetNVMLVersion() == "12.550.54.15"
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetUUID(handle) == "GPU-11111111-2222-3333-4444-555555555555"
    assert pynvml.nvmlDeviceGetName(handle) == "NVIDIA H100 80GB HBM3"
    assert pynvml.nvmlDeviceGetIndex(handle) == 0
    pci = pynvml.nvmlDeviceGetPciInfo(handle)
    assert (pci.busId, pci.busIdLegacy) == ("00000000:18:00.0", "0000:18:00.0")
    assert (pci.domain, pci.bus, pci.device) == (0, 0x18, 0)
    by_uuid = pynvml.nvmlDeviceGetHandleByUUID("GPU-11111111-2222-3333-4444-555555555555")
    assert address(by_uuid) == address(handle)
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetHandleByUUID("GPU-nope")
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetHandleByIndex(2)
    assert pynvml.nvmlDeviceGetMigMode(handle) == [0, 0]


def test_minor_numbers(driver: FakeDriver) -> None:
    """Every GPU has a minor number, by default in an order unlike the index (a test that
    mixes the two up fails); `minor none` is a driver that will not say."""
    driver.state.write_text("device 0\ndevice 1\ndevice 2\nminor 7\ndevice 3\nminor none\n")
    pynvml.nvmlInit()
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(4)]
    assert [pynvml.nvmlDeviceGetMinorNumber(h) for h in handles[:3]] == [1, 0, 7]
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetMinorNumber(handles[3])

    driver.write(NODE.state_at(0))  # the writer gives each GPU its scenario's minor number
    assert pynvml.nvmlDeviceGetMinorNumber(pynvml.nvmlDeviceGetHandleByIndex(1)) == 1
    mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(pynvml.nvmlDeviceGetHandleByIndex(1), 0)
    with pytest.raises(pynvml.NVMLError_NotSupported):  # the driver refuses a MIG device's
        pynvml.nvmlDeviceGetMinorNumber(mig)

    # Two GPUs with one minor number: no driver numbers them so (a broken rewrite keeps the
    # last good state).
    driver.state.write_text("device 0\nminor 0\ndevice 1\n")
    assert pynvml.nvmlDeviceGetCount() == 2
    assert pynvml.nvmlDeviceGetMinorNumber(pynvml.nvmlDeviceGetHandleByIndex(1)) == 1


def test_whole_gpu_readings(nvml: FakeDriver) -> None:
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)

    v2 = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
    assert (v2.total, v2.reserved, v2.used) == (80 * GIB, 512 * MIB, 10 * GIB)
    assert v2.free == 80 * GIB - 512 * MIB - 10 * GIB
    v1 = pynvml.nvmlDeviceGetMemoryInfo(handle)
    assert (v1.total, v1.used) == (80 * GIB, 10 * GIB + 512 * MIB)  # v1 folds reserved in
    with pytest.raises(pynvml.NVMLError_ArgumentVersionMismatch):
        pynvml.nvmlDeviceGetMemoryInfo(handle, version=0x01000028)

    rates = pynvml.nvmlDeviceGetUtilizationRates(handle)
    assert (rates.gpu, rates.memory) == (42, 25)
    assert pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU) == 62
    assert pynvml.nvmlDeviceGetPowerUsage(handle) == 312_500
    assert pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) == 700_000
    # 1000 J at start plus 10 s at 312.5 W.
    assert pynvml.nvmlDeviceGetTotalEnergyConsumption(handle) == 4_125_000
    assert pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_GRAPHICS) == 1755
    assert pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM) == 1755
    assert pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM) == 2619
    assert pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM) == 1755
    # sw_power_cap 0x4 | hw_thermal_slowdown 0x40
    assert pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle) == 0x44
    assert pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle) == 0x44
    corrected, uncorrected = (
        pynvml.nvmlDeviceGetTotalEccErrors(handle, kind, pynvml.NVML_VOLATILE_ECC)
        for kind in (
            pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED,
            pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
        )
    )
    assert (corrected, uncorrected) == (3, 1)


def test_processes_and_process_utilization(nvml: FakeDriver) -> None:
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    procs = pynvml.nvmlDeviceGetComputeRunningProcesses_v3(handle)
    assert [(p.pid, p.usedGpuMemory, p.gpuInstanceId, p.computeInstanceId) for p in procs] == [
        (4242, 6 * GIB, NO_INSTANCE, NO_INSTANCE),
        (4343, 1 * GIB, NO_INSTANCE, NO_INSTANCE),
    ]
    before = int(time.time() * 1e6)
    samples = pynvml.nvmlDeviceGetProcessUtilization(handle, 0)
    assert [(s.pid, s.smUtil) for s in samples] == [(4242, 37), (4343, 5)]
    assert all(s.timeStamp >= before for s in samples)
    with pytest.raises(pynvml.NVMLError_NotFound):  # nothing newer than "the future"
        pynvml.nvmlDeviceGetProcessUtilization(handle, before + 3_600_000_000)

    nvml.write(Scenario.parse("devices: [{processes: []}]").state_at(0))
    idle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetComputeRunningProcesses_v3(idle) == []
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetProcessUtilization(idle, 0)


def test_mig(nvml: FakeDriver) -> None:
    parent = pynvml.nvmlDeviceGetHandleByIndex(1)
    assert pynvml.nvmlDeviceGetMigMode(parent) == [1, 1]
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(parent) == 7
    migs = [pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, slot) for slot in (0, 1)]
    for slot in range(2, 7):
        with pytest.raises(pynvml.NVMLError_NotFound):
            pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, slot)

    big, small = migs
    assert pynvml.nvmlDeviceIsMigDeviceHandle(big).value == 1
    assert pynvml.nvmlDeviceIsMigDeviceHandle(parent).value == 0
    assert pynvml.nvmlDeviceGetName(big) == "NVIDIA A100-SXM4-40GB MIG 3g.20gb"
    assert pynvml.nvmlDeviceGetName(small) == "NVIDIA A100-SXM4-40GB MIG 1g.5gb"
    assert pynvml.nvmlDeviceGetUUID(small) == "MIG-00000000-0000-0000-0000-000000000009"
    assert [pynvml.nvmlDeviceGetGpuInstanceId(m) for m in migs] == [1, 9]
    assert [pynvml.nvmlDeviceGetComputeInstanceId(m) for m in migs] == [0, 0]
    home = pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(big)
    assert address(home) == address(parent)
    attrs = pynvml.nvmlDeviceGetAttributes_v2(big)
    assert (attrs.gpuInstanceSliceCount, attrs.memorySizeMB) == (3, 20 * 1024)
    assert attrs.multiprocessorCount > 0

    memory = pynvml.nvmlDeviceGetMemoryInfo(big, version=pynvml.nvmlMemory_v2)
    assert (memory.total, memory.reserved, memory.used) == (20 * GIB, 0, 4 * GIB)
    assert pynvml.nvmlDeviceGetMemoryInfo(small).used == 0

    for handle in (parent, big):  # never supported on MIG, neither GPU nor instance
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlDeviceGetUtilizationRates(handle)
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlDeviceGetProcessUtilization(handle, 0)
    for read in (
        lambda h: pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
        pynvml.nvmlDeviceGetPowerUsage,
        pynvml.nvmlDeviceGetTotalEnergyConsumption,
        lambda h: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
        pynvml.nvmlDeviceGetCurrentClocksEventReasons,
    ):
        with pytest.raises(pynvml.NVMLError_NotSupported):
            read(big)  # read from the parent instead
        read(parent)

    everyone = pynvml.nvmlDeviceGetComputeRunningProcesses_v3(parent)
    assert [p.pid for p in everyone] == [777, 888]
    assert [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses_v3(big)] == [777]
    only = pynvml.nvmlDeviceGetComputeRunningProcesses_v3(small)
    assert [(p.pid, p.gpuInstanceId, p.computeInstanceId) for p in only] == [(888, 9, 0)]


def test_the_calls_other_nvml_clients_make(nvml: FakeDriver) -> None:
    """nvitop-exporter (bench/peers.py) reads the node through these; a missing one would
    cost it a failed symbol lookup and an exception on every device each cycle."""
    assert pynvml.nvmlSystemGetCudaDriverVersion() == 12040
    gpu = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetTemperatureV(gpu, pynvml.NVML_TEMPERATURE_GPU) == 62
    with pytest.raises(pynvml.NVMLError_ArgumentVersionMismatch):
        pynvml.nvmlDeviceGetTemperatureV(gpu, pynvml.NVML_TEMPERATURE_GPU, version=0x0200000C)
    assert pynvml.nvmlDeviceGetPowerManagementLimit(gpu) == 700_000
    for unsupported in (
        pynvml.nvmlDeviceGetFanSpeed,
        lambda h: pynvml.nvmlDeviceGetPcieThroughput(h, pynvml.NVML_PCIE_UTIL_TX_BYTES),
    ):
        with pytest.raises(pynvml.NVMLError_NotSupported):
            unsupported(gpu)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetPcieThroughput(gpu, 2)
    assert pynvml.nvmlDeviceGetGraphicsRunningProcesses_v3(gpu) == []
    assert len(pynvml.nvmlDeviceGetComputeRunningProcesses_v3(gpu)) == 2

    parent = pynvml.nvmlDeviceGetHandleByIndex(1)
    mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, 0)
    assert pynvml.nvmlDeviceGetGraphicsRunningProcesses_v3(mig) == []
    for whole_gpu_only in (
        lambda h: pynvml.nvmlDeviceGetTemperatureV(h, pynvml.NVML_TEMPERATURE_GPU),
        pynvml.nvmlDeviceGetPowerManagementLimit,
    ):
        with pytest.raises(pynvml.NVMLError_NotSupported):
            whole_gpu_only(mig)
        whole_gpu_only(parent)


def test_limit_and_temperature_v_follow_their_older_calls(driver: FakeDriver) -> None:
    node = Scenario.parse("devices: [{unsupported: [temperature_celsius, power_limit_watts]}]")
    driver.write(node.state_at(0))
    pynvml.nvmlInit()
    gpu = pynvml.nvmlDeviceGetHandleByIndex(0)
    for read in (
        lambda h: pynvml.nvmlDeviceGetTemperatureV(h, pynvml.NVML_TEMPERATURE_GPU),
        pynvml.nvmlDeviceGetPowerManagementLimit,
    ):
        with pytest.raises(pynvml.NVMLError_NotSupported):
            read(gpu)


def test_unsupported_readings_and_injected_errors(driver: FakeDriver) -> None:
    node = Scenario.parse(
        "devices: [{unsupported: [power_watts, ecc, clock_events, processes]}, {}]"
    ).state_at(0)
    driver.write(node, errors={(0, "nvmlDeviceGetTemperature"): 999, (1, "nvmlDeviceGetName"): 4})
    pynvml.nvmlInit()
    gpu0, gpu1 = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in (0, 1))

    for read in (
        pynvml.nvmlDeviceGetPowerUsage,
        lambda h: pynvml.nvmlDeviceGetTotalEccErrors(h, 0, 0),
        pynvml.nvmlDeviceGetCurrentClocksEventReasons,
        pynvml.nvmlDeviceGetCurrentClocksThrottleReasons,
        pynvml.nvmlDeviceGetComputeRunningProcesses_v3,
    ):
        with pytest.raises(pynvml.NVMLError_NotSupported):
            read(gpu0)
        read(gpu1)
    with pytest.raises(pynvml.NVMLError_Unknown):
        pynvml.nvmlDeviceGetTemperature(gpu0, pynvml.NVML_TEMPERATURE_GPU)
    with pytest.raises(pynvml.NVMLError_NoPermission):
        pynvml.nvmlDeviceGetName(gpu1)
    assert pynvml.nvmlDeviceGetName(gpu0) == "NVIDIA H100 80GB HBM3"
    assert pynvml.nvmlDeviceGetEnforcedPowerLimit(gpu0) == 700_000


def test_gpu_is_lost_after_rewrite_and_back(nvml: FakeDriver) -> None:
    nvml.write(NODE.state_at(0))  # before the MIG GPU is lost (at 30 s)
    healthy = pynvml.nvmlDeviceGetHandleByIndex(0)
    parent = pynvml.nvmlDeviceGetHandleByIndex(1)
    mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, 0)
    assert pynvml.nvmlDeviceGetMemoryInfo(mig).total == 20 * GIB

    nvml.write(NODE.state_at(31))
    for call in (
        lambda: pynvml.nvmlDeviceGetHandleByIndex(1),
        lambda: pynvml.nvmlDeviceGetUUID(parent),
        lambda: pynvml.nvmlDeviceGetMemoryInfo(parent, version=pynvml.nvmlMemory_v2),
        lambda: pynvml.nvmlDeviceGetMemoryInfo(mig),
        lambda: pynvml.nvmlDeviceGetUUID(mig),
    ):
        with pytest.raises(pynvml.NVMLError_GpuIsLost):
            call()
    assert pynvml.nvmlDeviceGetCount() == 2  # a lost GPU is still counted
    assert pynvml.nvmlDeviceGetPowerUsage(healthy) == 312_500

    nvml.write(NODE.state_at(0))  # the GPU came back: the old handles work again
    assert pynvml.nvmlDeviceGetMemoryInfo(mig).total == 20 * GIB


@pytest.mark.parametrize(
    ("code", "error"),
    [(9, pynvml.NVMLError_DriverNotLoaded), (18, pynvml.NVMLError_LibRmVersionMismatch)],
)
def test_init_error(driver: FakeDriver, code: int, error: type[Exception]) -> None:
    driver.write(NODE.state_at(0), init_error=code)
    with pytest.raises(error):
        pynvml.nvmlInit()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlDeviceGetCount()
    driver.write(NODE.state_at(0))  # the state file is read again at every init
    pynvml.nvmlInit()
    assert pynvml.nvmlDeviceGetCount() == 2


def test_missing_or_malformed_state_file(driver: FakeDriver) -> None:
    with pytest.raises(pynvml.NVMLError_DriverNotLoaded):
        pynvml.nvmlInit()
    driver.state.write_text("driver_version 550.54.15\nbogus line\n")
    with pytest.raises(pynvml.NVMLError_Unknown):
        pynvml.nvmlInit()

    driver.write(NODE.state_at(0))
    pynvml.nvmlInit()
    driver.state.write_text("device 7\n")  # a broken rewrite keeps the last good state
    assert pynvml.nvmlDeviceGetCount() == 2


def test_old_driver_lacks_the_v2_entry_points(fake_nvml_old_dir: Path, tmp_path: Path) -> None:
    """In a subprocess: pynvml's function-pointer cache must not see the old variant."""
    state = tmp_path / "state"
    write_state(state, NODE.state_at(0))
    script = textwrap.dedent(
        """
        import json, pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        out = {}
        for name, call in [
            ("memory_v2", lambda: pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)),
            ("event_reasons", lambda: pynvml.nvmlDeviceGetCurrentClocksEventReasons(h)),
        ]:
            try:
                call()
                out[name] = "ok"
            except pynvml.NVMLError_FunctionNotFound:
                out[name] = "function not found"
        out["memory_v1_used"] = pynvml.nvmlDeviceGetMemoryInfo(h).used
        out["throttle_reasons"] = pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(h)
        pynvml.nvmlShutdown()
        print(json.dumps(out))
        """
    )
    env = {"LD_LIBRARY_PATH": str(fake_nvml_old_dir), "FAKE_NVML_STATE": str(state)}
    assert json_from_script(script, env) == {
        "memory_v2": "function not found",
        "event_reasons": "function not found",
        "memory_v1_used": 10 * GIB + 512 * MIB,
        "throttle_reasons": 0x44,
    }


def test_xid_events_are_delivered_once(nvml: FakeDriver) -> None:
    nvml.write(NODE.state_at(0))
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetSupportedEventTypes(handle) & pynvml.nvmlEventTypeXidCriticalError
    events = pynvml.nvmlEventSetCreate()
    try:
        pynvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError, events)
        with pytest.raises(pynvml.NVMLError_Timeout):
            pynvml.nvmlEventSetWait_v2(events, 50)

        nvml.write(NODE.state_at(10))
        event = pynvml.nvmlEventSetWait_v2(events, 1000)
        assert (event.eventType, event.eventData) == (pynvml.nvmlEventTypeXidCriticalError, 79)
        assert address(event.device) == address(handle)
        assert (event.gpuInstanceId, event.computeInstanceId) == (NO_INSTANCE, NO_INSTANCE)
        with pytest.raises(pynvml.NVMLError_Timeout):
            pynvml.nvmlEventSetWait_v2(events, 50)

        # A rewrite while the wait is blocked is picked up by its polling.
        later = threading.Timer(0.2, nvml.write, args=(NODE.state_at(25),))
        later.start()
        started = time.monotonic()
        assert pynvml.nvmlEventSetWait_v2(events, 5000).eventData == 13
        assert 0.15 < time.monotonic() - started < 2
        later.join()
        assert pynvml.nvmlEventSetWait_v2(events, 0).eventData == 48
        with pytest.raises(pynvml.NVMLError_Timeout):
            pynvml.nvmlEventSetWait_v2(events, 50)
    finally:
        pynvml.nvmlEventSetFree(events)


def test_a_wait_without_events_sleeps_once_per_call(nvml: FakeDriver) -> None:
    """As the driver's, which blocks in the kernel: the exporter's Xid thread waits all the
    time, so each extra wakeup of the fake's was charged to the exporter's CPU figures. Its
    sleeps were 250 ms slices, each on an inotify descriptor opened and closed for it (a close
    makes the kernel wait out a grace period: one more sleep): four wakeups a 500 ms call. The
    fake counts both (`fakeNvmlCallCount`), which no scheduler's noise moves."""
    nvml.write(NODE.state_at(0))
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    events = pynvml.nvmlEventSetCreate()
    library = pynvml.nvmlLib
    counts: list[tuple[int, int]] = []

    def waits(calls: int) -> None:
        before = (call_count(library, SLEEPS), call_count(library, OPENED))
        for _ in range(calls):
            with pytest.raises(pynvml.NVMLError_Timeout):
                pynvml.nvmlEventSetWait_v2(events, 500)
        after = (call_count(library, SLEEPS), call_count(library, OPENED))
        counts.append((after[0] - before[0], after[1] - before[1]))

    try:
        pynvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError, events)
        waiter = threading.Thread(target=waits, args=(4,))
        waiter.start()
        waiter.join()
        [(sleeps, opened)] = counts
        assert opened == 1, counts  # one descriptor for the thread, kept: was one a sleep
        assert 4 <= sleeps <= 4 + 2, counts  # one a call (a change in the folder: one more)
    finally:
        pynvml.nvmlEventSetFree(events)


def test_a_new_event_set_starts_from_the_first_xid(nvml: FakeDriver) -> None:
    """Documented choice: Xids already in the file when a GPU registers are delivered too."""
    nvml.write(NODE.state_at(25))
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    events = pynvml.nvmlEventSetCreate()
    try:
        pynvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError, events)
        assert [pynvml.nvmlEventSetWait_v2(events, 100).eventData for _ in range(3)] == [79, 13, 48]
        with pytest.raises(pynvml.NVMLError_Timeout):
            pynvml.nvmlEventSetWait_v2(events, 0)
    finally:
        pynvml.nvmlEventSetFree(events)


def test_delay_ms_slows_every_call_but_error_string(driver: FakeDriver) -> None:
    driver.write(NODE.state_at(0), delay_ms=150)
    started = time.monotonic()
    pynvml.nvmlInit()
    assert time.monotonic() - started >= 0.15
    started = time.monotonic()
    assert pynvml.nvmlDeviceGetCount() == 2
    assert time.monotonic() - started >= 0.15
    started = time.monotonic()
    assert pynvml.nvmlErrorString(15) == "GPU is lost"
    assert time.monotonic() - started < 0.1

    # Slow calls overlap across threads rather than queueing on the fake's lock.
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    threads = [
        threading.Thread(target=pynvml.nvmlDeviceGetPowerUsage, args=(handle,)) for _ in range(4)
    ]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert time.monotonic() - started < 0.5


def test_hang_blocks_every_call_until_a_rewrite_drops_it(nvml: FakeDriver) -> None:
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    nvml.write(NODE.state_at(10), hang=True)
    answers: list[int] = []
    thread = threading.Thread(target=lambda: answers.append(pynvml.nvmlDeviceGetCount()))
    thread.start()
    thread.join(0.5)
    assert thread.is_alive() and answers == []  # stuck, as in a driver that never returns
    assert pynvml.nvmlErrorString(15) == "GPU is lost"  # never hangs: pynvml's error path
    nvml.write(NODE.state_at(10))
    thread.join(5)
    assert answers == [2]
    assert pynvml.nvmlDeviceGetPowerUsage(handle) == 312_500


def test_hang_holds_init_too(driver: FakeDriver) -> None:
    driver.write(NODE.state_at(0), hang=True)
    thread = threading.Thread(target=pynvml.nvmlInit)
    thread.start()
    thread.join(0.3)
    assert thread.is_alive()
    driver.write(NODE.state_at(0))
    thread.join(5)
    assert not thread.is_alive() and pynvml.nvmlDeviceGetCount() == 2


def test_concurrent_reads_during_rewrites(nvml: FakeDriver) -> None:
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    failures: list[BaseException] = []

    def read() -> None:
        try:
            for _ in range(300):
                assert pynvml.nvmlDeviceGetPowerUsage(handle) == 312_500
                pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
        except BaseException as exc:  # reported by the main thread
            failures.append(exc)

    threads = [threading.Thread(target=read) for _ in range(4)]
    for thread in threads:
        thread.start()
    for t in range(30):
        nvml.write(NODE.state_at(10 + t % 3))
    for thread in threads:
        thread.join()
    assert failures == []


def test_render_state_lines() -> None:
    node = Scenario.parse(
        """
devices:
  - uuid: GPU-x
    name: NVIDIA A100-SXM4-40GB
    pci_bus_id: "00000000:3B:00.0"
    memory_total_bytes: 40GiB
    memory_reserved_bytes: 0
    power_limit_watts: 400.0
    unsupported: [energy, gpm]
    readings: {utilization: 0.125, temperature_celsius: 30.5, power_watts: 55.55,
               clock_events: [gpu_idle, sw_thermal_slowdown]}
    processes: [{pid: 9, used_memory_bytes: 1MiB, sm_utilization: 0.5, gpu_instance_id: 2}]
    mig: [{profile: 2g.10gb, gpu_instance_id: 2, uuid: MIG-y, memory_total_bytes: 10GiB}]
"""
    ).state_at(0)
    text = render_state(node, delay_ms=5, init_error=9, errors={(0, "nvmlDeviceGetIndex"): 999})
    assert text.splitlines()[1:] == [
        "driver_version 550.54.15",
        "delay_ms 5",
        "init_error 9",
        "device 0",
        "uuid GPU-x",
        "name NVIDIA A100-SXM4-40GB",
        "pci_bus_id 00000000:3B:00.0",
        "minor 0",
        "lost 0",
        f"memory {40 * GIB} 0 0",
        "utilization 13 0",
        "temperature 31",
        "power 55550",
        "power_limit 400000",
        "energy 0",
        "clocks 1980 2619",
        "clock_events 0x21",
        "ecc 0 0",
        "codec 0 0",
        # field values: <id> <scope> <bits> <value in NVML's unit>
        *(f"field {f} 0 32 0" for f in (197, 198, 94)),
        *(f"field {f} 0 64 0" for f in (142, 143, 144, 145)),
        "field 230 0 32 0",
        "field 82 0 32 40",
        *(f"field {f} 0 64 0" for f in (269, 270, 271)),
        "field 190 0 32 400000",
        "gpm_supported 0",  # an A100: no GPM, so no gpm and no mig_gpm lines
        "error nvmlDeviceGetIndex 999",
        "error nvmlDeviceGetTotalEnergyConsumption 3",
        f"mig 2 0 2 {10 * GIB} 0 MIG-y NVIDIA A100-SXM4-40GB MIG 2g.10gb",
        f"process 9 {MIB} 2 {NO_INSTANCE} 50 0",
    ]
    with pytest.raises(ValueError, match="GPU indexes"):
        render_state(node, errors={(3, "nvmlDeviceGetName"): 3})


def test_source_compiles_without_warnings(tmp_path: Path) -> None:
    flags = ["-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror"]
    for extra in ([], ["-DFAKE_NVML_OLD_DRIVER"]):
        out = tmp_path / f"lib{len(extra)}.so"
        result = subprocess.run(
            ["cc", *flags, *extra, "-o", str(out), str(SOURCE), "-lpthread"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, result.stderr
