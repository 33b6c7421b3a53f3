"""Xid error events, waited on in their own thread.

NVML delivers Xid events through an event set that must be waited on; doing that on the
collection thread would delay sampling, so a daemon thread waits and counts per GPU uuid.
The counts only grow (a counter), which is what `rate()`/`increase()` in alerts expect. A code's
counter appears at its first event, at 1; `started_at` (served as
kube_gpu_exporter_xid_watch_start_timestamp_seconds) says from when the counts count, so the
alerts can tell a first event from an old one without a zero served for every code.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import threading
import time
from collections import defaultdict
from typing import Any

import pynvml

from kube_gpu_exporter.exporter.nvml.devices import Device

log = logging.getLogger(__name__)

WAIT_MILLISECONDS = 500
XID_EVENT = pynvml.nvmlEventTypeXidCriticalError


def _address(handle: Any) -> int:
    return ctypes.cast(handle, ctypes.c_void_p).value or 0


class XidWatcher:
    """Counts Xid events per GPU uuid; `counts()` is safe to call from any thread."""

    def __init__(self, devices: tuple[Device, ...]) -> None:
        self.started_at = time.time()  # wall clock: Prometheus compares it with its time()
        self._lock = threading.Lock()
        self._counts: dict[str, dict[int, int]] = defaultdict(dict)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nvml-xid", daemon=True)
        self._set: Any = None
        self._by_address: dict[int, str] = {}
        self.watch(devices)

    def watch(self, devices: tuple[Device, ...]) -> None:
        """Register every GPU not registered yet (a new set is not needed after rediscovery).

        NVML hands the GPU at an index the same handle whichever GPU it is, so a handle
        registered before is bound to the uuid discovered now: a replaced GPU's events count
        under its own uuid. The counts of GPUs no longer discovered are dropped.
        """
        try:
            if self._set is None:
                self._set = pynvml.nvmlEventSetCreate()
        except pynvml.NVMLError as exc:
            log.warning("Xid events unavailable: %s", exc)
            return
        present = {d.identity.uuid for d in devices}
        with self._lock:
            for uuid in set(self._counts) - present:
                del self._counts[uuid]
        for device in devices:
            address = _address(device.handle) if device.handle is not None else 0
            if not address:
                continue
            if address in self._by_address:
                with self._lock:
                    self._by_address[address] = device.identity.uuid
                continue
            try:
                supported = pynvml.nvmlDeviceGetSupportedEventTypes(device.handle)
                if not supported & XID_EVENT:
                    continue
                pynvml.nvmlDeviceRegisterEvents(device.handle, XID_EVENT, self._set)
            except pynvml.NVMLError as exc:
                log.warning("GPU %s: Xid events unavailable: %s", device.identity.uuid, exc)
                continue
            with self._lock:
                self._by_address[address] = device.identity.uuid

    def start(self) -> None:
        if self._set is not None:
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=WAIT_MILLISECONDS / 1000 * 4)
        if self._set is not None and not self._thread.is_alive():
            with contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlEventSetFree(self._set)
            self._set = None

    @property
    def watching_since(self) -> float | None:
        """Unix time the counts count from; None when NVML gave no event set (nothing is
        counted, so no time would be true)."""
        return self.started_at if self._set is not None else None

    def watched(self) -> frozenset[str]:
        """The uuids of the GPUs whose Xid events are counted: where NVML gave no event set or
        would not register a GPU, nothing is, and no count of 0 would be true there."""
        if self._set is None:
            return frozenset()
        with self._lock:
            return frozenset(self._by_address.values())

    def counts(self) -> dict[str, dict[int, int]]:
        with self._lock:
            return {uuid: dict(per_xid) for uuid, per_xid in self._counts.items()}

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                event = pynvml.nvmlEventSetWait_v2(self._set, WAIT_MILLISECONDS)
            except pynvml.NVMLError_Timeout:
                continue
            except pynvml.NVMLError as exc:
                log.warning("waiting for Xid events failed: %s", exc)
                self._stop.wait(1.0)
                continue
            if event.eventType & XID_EVENT:
                self._record(_address(event.device), int(event.eventData))

    def _record(self, address: int, xid: int) -> None:
        with self._lock:
            uuid = self._by_address.get(address, "")
            per_xid = self._counts[uuid]
            per_xid[xid] = per_xid.get(xid, 0) + 1
        log.warning("Xid %d on GPU %s", xid, uuid or "<unknown>")
