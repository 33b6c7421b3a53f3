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

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

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


def _read(
    data: memoryview, texts: tuple[int, ...], nested: Mapping[int, Callable[[memoryview], Any]]
) -> tuple[dict[int, str], dict[int, list[Any]]]:
    """One message's fields that this reader knows: each of `texts` as a string (the last one
    sent, as protobuf keeps for a singular field; absent when not sent), each of `nested`
    read by its function, in order. A known number sent with another wire type is skipped."""
    found: dict[int, str] = {}
    lists: dict[int, list[Any]] = {number: [] for number in nested}
    for number, value in _fields(data):
        if value is None:
            continue
        if number in nested:
            lists[number].append(nested[number](value))
        elif number in texts:
            found[number] = _text(value)
    return found, lists


def _devices(data: memoryview) -> ContainerDevices:
    texts, lists = _read(data, (1,), {2: _text})
    return ContainerDevices(texts.get(1, ""), tuple(lists[2]))


def _claim_resource(data: memoryview) -> ClaimResource:
    texts, _ = _read(data, (2, 3, 4, 5), {})
    return ClaimResource(texts.get(2, ""), texts.get(3, ""), texts.get(4, ""), texts.get(5))


def _dynamic_resource(data: memoryview) -> DynamicResource:
    texts, lists = _read(data, (2, 3), {4: _claim_resource})
    return DynamicResource(texts.get(2, ""), texts.get(3, ""), tuple(lists[4]))


def _container(data: memoryview) -> ContainerResources:
    texts, lists = _read(data, (1,), {2: _devices, 5: _dynamic_resource})
    return ContainerResources(texts.get(1, ""), tuple(lists[2]), tuple(lists[5]))


def _pod(data: memoryview) -> PodResources:
    texts, lists = _read(data, (1, 2), {3: _container})
    return PodResources(texts.get(1, ""), texts.get(2, ""), tuple(lists[3]))


def decode_list(data: bytes) -> ListPodResourcesResponse:
    """List's answer (ListPodResourcesResponse). Raises WireError."""
    pods = [_pod(v) for n, v in _fields(memoryview(data)) if n == 1 and v is not None]
    return ListPodResourcesResponse(tuple(pods))


def decode_allocatable(data: bytes) -> AllocatableResourcesResponse:
    """GetAllocatableResources' answer (AllocatableResourcesResponse). Raises WireError."""
    found = [_devices(v) for n, v in _fields(memoryview(data)) if n == 1 and v is not None]
    return AllocatableResourcesResponse(tuple(found))
