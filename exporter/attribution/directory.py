"""The pod directory backed by the Kubernetes watch and /proc: labels, and process → pod.

Used only with `--kubernetes.enabled`: the kubelet's pod-resources API names pods but not
their uids or container ids, which is what a process's cgroup reveals. The pod watch joins
the two, so a PID on a shared GPU can be charged to the container it runs in. The
ResourceSlice watch turns the kubelet's DRA (pool, device) names into NVML uuids.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from kube_gpu_exporter.exporter.attribution.attribute import PodDirectory
from kube_gpu_exporter.exporter.attribution.source import DirectorySource
from kube_gpu_exporter.exporter.kubernetes.cgroups import container_of
from kube_gpu_exporter.exporter.kubernetes.pods import PodIndex, PodWatcher
from kube_gpu_exporter.exporter.kubernetes.resource_slices import ResourceSliceWatcher
from kube_gpu_exporter.exporter.snapshot import Holder

_INVALID_LABEL_CHARS = re.compile(r"[^a-zA-Z0-9_]")


def label_name(pod_label: str) -> str:
    """`app.kubernetes.io/name` → `label_app_kubernetes_io_name`, as kube-state-metrics does."""
    return "label_" + _INVALID_LABEL_CHARS.sub("_", pod_label)


class KubeDirectory(DirectorySource):
    def __init__(
        self,
        watcher: PodWatcher,
        procfs: Path,
        pod_labels: Sequence[str],
        slices: ResourceSliceWatcher | None = None,
    ) -> None:
        self._watcher = watcher
        self._slices = slices
        self._procfs = procfs
        self._pod_labels = tuple(pod_labels)

    def start(self) -> None:
        self._watcher.start()
        if self._slices is not None:
            self._slices.start()

    def stop(self) -> None:
        self._watcher.stop()
        if self._slices is not None:
            self._slices.stop()

    def directory(self) -> PodDirectory:
        return _Directory(
            self._watcher.index(), self._watcher.up, self._procfs, self._pod_labels, self._slices
        )

    @property
    def up(self) -> bool | None:
        """Both watches established (a cluster without DRA counts as a ResourceSlice watch
        with nothing to miss)."""
        return self._watcher.up and (self._slices is None or self._slices.up)

    @property
    def errors_total(self) -> Mapping[str, int]:
        """Errors of both watches by kind; the ResourceSlice watch's as `resourceslices_<kind>`."""
        errors = dict(self._watcher.errors_total)
        if self._slices is not None:
            errors |= {f"resourceslices_{k}": n for k, n in self._slices.errors_total.items()}
        return errors


class _Directory:
    def __init__(
        self,
        index: PodIndex,
        synced: bool,
        procfs: Path,
        pod_labels: tuple[str, ...],
        slices: ResourceSliceWatcher | None,
    ) -> None:
        self._index = index
        self._slices = slices
        self._synced = synced
        self._procfs = procfs
        self._pod_labels = pod_labels

    def labels(self, holder: Holder) -> Mapping[str, str] | None:
        """Owner and allowlisted labels; None for a pod the API knows is no longer running.

        The index holds only running pods. While the watch is synced, a pod missing from it
        has Succeeded or Failed (or is gone) and must not be attributed; while it is not, the
        kubelet's word is all there is.
        """
        pod = self._index.by_name.get((holder.namespace, holder.pod))
        if pod is None:
            return None if self._synced else {}
        labels = {"owner_kind": pod.owner_kind, "owner_name": pod.owner_name}
        for key in self._pod_labels:
            labels[label_name(key)] = pod.labels.get(key, "")
        return labels

    def dra_device_uuid(self, pool: str, device: str) -> str | None:
        """None (the claim counts as unmapped) until the device's ResourceSlice is seen."""
        return self._slices.device_uuid(pool, device) if self._slices is not None else None

    def owner_of_process(self, pid: int) -> Holder | None:
        ref = container_of(pid, self._procfs)
        if ref is None:
            return None
        found = self._index.lookup(ref.pod_uid, ref.container_id)
        if found is None or not found[1]:
            return None
        pod, container = found
        return Holder(pod.namespace, pod.name, container)
