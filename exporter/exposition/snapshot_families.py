"""The snapshot as prometheus-client metric families, driven by the catalog.

`SnapshotCollector` is what prometheus-client's encoders read (anything with `collect()`); it
holds no global state, so a series that is not in the snapshot is simply not rendered and
nothing goes stale. render.py turns its families into bodies.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from prometheus_client import Metric as Family

from kube_gpu_exporter.exporter import __version__
from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.exporter.attribution.attribute import lists_every_process
from kube_gpu_exporter.exporter.exposition.attribution_families import attribution_families
from kube_gpu_exporter.exporter.exposition.families import add, device_labels, family
from kube_gpu_exporter.exporter.exposition.health_action import actions, health_labels
from kube_gpu_exporter.exporter.snapshot import ActionMemory, DeviceSample, Snapshot

# Device metrics with one plain number per device, in render order.
VALUE_METRICS = (*c.DEVICE_VALUE_METRICS, *c.PROFILING_METRICS, *c.HARDWARE_VALUE_METRICS)
NO_HEALTH = ActionMemory()  # a GPU nothing is remembered of: no Xid held, no "since"


class SnapshotCollector:
    """A prometheus-client collector over one snapshot (no global state, no `.remove()`).

    `extra` are families built beside the snapshot once per cycle (dcgm-exporter's names with
    `--compat.dcgm-exporter`, see dcgm_compat.py). The order is the snapshot's data, `extra`,
    then the exporter's own families last: a body is rendered as everything before them and
    then them (render.py), so they can carry the duration of the cycle that rendered it.
    """

    def __init__(self, snapshot: Snapshot, extra: Sequence[Family] = ()) -> None:
        self._snapshot = snapshot
        self._extra = extra

    def collect(self) -> Iterator[Family]:
        yield from self.data_families()
        yield from self._extra
        yield from self.exporter_families()

    def data_families(self) -> Iterator[Family]:
        """Devices, attribution and the PCI bus: nearly every byte of a body. A family no
        device answers (GPM on an A100, NVLink on a PCIe card) is left out, HELP and TYPE
        lines too: they were bytes of every scrape of such a node, saying nothing."""
        for fam in self._device_families(self._snapshot.node.devices):
            if fam.samples:
                yield fam
        if self._snapshot.attribution is not None:
            yield from attribution_families(self._snapshot.attribution)
        if self._snapshot.pci_gpus is not None:
            pci = family(c.NODE_PCI_GPUS)
            add(pci, {}, self._snapshot.pci_gpus)
            yield pci

    def _device_families(self, devices: tuple[DeviceSample, ...]) -> Iterator[Family]:
        driver = self._snapshot.node.driver_version
        labels = [device_labels(d.identity) for d in devices]

        info = family(c.GPU_INFO)
        up = family(c.GPU_UP)
        share = family(c.SHARE)
        for device, base in zip(devices, labels, strict=True):
            ident = device.identity
            extra = {
                "model": ident.model,
                "driver_version": driver,
                "pci_bus_id": ident.pci_bus_id,
                "mig_profile": ident.mig_profile,
            }
            add(info, base | extra, 1)
            add(up, base, 1 if device.up else 0)
            add(share, base, ident.share)
        yield info
        yield up
        yield share

        for metric in VALUE_METRICS:
            fam = family(metric)
            for device, base in zip(devices, labels, strict=True):
                value = device.values.get(metric.name)
                if value is not None:
                    add(fam, base, value)
            yield fam

        for metric in c.HARDWARE_LABELLED_METRICS:
            fam = family(metric)
            for device, base in zip(devices, labels, strict=True):
                for (name, *label_values), value in device.labelled.items():
                    if name == metric.name:
                        add(fam, base | dict(zip(metric.labels, label_values, strict=True)), value)
            yield fam

        # A count is only served where the list can be all there is: a busy GPU whose
        # processes NVML does not list would read 0, which the idle rules take for "nothing
        # runs" (the same rule decides whether a shared GPU can be split).
        processes = family(c.COMPUTE_PROCESSES)
        for device, base in zip(devices, labels, strict=True):
            if device.processes is not None and lists_every_process(device):
                add(processes, base, len(device.processes))
        yield processes

        events = family(c.CLOCK_EVENT_ACTIVE)
        xids = family(c.XID_ERRORS)
        for device, base in zip(devices, labels, strict=True):
            if device.clock_events is not None:
                for reason in c.CLOCK_EVENT_REASONS:
                    add(events, base | {"reason": reason}, int(reason in device.clock_events))
            for xid, count in sorted(device.xid_counts.items()):
                add(xids, base | {"xid": str(xid)}, count)
        yield events
        yield xids

        # What each GPU needs now, in the Xid catalog's words (health_action.py), with the Xid
        # it owes and since when as the collection loop remembers them (health_memory.py); a
        # GPU that is not up says nothing (GPULost is the alert for it).
        needed = family(c.ACTION_REQUIRED)
        since = family(c.ACTION_REQUIRED_SINCE)
        for device, base in zip(devices, labels, strict=True):
            health = self._snapshot.health.get(device.identity.uuid, NO_HEALTH)
            for action, source in actions(device.values, health.xid) if device.up else ():
                series = base | health_labels(action, source, health.xid)
                add(needed, series, 1)
                first = health.since.get((action, source))
                if first is not None:
                    add(since, series, first)
        yield needed
        yield since

        # The kubelet's view of each device beside NVML's: whether its plugin offers it
        # (attribute.py). Not on a GPU in MIG mode, whose instances are what plugins offer.
        offered = family(c.KUBELET_ALLOCATABLE)
        attribution = self._snapshot.attribution
        if attribution is not None and attribution.capacity.offered is not None:
            listed = attribution.capacity.offered
            mig_enabled = {d.identity.parent_uuid for d in devices if d.identity.is_mig}
            for device, base in zip(devices, labels, strict=True):
                if device.identity.uuid not in mig_enabled:
                    add(offered, base, int(device.identity.uuid in listed))
        yield offered

    def exporter_families(self) -> Iterator[Family]:
        """The exporter's own health: NVML up, cycle duration and count, errors, kubelet."""
        state = self._snapshot.exporter
        values: list[tuple[c.Metric, dict[str, str], float]] = [
            (c.BUILD_INFO, {"version": __version__, "simulated": str(state.simulated).lower()}, 1),
            (c.NVML_UP, {}, int(self._snapshot.node.nvml_up)),
            (c.COLLECTION_DURATION, {}, state.collection_duration_seconds),
            (c.LAST_SUCCESS, {}, state.last_success_timestamp),
            (c.COLLECTIONS, {}, state.collections_total),
        ]
        for metric, labels, value in values:
            fam = family(metric)
            add(fam, labels, value)
            yield fam
        errors = family(c.COLLECTION_ERRORS)
        for kind, count in sorted(state.errors_total.items()):
            add(errors, {"kind": kind}, count)
        yield errors
        if self._snapshot.node.host_pid_namespace is not None:
            host_pid = family(c.HOST_PID_NAMESPACE)
            add(host_pid, {}, int(self._snapshot.node.host_pid_namespace))
            yield host_pid
        if self._snapshot.node.xid_watch_start is not None:
            watch = family(c.XID_WATCH_START)
            add(watch, {}, self._snapshot.node.xid_watch_start)
            yield watch
        if state.pod_resources_up is not None:
            for metric, value in (
                (c.POD_RESOURCES_UP, int(state.pod_resources_up)),
                (c.POD_RESOURCES_LAST_SUCCESS, state.pod_resources_last_success),
            ):
                single = family(metric)
                add(single, {}, value)
                yield single
        if state.kubernetes_api_up is not None:
            api = family(c.KUBERNETES_API_UP)
            add(api, {}, int(state.kubernetes_api_up))
            yield api
