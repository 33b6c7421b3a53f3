"""Kubelet device ids → the NVML devices they name.

The NVIDIA device plugin (and GKE's) name devices in several ways, and time-slicing or MPS
multiplies each id into replicas. Everything that can name a device is resolved here, in one
place, so an id nobody can map is counted rather than silently dropped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from kube_gpu_exporter.exporter.snapshot import DeviceIdentity

_LEGACY_MIG = re.compile(r"^MIG-(GPU-[0-9a-fA-F-]+)/(\d+)/(\d+)$")
# GKE: nvidia<N>, nvidia<N>/gi<M> (MIG), each with /vgpu<K> for time-sharing replica K; N is
# the minor number of /dev/nvidiaN, not NVML's enumeration index.
_GKE = re.compile(r"^nvidia(\d+)(?:/gi(\d+))?(?:/vgpu(\d+))?$")


@dataclass(frozen=True, slots=True)
class DeviceRef:
    """One kubelet device id: the device it names and, for a shared GPU, which replica."""

    base: str
    replica: int | None = None


def parse_device_id(raw: str) -> DeviceRef:
    """`<id>::<n>` is replica n of `<id>` (time-slicing and MPS; split on the first `::`);
    GKE's time-sharing names replica K of `nvidia<N>[/gi<M>]` as `…/vgpu<K>`."""
    base, sep, replica = raw.partition("::")
    if sep and replica.isdigit():
        return DeviceRef(base, int(replica))
    gke = _GKE.match(raw)
    if gke and gke.group(3) is not None:
        return DeviceRef(raw[: raw.rindex("/vgpu")], int(gke.group(3)))
    return DeviceRef(raw)


class DeviceResolver:
    """Resolves device ids against the devices NVML reported this cycle."""

    def __init__(self, devices: Iterable[DeviceIdentity]) -> None:
        self._by_uuid: dict[str, DeviceIdentity] = {}
        self._gpu_by_minor: dict[int, DeviceIdentity] = {}
        self._mig_by_place: dict[tuple[str, int, int | None], DeviceIdentity] = {}
        self._mig_by_minor_gi: dict[tuple[int, int], DeviceIdentity] = {}
        for device in devices:
            if device.uuid:
                self._by_uuid[device.uuid.lower()] = device
            if not device.is_mig:
                if device.minor is not None:
                    self._gpu_by_minor[device.minor] = device
                continue
            gi = device.gpu_instance_id if device.gpu_instance_id is not None else -1
            parent = device.parent_uuid.lower()
            self._mig_by_place[(parent, gi, device.compute_instance_id)] = device
            self._mig_by_place.setdefault((parent, gi, None), device)
            if device.minor is not None:
                self._mig_by_minor_gi.setdefault((device.minor, gi), device)

    def gpu_of(self, device_id: str) -> str | None:
        """The uuid of the whole GPU an id (replica or not) names or is carved from."""
        device = self.resolve(parse_device_id(device_id).base)
        if device is None:
            return None
        return device.parent_uuid or device.uuid

    def resolve(self, base_id: str) -> DeviceIdentity | None:
        """The device a (replica-less) id names, or None when no device matches."""
        found = self._by_uuid.get(base_id.lower())
        if found is not None:
            return found
        legacy = _LEGACY_MIG.match(base_id)  # R450/R460: MIG-GPU-<uuid>/<gi>/<ci>
        if legacy:
            parent, gi, ci = legacy.group(1).lower(), int(legacy.group(2)), int(legacy.group(3))
            return self._mig_by_place.get((parent, gi, ci))
        gke = _GKE.match(base_id)
        if gke:
            minor = int(gke.group(1))
            if gke.group(2) is not None:
                return self._mig_by_minor_gi.get((minor, int(gke.group(2))))
            return self._gpu_by_minor.get(minor)
        return None
