"""The kubelet's two answers read straight from protobuf's wire format: only the fields that
attribution reads, into small immutable values.

Why not the generated messages: the protobuf runtime and the messages' descriptors cost every
node's exporter ~3.5 MiB of RSS to import, for two messages read every 10 s. The wire format
is small and fixed (varints, length-delimited fields), and these messages use three kinds of
field: strings, nested messages and repeated ones of both. Fields this reader does not know
(cpu_ids, memory, topology, CDI devices, whatever a newer kubelet adds) are skipped, as
protobuf skips unknown fields. Tests check it against protobuf's own encoder (the generated
stubs in v1/, which the tests' kubelets still use).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

# Wire types: a varint, 8 bytes, a length-delimited field, 4 bytes (3 and 4, groups, are gone).
_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5
_MAX_VARINT_BYTES: Final = 10


class WireError(ValueError):
    """Bytes that are not a protobuf message: truncated, a bad varint, an unknown wire type."""


@dataclass(frozen=True, slots=True)
class ContainerDevices:
    resource_name: str
    device_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ClaimResource:
    driver_name: str
    pool_name: str
    device_name: str
    share_id: str | None  # `optional`: None when the kubelet (before 1.35) did not send it


@dataclass(frozen=True, slots=True)
class DynamicResource:
    claim_name: str
    claim_namespace: str
    claim_resources: tuple[ClaimResource, ...]


@dataclass(frozen=True, slots=True)
class ContainerResources:
    name: str
    devices: tuple[ContainerDevices, ...]
    dynamic_resources: tuple[DynamicResource, ...]


@dataclass(frozen=True, slots=True)
class PodResources:
    name: str
    namespace: str
    containers: tuple[ContainerResources, ...]


@dataclass(frozen=True, slots=True)
class ListPodResourcesResponse:
    pod_resources: tuple[PodResources, ...]


@dataclass(frozen=True, slots=True)
class AllocatableResourcesResponse:
    devices: tuple[ContainerDevices, ...]


def _varint(data: memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    for i in range(pos, min(pos + _MAX_VARINT_BYTES, len(data))):
        byte = data[i]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i + 1
        shift += 7
    raise WireError("a varint runs past the message or past 10 bytes")


def _fields(data: memoryview) -> Iterator[tuple[int, memoryview | None]]:
    """(field number, bytes) of each length-delimited field; (number, None) for the others."""
    pos, end = 0, len(data)
    while pos < end:
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise WireError("field number 0")
        if wire == _LENGTH:
            length, pos = _varint(data, pos)
            if pos + length > end:
                raise WireError(f"field {number} runs past the message")
            yield number, data[pos : pos + length]
            pos += length
            continue
        if wire == _VARINT:
            _, pos = _varint(data, pos)
        elif wire in (_FIXED64, _FIXED32):
            pos += 8 if wire == _FIXED64 else 4
            if pos > end:
                raise WireError(f"field {number} runs past the message")
        else:
            raise WireError(f"field {number} has wire type {wire}")
        yield number, None


def _text(value: memoryview) -> str:
    try:
        return str(value, "utf-8")
    except UnicodeDecodeError as err:
        raise WireError(f"a string is not UTF-8: {err}") from None


def _devices(data: memoryview) -> ContainerDevices:
    resource, ids = "", []
    for number, value in _fields(data):
        if value is None:
            continue
        if number == 1:
            resource = _text(value)
        elif number == 2:
            ids.append(_text(value))
    return ContainerDevices(resource, tuple(ids))


def _claim_resource(data: memoryview) -> ClaimResource:
    texts: dict[int, str] = {}
    for number, value in _fields(data):
        if value is not None and number in (2, 3, 4, 5):
            texts[number] = _text(value)
    return ClaimResource(texts.get(2, ""), texts.get(3, ""), texts.get(4, ""), texts.get(5))


def _dynamic_resource(data: memoryview) -> DynamicResource:
    name = namespace = ""
    resources = []
    for number, value in _fields(data):
        if value is None:
            continue
        if number == 2:
            name = _text(value)
        elif number == 3:
            namespace = _text(value)
        elif number == 4:
            resources.append(_claim_resource(value))
    return DynamicResource(name, namespace, tuple(resources))


def _container(data: memoryview) -> ContainerResources:
    name, devices, dynamic = "", [], []
    for number, value in _fields(data):
        if value is None:
            continue
        if number == 1:
            name = _text(value)
        elif number == 2:
            devices.append(_devices(value))
        elif number == 5:
            dynamic.append(_dynamic_resource(value))
    return ContainerResources(name, tuple(devices), tuple(dynamic))


def _pod(data: memoryview) -> PodResources:
    name = namespace = ""
    containers = []
    for number, value in _fields(data):
        if value is None:
            continue
        if number == 1:
            name = _text(value)
        elif number == 2:
            namespace = _text(value)
        elif number == 3:
            containers.append(_container(value))
    return PodResources(name, namespace, tuple(containers))


def decode_list(data: bytes) -> ListPodResourcesResponse:
    """List's answer (ListPodResourcesResponse). Raises WireError."""
    pods = [_pod(v) for n, v in _fields(memoryview(data)) if n == 1 and v is not None]
    return ListPodResourcesResponse(tuple(pods))


def decode_allocatable(data: bytes) -> AllocatableResourcesResponse:
    """GetAllocatableResources' answer (AllocatableResourcesResponse). Raises WireError."""
    found = [_devices(v) for n, v in _fields(memoryview(data)) if n == 1 and v is not None]
    return AllocatableResourcesResponse(tuple(found))
