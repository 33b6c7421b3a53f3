"""Attribution: exclusive devices carry the device's values, shared ones a split by process."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from kube_gpu_exporter.exporter.attribution.attribute import attribute
from kube_gpu_exporter.exporter.kubelet.listing import (
    ContainerAllocation,
    DraAllocation,
    Listing,
)
from kube_gpu_exporter.exporter.simulated.sampler import node_sample
from kube_gpu_exporter.exporter.simulated.scenario import Scenario
from kube_gpu_exporter.exporter.snapshot import AttributionSample, DeviceSample, Holder

GIB = 1 << 30
NODE = node_sample(
    Scenario.parse(
        """
devices:
  - uuid: GPU-00000000-0000-4000-8000-000000000000
    readings: {utilization: 0.8, memory_used_bytes: 20GiB}
  - uuid: GPU-11111111-0000-4000-8000-000000000000
    readings: {utilization: 0.9, memory_used_bytes: 30GiB}
    processes:
      - {pid: 100, used_memory_bytes: 10GiB, sm_utilization: 0.6}
      - {pid: 200, used_memory_bytes: 20GiB, sm_utilization: 0.3}
  - uuid: GPU-22222222-0000-4000-8000-000000000000
    mig:
      - {profile: 3g.40gb, gpu_instance_id: 1, uuid: MIG-33333333-0000-4000-8000-000000000000,
         memory_total_bytes: 40GiB, readings: {memory_used_bytes: 5GiB, graphics_active: 0.35}}
      - {profile: 3g.40gb, gpu_instance_id: 2, uuid: MIG-44444444-0000-4000-8000-000000000000,
         memory_total_bytes: 40GiB}
  - uuid: GPU-55555555-0000-4000-8000-000000000000
  - uuid: GPU-77777777-0000-4000-8000-000000000000
