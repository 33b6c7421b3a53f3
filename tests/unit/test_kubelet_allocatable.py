"""nvidia_gpu_kubelet_allocatable: the kubelet's view of each device beside NVML's. The kubelet
lists its device plugins' healthy devices only (GetAllocatableResources), so a device it does
not list is 0; a replica or a MIG instance listed counts for its device; a GPU in MIG mode
has no series (its instances are the devices); nothing where the kubelet cannot say."""

from __future__ import annotations

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.exporter.attribution.attribute import NoPodDirectory, attribute
from kube_gpu_exporter.exporter.exposition.render import render
from kube_gpu_exporter.exporter.kubelet.listing import Listing
from kube_gpu_exporter.exporter.simulated.sampler import node_sample
from kube_gpu_exporter.exporter.simulated.scenario import Scenario
from kube_gpu_exporter.exporter.snapshot import ExporterState, Snapshot
from support import samples

A, B, LOST, MIGGED = (f"GPU-{n}{n}{n}{n}{n}{n}{n}{n}-0000-4000-8000-000000000000" for n in range(4))
MIG = "MIG-44444444-0000-4000-8000-000000000000"
NODE = node_sample(
    Scenario.parse(
        f"""
devices:
  - uuid: {A}
  - uuid: {B}
  - uuid: {LOST}
    timeline: [{{at: 0, lost: true}}]
  - uuid: {MIGGED}
    mig: [{{profile: 3g.40gb, gpu_instance_id: 1, uuid: {MIG}, memory_total_bytes: 40GiB}}]
"""
    ).state_at(0)
)


def offered(allocatable: dict[str, tuple[str, ...]] | None) -> dict[str, float]:
    """uuid → the series' value, as rendered."""
    attribution = attribute(NODE.devices, Listing((), (), allocatable), NoPodDirectory())
    state = ExporterState(0.0, 0.0, 1, {})
    snapshot = Snapshot(NODE, state, 0.0, attribution)
    body, _ = render(snapshot).body("", gzipped=False)
    return {
        dict(labels)["uuid"]: value
        for (name, labels), value in samples(body).items()
        if name == c.KUBELET_ALLOCATABLE.name
    }


def test_a_device_the_kubelet_does_not_list_is_0() -> None:
    listed = offered({"nvidia.com/gpu": (A,), "nvidia.com/mig-3g.40gb": (MIG,)})
    # the lost GPU: what the kubelet says of it is served beside NVML's silence
    assert listed == {A: 1, B: 0, LOST: 0, MIG: 1}


def test_a_listed_replica_counts_for_its_gpu() -> None:
    listed = offered({"nvidia.com/gpu.shared": (f"{B}::0", f"{B}::3"), "other.io/x": ("foo",)})
    assert listed == {A: 0, B: 1, LOST: 0, MIG: 0}


def test_nothing_where_the_kubelet_cannot_say() -> None:
    assert offered(None) == {}
    attribution = attribute(NODE.devices, Listing((), (), {}), NoPodDirectory())
    assert attribution.capacity.offered == frozenset()
