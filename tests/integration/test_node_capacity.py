"""Node capacity and attribution over a real gRPC kubelet: each case is a way the exporter
once got a node's GPUs wrong, played by `FakeKubelet` on a unix socket, listed by the real
client and attributed against a simulated node.

Free GPUs are the ones a pod asking for `nvidia.com/gpu` could get now; allocated devices are
the ones the exporter attributes; a label never depends on the kubelet's order; GKE's and
renamed resources' ids are understood; a kubelet that will not list its allocatable devices
costs the advertised counts only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from pathlib import Path

import grpc
import pytest

from kube_gpu_exporter.exporter.attribution.attribute import NoPodDirectory, attribute
from kube_gpu_exporter.exporter.kubelet.client import PodResourcesClient
from kube_gpu_exporter.exporter.simulated.sampler import node_sample
from kube_gpu_exporter.exporter.simulated.scenario import Scenario
from kube_gpu_exporter.exporter.snapshot import AttributionSample, DeviceSample, Holder
from kubelet_server import FakeKubelet, container, devices, pod

GPU = "GPU-{0}{0}{0}{0}{0}{0}{0}{0}-0000-4000-8000-000000000000".format
MIG = "MIG-{0}{0}{0}{0}{0}{0}{0}{0}-0000-4000-8000-000000000000".format
NODE = node_sample(
    Scenario.parse(
        f"""
devices:
  - uuid: {GPU(0)}
  - uuid: {GPU(1)}
  - uuid: {GPU(2)}
    mig:
      - {{profile: 3g.40gb, gpu_instance_id: 1, uuid: {MIG(3)}, memory_total_bytes: 40GiB}}
      - {{profile: 3g.40gb, gpu_instance_id: 2, uuid: {MIG(4)}, memory_total_bytes: 40GiB}}
  - uuid: {GPU(5)}
  - uuid: {GPU(6)}
