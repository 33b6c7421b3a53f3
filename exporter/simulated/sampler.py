"""The simulated backend: a scenario file played over time instead of NVML.

It produces the same `NodeSample` the NVML backend would read from a fake libnvidia-ml driven
by the same scenario (a test holds the two side by side), so `make demo` and the dashboards
can be exercised on a machine without a GPU.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

from kube_gpu_exporter.exporter.readings_table import (
    CLOCK_EVENTS,
    PROCESSES,
    Where,
    faulted_functions,
    numbers_on,
    unsupported_values,
)
from kube_gpu_exporter.exporter.simulated.scenario import DeviceState, MigState, NodeState, Scenario
from kube_gpu_exporter.exporter.snapshot import (
    DeviceIdentity,
    DeviceSample,
    NodeSample,
    ProcessSample,
    gpu_share,
)

# A GPU's MIG slices (A100 and H100: 7), what the fake's nvmlDeviceGetMaxMigDeviceCount says.
MIG_SLICES = 7


def _values(
    state: DeviceState | MigState, where: Where, unsupported: frozenset[str], links: int = 0
) -> tuple[dict[str, float], dict[tuple[str, ...], float]]:
    """The numbers NVML would give for this kind of device, from the readings table.

    A row read by its own call is dropped when one of its NVML functions is faulted: one
    unsupported key drops every reading of that call (both clocks come from one), as
    NOT_SUPPORTED on a real driver. Field values and GPM metrics drop value by value. Values
    of labelled metrics go to the second map, one per NVLink for a per-link field (the links
    the NVML sampler asks for: Value.entries).
    """
    faulted = faulted_functions(unsupported)
    plain: dict[str, float] = {}
    labelled: dict[tuple[str, ...], float] = {}
    for row in numbers_on(where):
        if not faulted.isdisjoint(row.functions):
            continue
        dropped = unsupported_values(row, unsupported)
        for value in row.values:
            if value.state in dropped:
                continue
            number = float(state.readings[value.state]) * value.scale
            for entry in value.entries(links):
                if entry.labels:
                    labelled[(value.metric.name, *entry.labels)] = number
                else:
                    plain[value.metric.name] = number
    return plain, labelled


def _processes(
    device: DeviceState, faulted: frozenset[str], mig: MigState | None = None
) -> tuple[ProcessSample, ...] | None:
    """The device's compute processes; on MIG, those of the instance, without utilization."""
    if not faulted.isdisjoint(PROCESSES.functions):
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


def _mig_identity(parent: DeviceIdentity, mig: MigState) -> DeviceIdentity:
    return DeviceIdentity(
        share=gpu_share(mig.profile, None, MIG_SLICES),
        index=parent.index,
        uuid=mig.uuid,
        model=parent.model,
        pci_bus_id=parent.pci_bus_id,
        parent_uuid=parent.uuid,
        mig_profile=mig.profile,
        gpu_instance_id=mig.gpu_instance_id,
        compute_instance_id=mig.compute_instance_id,
        minor=parent.minor,
    )


def _device_samples(
    device: DeviceState, errors: Counter[str], xid_codes: tuple[int, ...], watched: bool
) -> list[DeviceSample]:
    """The GPU and its MIG instances; faults on the GPU's functions hold for its instances.
    Without an Xid watch (`watched` false) nothing is counted, as on NVML without one."""
    identity = DeviceIdentity(
        index=device.index,
        uuid=device.uuid,
        model=device.name,
        pci_bus_id=device.pci_bus_id,
        minor=device.minor,
    )
    xids = (dict.fromkeys(xid_codes, 0) | dict(Counter(device.xids))) if watched else {}
    migs = [(_mig_identity(identity, m), m) for m in device.mig]
    if device.lost:
        errors["gpu_is_lost"] += 1
        down = [DeviceSample(identity, up=False, xid_counts=xids, xid_watched=watched)]
        return down + [DeviceSample(mig_identity, up=False) for mig_identity, _ in migs]
    faulted = faulted_functions(device.unsupported)
    where = Where.MIG_ENABLED_GPU if device.mig else Where.GPU
    values, labelled = _values(device, where, device.unsupported, device.nvlink_links)
    clock_events = device.clock_events if faulted.isdisjoint(CLOCK_EVENTS.functions) else None
    processes = _processes(device, faulted)
    gpu = DeviceSample(identity, True, values, clock_events, xids, processes, labelled, watched)
    return [gpu] + [
        DeviceSample(
            mig_identity,
            up=True,
            values=_values(mig, Where.MIG_INSTANCE, device.unsupported)[0],
            processes=_processes(device, faulted, mig),
        )
        for mig_identity, mig in migs
    ]


def node_sample(
    state: NodeState, xid_codes: tuple[int, ...] = (), xid_watch_start: float | None = None
) -> NodeSample:
    """What NVML would report for this scenario state (with the NVML sampler's `xid_codes`;
    `xid_watch_start`: the Unix time the scenario's Xids count from, its start; None: no Xid
    watch, so no GPU's Xids are counted)."""
    errors: Counter[str] = Counter()
    watched = xid_watch_start is not None
    samples = [s for d in state.devices for s in _device_samples(d, errors, xid_codes, watched)]
    return NodeSample(
        nvml_up=True,
        driver_version=state.driver_version,
        devices=tuple(samples),
        errors=dict(errors),
        xid_watch_start=xid_watch_start,
    )


class SimulatedSampler:
    """Plays a scenario from the moment it is created."""

    # Invented readings under the real metric names: the exposition says so (build_info).
    simulated = True

    def __init__(
        self,
        scenario: Scenario,
        clock: Callable[[], float] = time.monotonic,
        xid_codes: tuple[int, ...] = (),
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._scenario = scenario
        self._clock = clock
        self._started = clock()
        self._xid_codes = xid_codes
        self._xid_watch_start = wall_clock()  # the scenario's Xids count from its start

    def sample(self) -> NodeSample:
        state = self._scenario.state_at(self._clock() - self._started)
        return node_sample(state, self._xid_codes, self._xid_watch_start)

    def close(self) -> None:
        pass
