"""The attribution inputs as the collection thread sees them at the start of a cycle.

The pod-resources watcher refreshes on the event loop and the pod watch in its own thread;
each publishes its latest result by replacing one reference, so the collection thread reads
a consistent value without locks and never waits for the kubelet or the API server.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kube_gpu_exporter.exporter.attribution.attribute import NoPodDirectory, PodDirectory, attribute
from kube_gpu_exporter.exporter.catalog.errors import POD_RESOURCES_ERROR_KINDS
from kube_gpu_exporter.exporter.kubelet.client import PodResourcesWatcher
from kube_gpu_exporter.exporter.snapshot import AttributionSample, DeviceSample


@dataclass(frozen=True, slots=True)
class AttributionState:
    sample: AttributionSample
    pod_resources_up: bool
    pod_resources_last_success: float
    errors_total: dict[str, int]  # `pod_resources_<kind>` → count
    kubernetes_api_up: bool | None


class DirectorySource:
    """Where the pod directory comes from: the Kubernetes watch, or nothing."""

    def directory(self) -> PodDirectory:
        return NoPodDirectory()

    @property
    def up(self) -> bool | None:
        return None

    @property
    def errors_total(self) -> Mapping[str, int]:
        return {}


class AttributionSource:
    def __init__(
        self, pod_resources: PodResourcesWatcher, pods: DirectorySource | None = None
    ) -> None:
        self._pod_resources = pod_resources
        self._pods = pods or DirectorySource()

    def attribute(self, devices: tuple[DeviceSample, ...]) -> AttributionState:
        watcher = self._pod_resources
        errors = {f"pod_resources_{kind}": 0 for kind in POD_RESOURCES_ERROR_KINDS}
        errors.update({f"pod_resources_{k}": n for k, n in watcher.errors_total.items()})
        errors.update({f"kubernetes_{k}": n for k, n in self._pods.errors_total.items()})
        return AttributionState(
            sample=attribute(devices, watcher.latest, self._pods.directory()),
            pod_resources_up=watcher.up,
            pod_resources_last_success=watcher.last_success,
            errors_total=errors,
            kubernetes_api_up=self._pods.up,
        )
