"""wire.py reads what protobuf writes: the kubelet's two answers, encoded by the generated
messages (v1/api_pb2.py, as the kubelet's Go encoder would), decode to the same values; unknown
fields are skipped as protobuf skips them; anything else is one WireError."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kube_gpu_exporter.exporter.kubelet import wire
from kube_gpu_exporter.exporter.kubelet.v1 import api_pb2


def expected_devices(d: api_pb2.ContainerDevices) -> wire.ContainerDevices:
    return wire.ContainerDevices(d.resource_name, tuple(d.device_ids))


def expected_list(msg: api_pb2.ListPodResourcesResponse) -> wire.ListPodResourcesResponse:
    """What protobuf itself read, in wire.py's values."""
    return wire.ListPodResourcesResponse(
        tuple(
            wire.PodResources(
                p.name,
                p.namespace,
                tuple(
                    wire.ContainerResources(
                        c.name,
                        tuple(expected_devices(d) for d in c.devices),
                        tuple(
                            wire.DynamicResource(
                                r.claim_name,
                                r.claim_namespace,
                                tuple(
                                    wire.ClaimResource(
                                        cr.driver_name,
                                        cr.pool_name,
                                        cr.device_name,
                                        cr.share_id if cr.HasField("share_id") else None,
                                    )
                                    for cr in r.claim_resources
                                ),
                            )
                            for r in c.dynamic_resources
                        ),
                    )
                    for c in p.containers
                ),
            )
            for p in msg.pod_resources
        )
    )


def topology(*numa: int) -> api_pb2.TopologyInfo:
    return api_pb2.TopologyInfo(nodes=[api_pb2.NUMANode(ID=n) for n in numa])


FULL = api_pb2.ListPodResourcesResponse(
    pod_resources=[
        api_pb2.PodResources(
            name="trainer-0",
            namespace="ml",
            cpu_ids=[1, 2],
            memory=[api_pb2.ContainerMemory(memory_type="memory", size=1 << 33)],
            containers=[
                api_pb2.ContainerResources(
                    name="main",
                    devices=[
                        api_pb2.ContainerDevices(
                            resource_name="nvidia.com/gpu",
                            device_ids=["GPU-a", "GPU-b"],
                            topology=topology(0),
                        ),
                        api_pb2.ContainerDevices(
                            resource_name="nvidia.com/gpu",
                            device_ids=["GPU-c"],
                            topology=topology(1),
                        ),
                    ],
                    cpu_ids=[4, 5, 6],
                    memory=[
                        api_pb2.ContainerMemory(
                            memory_type="hugepages-1Gi", size=1 << 30, topology=topology(0)
                        )
                    ],
                    dynamic_resources=[
                        api_pb2.DynamicResource(
                            claim_name="gpu-claim",
                            claim_namespace="ml",
                            claim_resources=[
                                api_pb2.ClaimResource(
                                    cdi_devices=[api_pb2.CDIDevice(name="k8s.gpu.nvidia.com/x=0")],
                                    driver_name="gpu.nvidia.com",
                                    pool_name="node-a",
                                    device_name="gpu-0",
                                ),
                                api_pb2.ClaimResource(
                                    driver_name="gpu.nvidia.com",
                                    pool_name="node-a",
                                    device_name="gpu-1",
                                    share_id="",  # present, empty: not the same as absent
                                ),
                                api_pb2.ClaimResource(device_name="gpu-2", share_id="s-1"),
                            ],
                        )
                    ],
                ),
                api_pb2.ContainerResources(name="sidecar"),
            ],
        ),
        api_pb2.PodResources(name="", namespace="ünïcode-ns"),
    ]
)


def test_every_field_read_as_protobuf_reads_it() -> None:
    decoded = wire.decode_list(FULL.SerializeToString())
    assert decoded == expected_list(FULL)
    claims = decoded.pod_resources[0].containers[0].dynamic_resources[0].claim_resources
    assert [c.share_id for c in claims] == [None, "", "s-1"]