"""
    ).state_at(0)
).devices


@pytest.fixture
def kubelet(tmp_path: Path) -> Iterator[FakeKubelet]:
    with FakeKubelet(tmp_path / "kubelet.sock") as server:
        yield server


async def attributed(
    kubelet: FakeKubelet,
    nodes: tuple[DeviceSample, ...] = NODE,
    gone: frozenset[str] = frozenset(),
) -> AttributionSample:
    client = PodResourcesClient(str(kubelet.socket_path), timeout=10)
    try:
        listing = await client.list()
    finally:
        await client.close()
    return attribute(nodes, listing, Ended(gone))


class Ended(NoPodDirectory):
    """The pod watch's word: pods named in `gone` have Succeeded (the kubelet still lists
    them until their containers are removed)."""

    def __init__(self, gone: frozenset[str]) -> None:
        self.gone = gone

    def labels(self, holder: Holder) -> Mapping[str, str] | None:
        return None if holder.pod in self.gone else {}


def whole_gpus_advertised() -> list:  # type: ignore[type-arg]
    return [devices("nvidia.com/gpu", GPU(0), GPU(1), GPU(5), GPU(6))]


async def test_free_gpus_leave_out_lost_unadvertised_and_mig_enabled_gpus(
    kubelet: FakeKubelet,
) -> None:
    # GPU 0 held; GPU 1 lost; GPU 2 MIG-enabled with both instances free; GPU 5 no longer
    # advertised by the device plugin; GPU 6 the only one a whole-GPU pod could get.
    kubelet.pods = [pod("ml", "train", container("c", devices("nvidia.com/gpu", GPU(0))))]
    kubelet.allocatable = [
        devices("nvidia.com/gpu", GPU(0), GPU(1), GPU(6)),
        devices("nvidia.com/mig-3g.40gb", MIG(3), MIG(4)),
    ]
    lost = tuple(dataclasses.replace(d, up=False) if d.identity.uuid == GPU(1) else d for d in NODE)
    cap = (await attributed(kubelet, lost)).capacity
    assert cap.free_gpus == 1
    assert cap.advertised == {"nvidia.com/gpu": 3, "nvidia.com/mig-3g.40gb": 2}


async def test_allocated_devices_are_the_attributed_ones(kubelet: FakeKubelet) -> None:
    dead = "GPU-deadbeef-0000-4000-8000-000000000000"
    kubelet.pods = [
        pod("ml", "train", container("c", devices("nvidia.com/gpu", GPU(0), dead))),
        pod("ml", "done", container("c", devices("nvidia.com/gpu", GPU(1)))),  # Succeeded
    ]
    kubelet.allocatable = whole_gpus_advertised()
    attr = await attributed(kubelet, gone=frozenset({"done"}))
    assert attr.capacity.allocated == {"nvidia.com/gpu": 1}
    assert attr.unmapped == {"nvidia.com/gpu": 1}
    assert attr.capacity.free_gpus == 3  # GPU 1's pod is over: free again


async def test_a_gpu_held_under_two_resource_names_keeps_its_labels(
    kubelet: FakeKubelet,
) -> None:
    pods = [
        pod("ml", "a", container("c", devices("nvidia.com/gpu", GPU(0) + "::0"))),
        pod("ml", "b", container("c", devices("nvidia.com/gpu.shared", GPU(0) + "::1"))),
    ]
    kubelet.allocatable = whole_gpus_advertised()
    seen = []
    for order in (pods, pods[::-1], pods, pods[::-1]):
        kubelet.pods = order
        attr = await attributed(kubelet)
        seen.append(sorted((a.holder.pod, a.resource, a.sharing) for a in attr.allocations))
    assert seen[0] == [("a", "nvidia.com/gpu", "shared"), ("b", "nvidia.com/gpu.shared", "shared")]
    assert all(s == seen[0] for s in seen)


async def test_gke_time_sharing_ids_are_shared_replicas(kubelet: FakeKubelet) -> None:
    kubelet.pods = [
        pod("ml", "a", container("c", devices("nvidia.com/gpu", "nvidia0/vgpu0"))),
        pod("ml", "b", container("c", devices("nvidia.com/gpu", "nvidia0/vgpu1"))),
        pod("ml", "m", container("c", devices("nvidia.com/gpu", "nvidia2/gi2/vgpu3"))),
    ]
    kubelet.allocatable = [
        devices("nvidia.com/gpu", *(f"nvidia{i}/vgpu{k}" for i in (0, 1, 3, 4) for k in (0, 1)))
    ]
    attr = await attributed(kubelet)
    held = {a.holder.pod: (a.device.uuid, a.sharing) for a in attr.allocations}
    assert held == {"a": (GPU(0), "shared"), "b": (GPU(0), "shared"), "m": (MIG(4), "shared")}
    assert attr.unmapped == {}
    assert attr.capacity.free_gpus == 3  # NVML indices 1, 3 and 4 (GPUs 1, 5, 6): advertised


async def test_a_kubelet_that_will_not_list_allocatable_keeps_attribution(
    kubelet: FakeKubelet,
) -> None:
    kubelet.pods = [pod("ml", "train", container("c", devices("nvidia.com/gpu", GPU(0))))]
    kubelet.allocatable_error = (grpc.StatusCode.UNKNOWN, "feature gate disabled")
    attr = await attributed(kubelet)
    assert [a.holder.pod for a in attr.allocations] == ["train"]
    assert attr.capacity.advertised is None  # unknown: not "nothing advertised"
    assert attr.capacity.free_gpus == 3  # GPUs 1, 5, 6: nothing says they are not advertised


async def test_a_renamed_resource_is_attributed(kubelet: FakeKubelet) -> None:
    kubelet.pods = [
        pod("ml", "train", container("c", devices("nvidia.com/gpu-h100", GPU(0), GPU(1)))),
        pod("ml", "nic", container("c", devices("example.com/rdma", "hca0"))),
    ]
    kubelet.allocatable = [devices("nvidia.com/gpu-h100", GPU(0), GPU(1), GPU(5), GPU(6))]
    attr = await attributed(kubelet)
    assert sorted((a.device.uuid, a.resource) for a in attr.allocations) == [
        (GPU(0), "nvidia.com/gpu-h100"),
        (GPU(1), "nvidia.com/gpu-h100"),
    ]
    assert attr.capacity.advertised == {"nvidia.com/gpu-h100": 4}
    assert attr.capacity.allocated == {"nvidia.com/gpu-h100": 2}


async def test_advertised_ids_that_name_no_gpu_are_unmapped_not_advertised(
    kubelet: FakeKubelet,
) -> None:
    # The plugin advertises four ids, one of which names no GPU the driver sees (a GPU that
    # fell off the bus, or an id scheme nobody can read); the three real GPUs are all held.
    ghost = "GPU-deadbeef-0000-4000-8000-000000000000"
    kubelet.allocatable = [devices("nvidia.com/gpu", GPU(0), GPU(1), GPU(6), ghost)]
    kubelet.pods = [
        pod("ml", name, container("c", devices("nvidia.com/gpu", GPU(i))))
        for name, i in (("a", 0), ("b", 1), ("c", 6))
    ]
    attr = await attributed(kubelet)
    # The node is full: allocated ÷ advertised is 1, the ghost id counted apart.
    assert attr.capacity.advertised == {"nvidia.com/gpu": 3}
    assert attr.capacity.allocated == {"nvidia.com/gpu": 3}
    assert attr.unmapped == {"nvidia.com/gpu": 1}
    # A held id that names no GPU and is advertised too is one unmapped id, not two.
    kubelet.pods = [*kubelet.pods, pod("ml", "d", container("c", devices("nvidia.com/gpu", ghost)))]
    attr = await attributed(kubelet)
    assert attr.unmapped == {"nvidia.com/gpu": 1}
    assert attr.capacity.allocated == {"nvidia.com/gpu": 3}
