"""When NVML's process list can be all there is on a device.

The split of a shared GPU among its holders, and the device's compute process count, are only
known where the listed processes account for what the device's own readings show. A process
NVML does not list would otherwise read as 0 for its holder, and a count of 0 as an idle GPU.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from kube_gpu_exporter.exporter.attribution.attribute import attribute, lists_every_process
from kube_gpu_exporter.exporter.kubelet.listing import ContainerAllocation, Listing
from kube_gpu_exporter.exporter.snapshot import (
    DeviceIdentity,
    DeviceSample,
    Holder,
    ProcessSample,
)

GIB = float(1 << 30)
MIB = float(1 << 20)
GPU = DeviceIdentity(0, "GPU-11111111-0000-4000-8000-000000000000", "NVIDIA H100", "0")
A = Holder("lab", "notebook-a", "jupyter")
B = Holder("lab", "notebook-b", "jupyter")


class Owners:
    """Pid 100 runs in notebook-a, pid 200 in notebook-b."""

    def labels(self, holder: Holder) -> Mapping[str, str] | None:
        return {}

    def owner_of_process(self, pid: int) -> Holder | None:
        return {100: A, 200: B}.get(pid)

    def dra_device_uuid(self, pool: str, device: str) -> str | None:
        return None


def device(
    utilization: float | None, used: float, *processes: ProcessSample | None
) -> DeviceSample:
    values = {"nvidia_gpu_memory_used_bytes": used}
    if utilization is not None:
        values["nvidia_gpu_utilization_ratio"] = utilization
    listed = None if processes == (None,) else tuple(p for p in processes if p is not None)
    return DeviceSample(GPU, True, values, processes=listed)


def split(sample: DeviceSample) -> dict[str, tuple[float | None, float | None]]:
    held = tuple(
        ContainerAllocation(
            h.namespace, h.pod, h.container, "nvidia.com/gpu", (f"{GPU.uuid}::{i}",)
        )
        for i, h in enumerate((A, B))
    )
    attr = attribute((sample,), Listing(held, (), None), Owners())
    return {u.holder.pod: (u.utilization, u.memory_used_bytes) for u in attr.usage}


def proc(pid: int, memory: float | None, util: float | None) -> ProcessSample:
    return ProcessSample(pid, memory, util)


# Each device below holds work its listed processes do not account for.
UNACCOUNTED = {
    # notebook-b's busy process is hidden and holds less than the memory slack: its holder
    # would read utilization 0 and memory 0
    "hidden busy process under the slack": device(0.8, 2.5 * GIB, proc(100, 2 * GIB, 0.3)),
    "nothing listed on a busy device": device(0.8, 300 * MIB),
    "busy, the listed processes' utilization unknown": device(
        0.8, 2 * GIB, proc(100, 1 * GIB, None), proc(200, 1 * GIB, None)
    ),
    "a listed process's memory unknown": device(
        0.0, 2 * GIB, proc(100, None, 0.0), proc(200, 1 * GIB, 0.0)
    ),
    "NVML could not list": device(0.0, 0.0, None),
}


@pytest.mark.parametrize("name", sorted(UNACCOUNTED))
def test_a_list_that_cannot_account_for_the_device_is_not_all(name: str) -> None:
    sample = UNACCOUNTED[name]
    assert not lists_every_process(sample)
    assert split(sample) == {}  # absent: never 0 for a holder whose process is hidden


def test_listed_processes_that_account_for_the_device_split_it() -> None:
    """Process and device utilization are sampled over different windows: a few points of
    difference are noise, not a hidden process."""
    sample = device(0.8, 3 * GIB, proc(100, 2 * GIB, 0.5), proc(200, 0.5 * GIB, 0.27))
    assert lists_every_process(sample)
    assert split(sample) == {"notebook-a": (0.5, 2 * GIB), "notebook-b": (0.27, 0.5 * GIB)}


def test_an_idle_device_with_nothing_listed_is_idle_for_every_holder() -> None:
    sample = device(0.0, 300 * MIB)  # the driver's own few hundred MiB
    assert lists_every_process(sample)
    assert split(sample) == {"notebook-a": (0.0, 0.0), "notebook-b": (0.0, 0.0)}


def test_without_a_utilization_reading_memory_alone_decides() -> None:
    """A MIG instance has no NVML utilization: its list is judged by memory only."""
    assert lists_every_process(device(None, 1 * GIB, proc(100, 1 * GIB, None)))
    assert not lists_every_process(device(None, 5 * GIB, proc(100, 1 * GIB, None)))