def test_allocatable_read_as_protobuf_reads_it() -> None:
    answer = api_pb2.AllocatableResourcesResponse(
        devices=[
            api_pb2.ContainerDevices(resource_name="nvidia.com/mig-1g.10gb", device_ids=["MIG-a"]),
            api_pb2.ContainerDevices(
                resource_name="nvidia.com/gpu",
                device_ids=["GPU-a::0", "GPU-a::1"],
                topology=topology(1),
            ),
        ],
        cpu_ids=[0, 1, 2],
        memory=[api_pb2.ContainerMemory(memory_type="memory", size=5)],
    )
    decoded = wire.decode_allocatable(answer.SerializeToString())
    assert decoded == wire.AllocatableResourcesResponse(
        tuple(expected_devices(d) for d in answer.devices)
    )


def test_empty_answers() -> None:
    assert wire.decode_list(b"") == wire.ListPodResourcesResponse(())
    assert wire.decode_allocatable(b"") == wire.AllocatableResourcesResponse(())


def _key(number: int, wire_type: int) -> bytes:
    return _varint(number << 3 | wire_type)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


# One unknown field of each wire type, and a known field number sent with the wrong wire type,
# which protobuf keeps as an unknown field too.
UNKNOWN = (
    _key(15, 0) + _varint(1 << 40),
    _key(16, 1) + b"\x01" * 8,
    _key(17, 5) + b"\x02" * 4,
    _key(1000, 2) + _varint(3) + b"abc",
    _key(1, 0) + _varint(7),
)


@pytest.mark.parametrize("unknown", UNKNOWN, ids=["varint", "fixed64", "fixed32", "bytes", "wrong"])
def test_unknown_fields_are_skipped_as_protobuf_skips_them(unknown: bytes) -> None:
    pod = api_pb2.PodResources(name="p", namespace="n").SerializeToString()
    # the unknown field at the top level, and inside the pod
    data = unknown + _key(1, 2) + _varint(len(pod + unknown)) + pod + unknown
    theirs = api_pb2.ListPodResourcesResponse.FromString(data)
    assert wire.decode_list(data) == expected_list(theirs)
    assert [(p.name, p.namespace) for p in theirs.pod_resources] == [("p", "n")]


@pytest.mark.parametrize(
    "data",
    [
        _key(1, 2) + _varint(10) + b"short",  # runs past the message
        b"\xff" * 11,  # a varint longer than 10 bytes
        b"\x0a",  # a key and no length
        _key(2, 3),  # a group (wire type 3), gone from proto3
        _key(2, 7),  # no such wire type
        b"\x00\x00",  # field number 0
        _key(16, 1) + b"\x01" * 3,  # a fixed64 cut short
        _key(1, 2) + _varint(4) + _key(1, 2) + _varint(2) + b"\xc3\x28",  # a name not UTF-8
    ],
)
def test_what_is_not_a_message_is_one_wire_error(data: bytes) -> None:
    with pytest.raises(wire.WireError):
        wire.decode_list(data)


names = st.text(max_size=12)
claim = st.builds(
    api_pb2.ClaimResource,
    driver_name=names,
    pool_name=names,
    device_name=names,
    share_id=st.one_of(st.none(), names),
)
devices = st.builds(
    api_pb2.ContainerDevices,
    resource_name=names,
    device_ids=st.lists(names, max_size=3),
    topology=st.one_of(st.none(), st.builds(topology, st.integers(0, 7))),
)
container = st.builds(
    api_pb2.ContainerResources,
    name=names,
    devices=st.lists(devices, max_size=3),
    cpu_ids=st.lists(st.integers(0, 1 << 40), max_size=3),
    dynamic_resources=st.lists(
        st.builds(
            api_pb2.DynamicResource,
            claim_name=names,
            claim_namespace=names,
            claim_resources=st.lists(claim, max_size=2),
        ),
        max_size=2,
    ),
)
pods = st.lists(
    st.builds(
        api_pb2.PodResources,
        name=names,
        namespace=names,
        containers=st.lists(container, max_size=3),
    ),
    max_size=4,
)


@settings(max_examples=200, deadline=None)
@given(pods)
def test_random_answers_read_as_protobuf_reads_them(listed: list[api_pb2.PodResources]) -> None:
    message = api_pb2.ListPodResourcesResponse(pod_resources=listed)
    assert wire.decode_list(message.SerializeToString()) == expected_list(message)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=64))
def test_any_bytes_decode_or_raise_wire_error(data: bytes) -> None:
    try:
        wire.decode_list(data)
        wire.decode_allocatable(data)
    except wire.WireError:
        pass