"""
    ).state_at(0)
).devices
TRAINER = Holder("ml", "trainer-0", "main")
NOTEBOOK_A = Holder("lab", "notebook-a", "jupyter")
NOTEBOOK_B = Holder("lab", "notebook-b", "jupyter")
NOTEBOOK_C = Holder("lab", "notebook-c", "jupyter")


class Directory:
    """A pod directory as the Kubernetes watch would give it: pids 100/200 belong to A/B."""

    def __init__(self, owners: Mapping[int, Holder], gone: frozenset[Holder] = frozenset()):
        self.owners = owners
        self.gone = gone

    def labels(self, holder: Holder) -> Mapping[str, str] | None:
        return None if holder in self.gone else {"owner_kind": "Job"}

    def owner_of_process(self, pid: int) -> Holder | None:
        return self.owners.get(pid)

    def dra_device_uuid(self, pool: str, device: str) -> str | None:
        """As the ResourceSlice of node-1 says: device gpu-7 is GPU ...77."""
        known = {("node-1", "gpu-7"): "GPU-77777777-0000-4000-8000-000000000000"}
        return known.get((pool, device))


def alloc(holder: Holder, resource: str, *ids: str) -> ContainerAllocation:
    return ContainerAllocation(holder.namespace, holder.pod, holder.container, resource, ids)


def listing(*allocations: ContainerAllocation, **allocatable: tuple[str, ...]) -> Listing:
    return Listing(allocations=allocations, dra=(), allocatable=allocatable)


def usage(attr: AttributionSample) -> dict[tuple[str, str], tuple[float | None, float | None]]:
    return {(u.device.uuid, u.holder.pod): (u.utilization, u.memory_used_bytes) for u in attr.usage}


def test_exclusive_gpu_carries_the_device_values() -> None:
    attr = attribute(
        NODE,
        listing(alloc(TRAINER, "nvidia.com/gpu", "GPU-00000000-0000-4000-8000-000000000000")),
        Directory({}),
    )
    (a,) = attr.allocations
    assert (a.holder, a.sharing, a.resource, a.labels) == (
        TRAINER,
        "exclusive",
        "nvidia.com/gpu",
        {"owner_kind": "Job"},
    )
    assert usage(attr) == {
        ("GPU-00000000-0000-4000-8000-000000000000", "trainer-0"): (0.8, 20 * GIB)
    }


def test_time_sliced_gpu_is_split_by_process_never_copied() -> None:
    gpu = "GPU-11111111-0000-4000-8000-000000000000"
    node = listing(
        alloc(NOTEBOOK_A, "nvidia.com/gpu", f"{gpu}::0"),
        alloc(NOTEBOOK_B, "nvidia.com/gpu", f"{gpu}::1"),
        alloc(NOTEBOOK_C, "nvidia.com/gpu", f"{gpu}::2"),
    )
    attr = attribute(NODE, node, Directory({100: NOTEBOOK_A, 200: NOTEBOOK_B}))
    assert {a.sharing for a in attr.allocations} == {"shared"}
    assert usage(attr) == {
        (gpu, "notebook-a"): (0.6, 10 * GIB),
        (gpu, "notebook-b"): (0.3, 20 * GIB),
        (gpu, "notebook-c"): (0.0, 0.0),  # holds a share, runs nothing: idle
    }


def test_shared_gpu_without_process_owners_reports_no_usage() -> None:
    gpu = "GPU-11111111-0000-4000-8000-000000000000"
    node = listing(
        alloc(NOTEBOOK_A, "nvidia.com/gpu.shared", f"{gpu}::0"),
        alloc(NOTEBOOK_B, "nvidia.com/gpu.shared", f"{gpu}::1"),
    )
    attr = attribute(NODE, node, Directory({100: NOTEBOOK_A}))  # pid 200 cannot be placed
    assert len(attr.allocations) == 2 and attr.usage == ()


def test_renamed_shared_resource_with_one_holder_is_still_shared() -> None:
    gpu = "GPU-11111111-0000-4000-8000-000000000000"
    attr = attribute(
        NODE,
        listing(alloc(NOTEBOOK_A, "nvidia.com/gpu.shared", gpu)),
        Directory({100: NOTEBOOK_A, 200: NOTEBOOK_A}),
    )
    assert attr.allocations[0].sharing == "shared"
    util, memory = usage(attr)[(gpu, "notebook-a")]  # the sum of its own two processes
    assert (util, memory) == (pytest.approx(0.9), 30 * GIB)


def test_mig_mixed_and_single_strategy() -> None:
    mixed = alloc(TRAINER, "nvidia.com/mig-3g.40gb", "MIG-33333333-0000-4000-8000-000000000000")
    single = alloc(NOTEBOOK_A, "nvidia.com/gpu", "MIG-44444444-0000-4000-8000-000000000000")
    attr = attribute(NODE, listing(mixed, single), Directory({}))
    assert [(a.device.mig_profile, a.resource) for a in attr.allocations] == [
        ("3g.40gb", "nvidia.com/mig-3g.40gb"),
        ("3g.40gb", "nvidia.com/gpu"),
    ]
    # MIG has no NVML utilization: an H100 instance's activity is its own GPM engine activity.
    assert usage(attr)[("MIG-33333333-0000-4000-8000-000000000000", "trainer-0")] == (
        0.35,
        5 * GIB,
    )


def test_mig_on_ampere_has_no_activity_source() -> None:
    """No GPM before Hopper: a MIG holder's utilization is absent, never a made-up 0."""
    a100 = node_sample(
        Scenario.parse(
            """
devices:
  - name: NVIDIA A100-SXM4-40GB
    unsupported: [utilization, memory_bandwidth_utilization, gpm]
    mig:
      - {profile: 1g.5gb, gpu_instance_id: 13, uuid: MIG-66666666-0000-4000-8000-000000000000,
         memory_total_bytes: 5GiB, readings: {memory_used_bytes: 1GiB}}
"""
        ).state_at(0)
    ).devices
    held = alloc(TRAINER, "nvidia.com/mig-1g.5gb", "MIG-66666666-0000-4000-8000-000000000000")
    attr = attribute(a100, listing(held), Directory({}))
    assert usage(attr) == {("MIG-66666666-0000-4000-8000-000000000000", "trainer-0"): (None, GIB)}
    assert attr.allocations[0].device.share == pytest.approx(1 / 7)


