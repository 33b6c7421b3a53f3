"""DRA devices of this node: (pool, device) → NVML uuid, from the driver's ResourceSlices.

The kubelet names a DRA allocation by driver, pool and device (`gpu-0`, `gpu-0-mig-1g.10gb-…`),
which says nothing NVML knows. The driver publishes each device's identity as attributes of
its ResourceSlice: `uuid` (a whole GPU's `GPU-…` or a MIG instance's `MIG-…`), with
`parentUUID` and `profile` on MIG devices. This module watches the slices of one node and one
driver (field selectors `spec.nodeName` and `spec.driver`) and keeps that map.

A pool may be spread over several slices and is republished with a higher `pool.generation`
when it changes; only the newest generation of each pool counts, as the scheduler does.
`resource.k8s.io/v1` is tried first, then `v1beta2` and `v1beta1` (clusters before 1.34);
v1beta1 nests a device's attributes under `basic`. A cluster that serves none of them has no
DRA: the watch idles (see `list_watch.NotServed`) and is not reported as down.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from kube_gpu_exporter.exporter.catalog import NVIDIA_DRA_DRIVER
from kube_gpu_exporter.exporter.kubernetes.kubeconfig_choice import Kubeconfig
from kube_gpu_exporter.exporter.kubernetes.list_watch import (
    WATCH_SECONDS,
    ListWatch,
    Watcher,
    node_api_client,
)
from kube_gpu_exporter.exporter.kubernetes.served_version import ServedVersion

API_VERSIONS = ("v1", "v1beta2", "v1beta1")
UUID_ATTRIBUTE = "uuid"


@dataclass(frozen=True)
class SliceDevices:
    """What one ResourceSlice says: its pool, the pool's generation, device name → uuid."""

    pool: str
    generation: int
    uuids: Mapping[str, str]


def parse_slice(obj: Mapping[str, Any], driver: str = NVIDIA_DRA_DRIVER) -> SliceDevices | None:
    """A ResourceSlice (v1, v1beta2 or v1beta1 JSON) of `driver`; None if it is not one."""
    spec = obj.get("spec")
    if not isinstance(spec, Mapping) or spec.get("driver") != driver:
        return None
    pool = spec.get("pool")
    if not isinstance(pool, Mapping) or not isinstance(pool.get("name"), str):
        return None
    generation = pool.get("generation")
    uuids: dict[str, str] = {}
    devices = spec.get("devices")
    for device in devices if isinstance(devices, list) else []:
        if not isinstance(device, Mapping) or not isinstance(device.get("name"), str):
            continue
        basic = device.get("basic")  # v1beta1
        attributes = (basic if isinstance(basic, Mapping) else device).get("attributes")
        uuid = _string_attribute(attributes, UUID_ATTRIBUTE, driver)
        if uuid:
            uuids[device["name"]] = uuid
    return SliceDevices(
        pool=pool["name"],
        generation=generation if isinstance(generation, int) else 0,
        uuids=MappingProxyType(uuids),
    )


def _string_attribute(attributes: Any, name: str, driver: str) -> str | None:
    """An attribute's string value; names may be bare or qualified by the driver's domain."""
    if not isinstance(attributes, Mapping):
        return None
    value = attributes.get(name) or attributes.get(f"{driver}/{name}")
    text = value.get("string") if isinstance(value, Mapping) else None
    return text if isinstance(text, str) and text else None


def device_uuids(slices: Mapping[str, SliceDevices]) -> Mapping[tuple[str, str], str]:
    """(pool, device) → uuid over the newest generation of each pool."""
    newest: dict[str, int] = {}
    for item in slices.values():
        newest[item.pool] = max(newest.get(item.pool, item.generation), item.generation)
    return MappingProxyType(
        {
            (item.pool, name): uuid
            for item in slices.values()
            if item.generation == newest[item.pool]
            for name, uuid in item.uuids.items()
        }
    )


class ResourceSliceWatcher(Watcher):
    """Watches this node's ResourceSlices of `driver` (see the module docstring)."""

    def __init__(
        self,
        node_name: str,
        kubeconfig: str | Kubeconfig | None,
        timeout: float = 10.0,
        *,
        driver: str = NVIDIA_DRA_DRIVER,
        watch_seconds: int = WATCH_SECONDS,
    ) -> None:
        client = node_api_client(node_name, kubeconfig, "ResourceSlices")
        self._driver = driver
        selector = f"spec.nodeName={node_name},spec.driver={driver}"
        self._request = ServedVersion(
            [
                client.lister(
                    f"/apis/resource.k8s.io/{version}/resourceslices", field_selector=selector
                )
                for version in API_VERSIONS
            ],
            API_VERSIONS,
            "resource.k8s.io ResourceSlices are not served (no DRA in this cluster)",
        )
        self._uuids: Mapping[tuple[str, str], str] = MappingProxyType({})
        self._watch: ListWatch[SliceDevices] = ListWatch(
            "resourceslices",
            self._request,
            self._parse,
            self._publish,
            timeout=timeout,
            watch_seconds=watch_seconds,
            on_stop=client.close,
        )

    def device_uuid(self, pool: str, device: str) -> str | None:
        return self._uuids.get((pool, device))

    @property
    def served(self) -> bool:
        return self._watch.served

    def _parse(self, obj: Mapping[str, Any]) -> tuple[str, SliceDevices | None] | None:
        metadata = obj.get("metadata")
        name = metadata.get("name") if isinstance(metadata, Mapping) else None
        if not isinstance(name, str):
            return None
        return name, parse_slice(obj, self._driver)

    def _publish(self, slices: Mapping[str, SliceDevices]) -> None:
        self._uuids = device_uuids(slices)
