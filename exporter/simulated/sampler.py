"""The simulated backend: a scenario file played over time instead of NVML.

It produces the same `NodeSample` the NVML backend would read from a fake libnvidia-ml driven
by the same scenario (a test holds the two side by side), so `make demo` and the dashboards
can be exercised on a machine without a GPU.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.exporter.simulated.scenario import DeviceState, MigState, NodeState, Scenario
from kube_gpu_exporter.exporter.snapshot import (
    DeviceIdentity,
    DeviceSample,
    NodeSample,
    ProcessSample,
)


def _gpu_values(device: DeviceState) -> dict[str, float]:
    """The readings NVML would give. Each group is one NVML call: one unsupported key in it
    drops the whole group, as NOT_SUPPORTED on that call does on a real driver."""
    groups: list[tuple[tuple[str, ...], dict[str, float]]] = [
        (
            ("memory",),
            {
                c.MEMORY_USED.name: float(device.memory_used_bytes),
                c.MEMORY_TOTAL.name: float(device.memory_total_bytes),
                c.MEMORY_RESERVED.name: float(device.memory_reserved_bytes),
            },
        ),
        (
            ("utilization", "memory_bandwidth_utilization"),
            {
                c.UTILIZATION.name: device.utilization,
                c.MEMORY_BANDWIDTH_UTILIZATION.name: device.memory_bandwidth_utilization,
            },
        ),
        (("temperature_celsius",), {c.TEMPERATURE.name: device.temperature_celsius}),
        (("power_watts",), {c.POWER.name: device.power_watts}),
        (("power_limit_watts",), {c.POWER_LIMIT.name: device.power_limit_watts}),
        (("energy",), {c.ENERGY.name: device.energy_joules}),
        (
            ("sm_clock_mhz", "memory_clock_mhz"),
            {
                c.SM_CLOCK.name: device.sm_clock_mhz * 1e6,
                c.MEMORY_CLOCK.name: device.memory_clock_mhz * 1e6,
            },
        ),
        (
            ("ecc",),
            {
                c.ECC_CORRECTED.name: float(device.ecc_corrected),
                c.ECC_UNCORRECTED.name: float(device.ecc_uncorrected),
            },
        ),
    ]
    values: dict[str, float] = {}
    for keys, readings in groups:
        if device.unsupported.isdisjoint(keys):
            values.update(readings)
    if device.mig:  # NVML never supports utilization on MIG-enabled GPUs
        values.pop(c.UTILIZATION.name, None)
        values.pop(c.MEMORY_BANDWIDTH_UTILIZATION.name, None)
    return values


def _processes(
    device: DeviceState, mig: MigState | None = None
) -> tuple[ProcessSample, ...] | None:
    """The device's compute processes; on MIG, those of the instance, without utilization."""
    if "processes" in device.unsupported:
        return None
    on_mig = bool(device.mig)
    return tuple(
        ProcessSample(
            pid=p.pid,
            used_memory_bytes=float(p.used_memory_bytes),
            sm_utilization=None if on_mig else p.sm_utilization,
        )
        for p in device.processes
        if mig is None
        or (
            p.gpu_instance_id == mig.gpu_instance_id
            and p.compute_instance_id in (None, mig.compute_instance_id)
        )
    )


def _mig_sample(parent: DeviceIdentity, device: DeviceState, mig: MigState) -> DeviceSample:
    identity = DeviceIdentity(
        index=parent.index,
        uuid=mig.uuid,
        model=parent.model,
        pci_bus_id=parent.pci_bus_id,
        parent_uuid=parent.uuid,
        mig_profile=mig.profile,
        gpu_instance_id=mig.gpu_instance_id,
        compute_instance_id=mig.compute_instance_id,
    )
    values = {
        c.MEMORY_USED.name: float(mig.memory_used_bytes),
        c.MEMORY_TOTAL.name: float(mig.memory_total_bytes),
        c.MEMORY_RESERVED.name: 0.0,
    }
    return DeviceSample(identity, up=True, values=values, processes=_processes(device, mig))


def node_sample(state: NodeState) -> NodeSample:
    """What NVML would report for this scenario state."""
    samples: list[DeviceSample] = []
    errors: Counter[str] = Counter()
    for device in state.devices:
        identity = DeviceIdentity(
            index=device.index,
            uuid=device.uuid,
            model=device.name,
            pci_bus_id=device.pci_bus_id,
        )
        xids = dict(Counter(device.xids))
        if device.lost:
            errors["gpu_is_lost"] += 1
            samples.append(DeviceSample(identity, up=False, xid_counts=xids))
            samples.extend(
                DeviceSample(_mig_sample(identity, device, m).identity, up=False)
                for m in device.mig
            )
            continue
        clock_events = None if "clock_events" in device.unsupported else device.clock_events
        values = _gpu_values(device)
        samples.append(DeviceSample(identity, True, values, clock_events, xids, _processes(device)))
        samples.extend(_mig_sample(identity, device, m) for m in device.mig)
    return NodeSample(
        nvml_up=True,
        driver_version=state.driver_version,
        devices=tuple(samples),
        errors=dict(errors),
    )


class SimulatedSampler:
    """Plays a scenario from the moment it is created."""

    def __init__(self, scenario: Scenario, clock: Callable[[], float] = time.monotonic) -> None:
        self._scenario = scenario
        self._clock = clock
        self._started = clock()

    def sample(self) -> NodeSample:
        return node_sample(self._scenario.state_at(self._clock() - self._started))

    def close(self) -> None:
        pass