def test_capacity_unmapped_ids_and_terminated_pods() -> None:
    node = Listing(
        allocations=(
            alloc(
                TRAINER,
                "nvidia.com/gpu",
                "GPU-00000000-0000-4000-8000-000000000000",
                "GPU-deadbeef-0000-4000-8000-000000000000",
            ),
            alloc(NOTEBOOK_A, "nvidia.com/mig-3g.40gb", "MIG-33333333-0000-4000-8000-000000000000"),
            alloc(NOTEBOOK_B, "nvidia.com/gpu", "GPU-55555555-0000-4000-8000-000000000000"),
        ),
        dra=(
            DraAllocation("ml", "p", "c", "ml", "claim", "gpu.nvidia.com", "node-1", "gpu-0", None),
            DraAllocation("ml", "dra-0", "c", "ml", "c", "gpu.nvidia.com", "node-1", "gpu-7", None),
            DraAllocation("ml", "tpu-0", "c", "ml", "c", "tpu.example.com", "node-1", "t-0", None),
        ),
        allocatable={
            "nvidia.com/gpu": (
                "GPU-00000000-0000-4000-8000-000000000000",
                "GPU-11111111-0000-4000-8000-000000000000",
                "GPU-55555555-0000-4000-8000-000000000000",
            ),
            "nvidia.com/mig-3g.40gb": (
                "MIG-33333333-0000-4000-8000-000000000000",
                "MIG-44444444-0000-4000-8000-000000000000",
            ),
        },
    )
    attr = attribute(NODE, node, Directory({}, gone=frozenset({NOTEBOOK_B})))
    assert attr.unmapped == {"nvidia.com/gpu": 1, "dra/gpu.nvidia.com": 1}
    dra_holder = Holder("ml", "dra-0", "c")
    assert {a.holder for a in attr.allocations} == {TRAINER, NOTEBOOK_A, dra_holder}  # B ended
    (dra,) = [a for a in attr.allocations if a.holder == dra_holder]
    assert (dra.device.uuid, dra.resource) == (
        "GPU-77777777-0000-4000-8000-000000000000",
        "dra/gpu.nvidia.com",
    )
    cap = attr.capacity
    assert cap.driver_gpus == 5
    assert cap.advertised == {"nvidia.com/gpu": 3, "nvidia.com/mig-3g.40gb": 2}
    # Only what is attributed is allocated: not the id that names no GPU, not the unresolved
    # DRA claim, not the ended pod's GPU.
    assert cap.allocated == {
        "dra/gpu.nvidia.com": 1,
        "nvidia.com/gpu": 1,
        "nvidia.com/mig-3g.40gb": 1,
    }
    # GPU 0 held, GPU 2 has an instance held, GPU 7 by DRA, GPU 5's holder ended: 1 and 5 free.
    assert cap.free_gpus == 2


def test_without_a_listing_only_the_driver_count_is_known() -> None:
    attr = attribute(NODE, None, Directory({}))
    assert attr.allocations == () and attr.usage == ()
    assert (attr.capacity.driver_gpus, attr.capacity.advertised, attr.capacity.free_gpus) == (
        5,
        None,
        None,
    )


def _shared_node(
    processes: str, utilization: float = 0.8, used: str = "50GiB"
) -> tuple[DeviceSample, ...]:
    return node_sample(
        Scenario.parse(
            f"""
devices:
  - uuid: GPU-11111111-0000-4000-8000-000000000000
    readings: {{utilization: {utilization}, memory_used_bytes: {used}}}
    processes: {processes}
"""
        ).state_at(0)
    ).devices


@pytest.mark.parametrize(
    ("processes", "utilization", "used"),
    [
        ("[]", 0.8, "50GiB"),  # NVML lists nobody (another PID namespace): busy, 50 GiB held
        ("[]", 0.0, "50GiB"),  # nobody listed, yet 50 GiB held
        ("[]", 0.8, "0GiB"),  # nobody listed, yet the device is busy
        # one process of two listed: 40 GiB of the 50 are nobody's
        ("[{pid: 100, used_memory_bytes: 10GiB, sm_utilization: 0.6}]", 0.8, "50GiB"),
        # every listed process idle while the device is busy
        ("[{pid: 100, used_memory_bytes: 10GiB, sm_utilization: 0.0}]", 0.8, "10GiB"),
    ],
)
def test_a_split_the_process_list_cannot_account_for_is_absent_not_zero(
    processes: str, utilization: float, used: str
) -> None:
    gpu = "GPU-11111111-0000-4000-8000-000000000000"
    node = listing(
        alloc(NOTEBOOK_A, "nvidia.com/gpu", f"{gpu}::0"),
        alloc(NOTEBOOK_B, "nvidia.com/gpu", f"{gpu}::1"),
    )
    devices = _shared_node(processes, utilization, used)
    attr = attribute(devices, node, Directory({100: NOTEBOOK_A, 200: NOTEBOOK_B}))
    assert len(attr.allocations) == 2
    assert attr.usage == ()


def test_an_idle_shared_gpu_with_nobody_listed_is_idle_for_every_holder() -> None:
    gpu = "GPU-11111111-0000-4000-8000-000000000000"
    node = listing(
        alloc(NOTEBOOK_A, "nvidia.com/gpu", f"{gpu}::0"),
        alloc(NOTEBOOK_B, "nvidia.com/gpu", f"{gpu}::1"),
    )
    devices = _shared_node("[]", 0.0, "300MiB")  # the driver's own few hundred MiB
    attr = attribute(devices, node, Directory({}))
    assert usage(attr) == {(gpu, "notebook-a"): (0.0, 0.0), (gpu, "notebook-b"): (0.0, 0.0)}
