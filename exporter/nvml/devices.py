"""Discovery of the GPUs and MIG instances NVML exposes.

Identity (uuid, model, bus id, MIG placement) is read once per discovery rather than every
cycle, because it only changes when an operator repartitions MIG or a GPU is replaced.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import pynvml

from kube_gpu_exporter.exporter.snapshot import DeviceIdentity, gpu_share

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Device:
    """A discovered device and the NVML handle used to read it."""

    identity: DeviceIdentity
    handle: Any
    mig_enabled: bool = False  # a whole GPU partitioned into MIG instances
    children: tuple[Device, ...] = ()  # its MIG instances


def text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def mig_profile(name: str, slices: int | None, memory_mb: int | None) -> str:
    """The MIG profile ("1g.10gb"): drivers name MIG devices "<model> MIG <profile>"."""
    if " MIG " in name:
        return name.rsplit(" MIG ", 1)[1].strip()
    if slices and memory_mb:
        return f"{slices}g.{round(memory_mb / 1024)}gb"
    return ""


def _lost_placeholder(index: int, known: dict[int, Device]) -> Device:
    """A GPU whose handle cannot be had: keep what we knew of it so `up` 0 carries its uuid."""
    if index in known:
        return known[index]
    identity = DeviceIdentity(index=index, uuid="", model="", pci_bus_id="")
    return Device(identity=identity, handle=None)


def _mig_children(parent: DeviceIdentity, handle: Any) -> tuple[Device, ...]:
    children: list[Device] = []
    gpu_slices = pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)
    for slot in range(gpu_slices):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except pynvml.NVMLError_NotFound:
            continue  # an empty slot
        name = text(pynvml.nvmlDeviceGetName(mig))
        try:
            attrs = pynvml.nvmlDeviceGetAttributes_v2(mig)
            slices, memory_mb = attrs.gpuInstanceSliceCount, attrs.memorySizeMB
        except pynvml.NVMLError:
            slices = memory_mb = None
        profile = mig_profile(name, slices, memory_mb)
        identity = DeviceIdentity(
            index=parent.index,
            uuid=text(pynvml.nvmlDeviceGetUUID(mig)),
            model=parent.model,
            pci_bus_id=parent.pci_bus_id,
            parent_uuid=parent.uuid,
            mig_profile=profile,
            share=gpu_share(profile, slices, gpu_slices),
            gpu_instance_id=pynvml.nvmlDeviceGetGpuInstanceId(mig),
            compute_instance_id=pynvml.nvmlDeviceGetComputeInstanceId(mig),
            minor=parent.minor,
        )
        children.append(Device(identity=identity, handle=mig))
    return tuple(children)


def _minor_number(handle: Any) -> int | None:
    """N of /dev/nvidiaN: GKE's device plugin names GPUs `nvidiaN` by it, and the driver need
    not number them in NVML's enumeration order. None where NVML cannot say (an id naming it
    then maps to no device and is counted as unmapped, rather than guessed from the index)."""
    try:
        return int(pynvml.nvmlDeviceGetMinorNumber(handle))
    except pynvml.NVMLError:
        return None


def _is_mig_enabled(handle: Any) -> bool:
    try:
        current, _pending = pynvml.nvmlDeviceGetMigMode(handle)
    except pynvml.NVMLError_NotSupported:
        return False
    return bool(current == pynvml.NVML_DEVICE_MIG_ENABLE)


def discover(previous: tuple[Device, ...] = ()) -> tuple[Device, ...]:
    """Every GPU by index with its MIG instances. A lost GPU keeps its last known identity."""
    known = {d.identity.index: d for d in previous}
    devices: list[Device] = []
    for index in range(pynvml.nvmlDeviceGetCount()):
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            identity = DeviceIdentity(
                index=index,
                uuid=text(pynvml.nvmlDeviceGetUUID(handle)),
                model=text(pynvml.nvmlDeviceGetName(handle)),
                pci_bus_id=text(pynvml.nvmlDeviceGetPciInfo(handle).busId),
                minor=_minor_number(handle),
            )
            mig_enabled = _is_mig_enabled(handle)
            children = _mig_children(identity, handle) if mig_enabled else ()
        except pynvml.NVMLError as exc:
            log.warning("GPU %d could not be discovered: %s", index, exc)
            devices.append(_lost_placeholder(index, known))
            continue
        devices.append(Device(identity, handle, mig_enabled, children))
    return tuple(devices)
