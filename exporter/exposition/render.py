"""Snapshot → exposition bytes, once per collection cycle.

Rendering is a pure function of the immutable snapshot, done on the collection thread, so a
scrape only picks ready bytes. prometheus-client's own encoders do the formatting (text and
OpenMetrics); this module only turns the snapshot into metric families, driven by the catalog.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from prometheus_client import Metric as Family
from prometheus_client.exposition import choose_encoder

from kube_gpu_exporter.exporter import __version__
from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.exporter.exposition.attribution_families import attribution_families
from kube_gpu_exporter.exporter.exposition.families import add, device_labels, family
from kube_gpu_exporter.exporter.exposition.text_counters import text_families
from kube_gpu_exporter.exporter.snapshot import DeviceSample, Snapshot

GZIP_LEVEL = 6
# Device metrics with one plain number per device, in render order.
VALUE_METRICS = (*c.DEVICE_VALUE_METRICS, *c.PROFILING_METRICS, *c.HARDWARE_VALUE_METRICS)
# The Accept headers of curl, Prometheus 2.x and Prometheus 3.x: rendered eagerly.
COMMON_ACCEPT_HEADERS = (
    "",
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
    "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,"
    "application/openmetrics-text;version=0.0.1;q=0.4,"
    "text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1",
)


class SnapshotCollector:
    """A prometheus-client collector over one snapshot (no global state, no `.remove()`).

    `extra` are families built beside the snapshot once per cycle (dcgm-exporter's names with
    `--compat.dcgm-exporter`, see dcgm_compat.py), yielded after ours.
    """

    def __init__(self, snapshot: Snapshot, extra: Sequence[Family] = ()) -> None:
        self._snapshot = snapshot
        self._extra = extra

    def collect(self) -> Iterator[Family]:
        yield from self._device_families(self._snapshot.node.devices)
        if self._snapshot.attribution is not None:
            yield from attribution_families(self._snapshot.attribution)
        if self._snapshot.pci_gpus is not None:
            pci = family(c.NODE_PCI_GPUS)
            add(pci, {}, self._snapshot.pci_gpus)
            yield pci
        yield from self._exporter_families()
        yield from self._extra

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

        processes = family(c.COMPUTE_PROCESSES)
        for device, base in zip(devices, labels, strict=True):
            if device.processes is not None:
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

    def _exporter_families(self) -> Iterator[Family]:
        state = self._snapshot.exporter
        values: list[tuple[c.Metric, dict[str, str], float]] = [
            (c.BUILD_INFO, {"version": __version__}, 1),
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


@dataclass
class Rendered:
    """A snapshot's exposition bodies, keyed by content type, plain and gzipped.

    The common formats are rendered eagerly on the collection thread before the object is
    published; after that only the event loop touches it, so a rarer Accept header is
    rendered there once on first use and kept for the rest of the cycle, without a lock.
    """

    snapshot: Snapshot
    extra: Sequence[Family] = ()  # built once per cycle; never changed after publishing
    _bodies: dict[tuple[str, bool], bytes] = field(default_factory=dict)

    def body(self, accept: str, gzipped: bool) -> tuple[bytes, str]:
        encoder, content_type = choose_encoder(accept)
        fmt = _without_escaping(content_type)
        body = self._bodies.get((fmt, gzipped))
        if body is None:
            body = self._render(encoder, fmt, gzipped)
        return body, content_type

    def _render(self, encoder: Callable[..., bytes], fmt: str, gzipped: bool) -> bytes:
        plain = self._bodies.get((fmt, False))
        if plain is None:
            plain = _encode(encoder, fmt, self.snapshot, self.extra)
        body = gzip.compress(plain, GZIP_LEVEL) if gzipped else plain
        self._bodies[(fmt, False)] = plain
        self._bodies[(fmt, gzipped)] = body
        return body


def _encode(
    encoder: Callable[..., bytes], fmt: str, snapshot: Snapshot, extra: Sequence[Family]
) -> bytes:
    """OpenMetrics must end in `# EOF`: ours and `extra` go through one collector. The text
    format is ours, then `extra` by text_families, which types the compat counters that keep
    dcgm-exporter's names without `_total` as `counter` (see text_counters.py)."""
    if fmt.startswith("application/openmetrics-text"):
        return encoder(SnapshotCollector(snapshot, extra))
    return encoder(SnapshotCollector(snapshot)) + text_families(encoder, extra)


def _without_escaping(content_type: str) -> str:
    """The format a body depends on. Every name we emit is a legacy-valid Prometheus name
    (the catalog and dcgm-compat tests check it), so the UTF-8 escaping scheme Prometheus 3
    negotiates cannot change the bytes: Prometheus 2 and 3 share one rendered body."""
    params = [p.strip() for p in content_type.split(";")]
    return "; ".join(p for p in params if not p.startswith("escaping="))


def render(snapshot: Snapshot, extra: Sequence[Family] = ()) -> Rendered:
    rendered = Rendered(snapshot, extra)
    for accept in COMMON_ACCEPT_HEADERS:
        rendered.body(accept, gzipped=False)
        rendered.body(accept, gzipped=True)
    return rendered
