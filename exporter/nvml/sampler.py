"""The NVML backend: one long-lived NVML session sampled once per collection cycle.

Initialisation can fail (no driver, no library, driver/library mismatch); the sampler then
reports NVML down and retries with exponential backoff instead of exiting, so a DaemonSet pod
scheduled before the driver is ready recovers by itself rather than crash-looping.
All calls here block; the collection loop runs them on its own thread.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import TypeVar

import pynvml

from kube_gpu_exporter.exporter.catalog.errors import NVML_ERROR_KINDS
from kube_gpu_exporter.exporter.nvml.devices import Device, discover, text
from kube_gpu_exporter.exporter.nvml.field_values import FieldReader
from kube_gpu_exporter.exporter.nvml.gpm import GpmReader
from kube_gpu_exporter.exporter.nvml.readings import (
    DriverFeatures,
    ProcessReader,
    Reader,
    error_kind,
    fields_on,
    in_host_pid_namespace,
    read_clock_events,
    readers_on,
)
from kube_gpu_exporter.exporter.nvml.xid_events import XidWatcher
from kube_gpu_exporter.exporter.readings_table import CLOCK_EVENTS, GPM, PROCESSES, Where
from kube_gpu_exporter.exporter.snapshot import DeviceSample, NodeSample, ProcessSample

log = logging.getLogger(__name__)
T = TypeVar("T")

BACKOFF_START_SECONDS = 1.0
BACKOFF_MAX_SECONDS = 60.0


class _DeviceLost(Exception):
    pass


class _SessionLost(Exception):
    """NVML itself stopped answering (driver unloaded or upgraded under us): re-initialise."""


# Codes that say the NVML session is gone. From a node-wide call they are believed at once;
# from one reading of one device they are only a suspicion (see `_check_session`).
SESSION_ERRORS = frozenset(
    {
        pynvml.NVML_ERROR_UNINITIALIZED,
        pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
        pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
        pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
    }
)


class NvmlSampler:
    """Samples every GPU and MIG instance; errors are isolated per device and per reading."""

    simulated = False

    def __init__(
        self,
        rediscover_seconds: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        watch_xids: bool = True,
        gpm: GpmReader | None = None,
        xid_codes: tuple[int, ...] = (),
    ) -> None:
        """`xid_codes`: Xids whose counters exist at 0 on every watched GPU from the start (none
        by default: the alerts tell a first event by the Xid watch's start). `gpm`: the GPM
        reader, for a bench that must compute GPM on back-to-back cycles (its clock decides
        when two samples are apart)."""
        self._rediscover_seconds = rediscover_seconds
        self._clock = clock
        self._watch_xids = watch_xids
        self._xid_zeros = dict.fromkeys(xid_codes, 0)
        self._initialised = False
        self._next_init_at = 0.0
        self._backoff = BACKOFF_START_SECONDS
        self._driver_version = ""
        self._devices: tuple[Device, ...] = ()
        self._discovered_at = 0.0
        self._count_failing = False  # the device count failed at the last rediscovery
        self._gpm = gpm or GpmReader()
        self._host_pid_namespace = in_host_pid_namespace()
        self._session_codes: Counter[str] = Counter()  # uuid → session codes this cycle
        self._new_session()
        self._xids: XidWatcher | None = None

    # --- lifecycle ---------------------------------------------------------------------------

    def _try_init(self, errors: Counter[str]) -> bool:
        now = self._clock()
        if now < self._next_init_at:
            return False
        try:
            pynvml.nvmlInit()
            self._driver_version = text(pynvml.nvmlSystemGetDriverVersion())
            self._devices = discover()
        except pynvml.NVMLError as exc:
            errors["init"] += 1
            log.error(
                "NVML unavailable: %s (is the NVIDIA driver loaded and libnvidia-ml.so.1 on "
                "the library path?); retrying in %.0fs",
                exc,
                self._backoff,
            )
            self._next_init_at = now + self._backoff
            self._backoff = min(self._backoff * 2, BACKOFF_MAX_SECONDS)
            self._shutdown_quietly()
            return False
        self._initialised = True
        self._new_session()
        self._backoff = BACKOFF_START_SECONDS
        self._discovered_at = now
        log.info(
            "NVML ready: driver %s, %d GPU(s), %d MIG instance(s)",
            self._driver_version,
            len(self._devices),
            sum(len(d.children) for d in self._devices),
        )
        if self._watch_xids:
            self._xids = XidWatcher(self._devices)
            self._xids.start()
        return True

    def _new_session(self) -> None:
        """Forget what the previous driver session taught: a reloaded (maybe upgraded) driver
        may answer what the old one refused, has its own entry points, and restarts its
        counters. Within a session this is kept per device uuid across rediscovery."""
        self._features = DriverFeatures()
        self._process_reader = ProcessReader()
        self._fields = FieldReader()
        self._unsupported: set[tuple[str, str]] = set()  # (uuid, row key) NVML refused

    def _shutdown_quietly(self) -> None:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()

    def close(self) -> None:
        """Stop the Xid thread, free the GPM samples and shut NVML down. Blocks in NVML: the
        collection loop runs it on its own thread with a time limit (a hung driver)."""
        if self._xids is not None:
            self._xids.stop()
            self._xids = None
        if self._initialised:
            self._initialised = False
            self._gpm.close()
            self._shutdown_quietly()
            log.info("NVML shut down")

    # --- sampling ----------------------------------------------------------------------------

    def sample(self) -> NodeSample:
        errors: Counter[str] = Counter()
        if not self._initialised and not self._try_init(errors):
            return NodeSample(nvml_up=False, errors=dict(errors))
        xid_counts = self._xids.counts() if self._xids is not None else {}
        # The configured codes start at 0 only where events are watched (a 0 elsewhere would
        # claim a count nobody keeps).
        xid_watched = self._xids.watched() if self._xids is not None else frozenset()
        samples: list[DeviceSample] = []
        self._session_codes.clear()
        try:
            self._maybe_rediscover(errors)
            for device in self._devices:
                samples.extend(self._sample_gpu(device, errors, xid_counts, xid_watched))
            self._check_session(samples, errors)
        except _SessionLost as exc:
            errors["init"] += 1
            log.error("NVML stopped answering (%s); re-initialising", exc.__cause__ or exc)
            self.close()
            return NodeSample(nvml_up=False, errors=dict(errors))
        return NodeSample(
            nvml_up=True,
            driver_version=self._driver_version,
            devices=tuple(samples),
            errors=dict(errors),
            host_pid_namespace=self._host_pid_namespace,
            xid_watch_start=self._xids.watching_since if self._xids is not None else None,
        )

    def _check_session(self, samples: list[DeviceSample], errors: Counter[str]) -> None:
        """Raise _SessionLost if this cycle's session codes were more than one device's quirk.

        A session code (UNINITIALIZED, DRIVER_NOT_LOADED, …) from one function of one GPU,
        while every other call answers, does not mean the session is gone: re-initialising
        would report the whole node down every other cycle and restart the Xid, GPM and
        counter state of every GPU for one reading. So the session is believed lost only when
        every device that answered at all answered such a code, or when a node-wide call
        (the device count) answers one too; otherwise that reading is absent this cycle,
        counted as `session`, and asked again next cycle.
        """
        if not self._session_codes:
            return
        answered = [d for d in samples if d.up and d.identity.uuid not in self._session_codes]
        if not answered:
            raise _SessionLost("every device answered a session-level code")
        try:
            pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as exc:
            if exc.value in SESSION_ERRORS:
                raise _SessionLost from exc
            # Not a session code: no proof the session is gone, but a failure all the same.
            errors[error_kind(exc)] += 1
            log.warning("nvmlDeviceGetCount failed while judging session codes: %s", exc)
        errors["session"] += self._session_codes.total()

    def _maybe_rediscover(self, errors: Counter[str]) -> None:
        """Pick up MIG repartitioning and replaced GPUs without restarting the exporter.

        What is known of each device (readings NVML refused, counters' sums, GPM samples) is
        kept for the devices still there and dropped for those gone. When discovery itself
        fails, the last known devices are sampled and discovery is tried again every cycle,
        each failure counted by its kind, until it succeeds.
        """
        now = self._clock()
        if now - self._discovered_at < self._rediscover_seconds:
            return
        before = _uuids(self._devices)
        try:
            self._devices = discover(self._devices)
        except pynvml.NVMLError as exc:
            if exc.value in SESSION_ERRORS:
                raise _SessionLost from exc
            errors[error_kind(exc)] += 1
            if not self._count_failing:
                log.warning(
                    "NVML rediscovery failed, sampling the %d known GPU(s) and retrying every "
                    "cycle: %s",
                    len(self._devices),
                    exc,
                )
            self._count_failing = True
            return
        if self._count_failing:
            log.info("NVML rediscovery works again: %d GPU(s)", len(self._devices))
        self._count_failing = False
        self._discovered_at = now
        self._forget(before - _uuids(self._devices))
        if self._xids is not None:
            self._xids.watch(self._devices)

    def _forget(self, gone: set[str]) -> None:
        """Drop what is known of the devices no longer discovered, and only of those."""
        if not gone:
            return
        self._unsupported = {k for k in self._unsupported if k[0] not in gone}
        self._gpm.forget(gone)
        self._fields.forget(gone)
        self._process_reader.forget(gone)

    def _sample_gpu(
        self,
        device: Device,
        errors: Counter[str],
        xid_counts: dict[str, dict[int, int]],
        xid_watched: frozenset[str],
    ) -> list[DeviceSample]:
        identity = device.identity
        watched = identity.uuid in xid_watched
        zeros = self._xid_zeros if watched else {}
        xids = zeros | xid_counts.get(identity.uuid, {})
        try:
            if device.handle is None:
                raise _DeviceLost
            where = Where.MIG_ENABLED_GPU if device.mig_enabled else Where.GPU
            values = self._read(device, readers_on(where), errors)
            labelled = self._field_values(device, where, values, errors)
            values.update(self._gpm_values(device, device, errors))
            clock_events = self._optional(
                device,
                CLOCK_EVENTS.key,
                lambda: read_clock_events(device.handle, self._features),
                errors,
            )
            # Per-process utilization is never available on MIG; memory per process is.
            processes = self._processes(device, not device.mig_enabled, errors)
            children = [
                DeviceSample(
                    child.identity,
                    True,
                    self._read(child, readers_on(Where.MIG_INSTANCE), errors)
                    | self._gpm_values(child, device, errors),
                    processes=self._processes(child, False, errors),
                )
                for child in device.children
            ]
        except _DeviceLost:
            errors["gpu_is_lost"] += 1
            down = [DeviceSample(identity, up=False, xid_counts=xids, xid_watched=watched)]
            return down + [DeviceSample(child.identity, up=False) for child in device.children]
        gpu = DeviceSample(identity, True, values, clock_events, xids, processes, labelled, watched)
        return [gpu, *children]

    def _field_values(
        self, device: Device, where: Where, values: dict[str, float], errors: Counter[str]
    ) -> dict[tuple[str, ...], float]:
        """The GPU's batched field values: plain ones into `values`, labelled ones returned."""
        rows = fields_on(where)
        uuid = device.identity.uuid
        result = self._optional(
            device, "fields", lambda: self._fields.read(uuid, device.handle, rows), errors
        )
        if result is None:
            return {}
        values.update(result.values)
        errors.update(NVML_ERROR_KINDS.get(code, "other") for code in result.failed)
        return result.labelled

    def _gpm_values(self, target: Device, gpu: Device, errors: Counter[str]) -> dict[str, float]:
        """GPM metrics of a GPU (target is gpu) or of one of its MIG instances."""
        instance = target.identity.gpu_instance_id if target is not gpu else None

        def read() -> dict[str, float]:
            if not self._gpm.supported(gpu.identity.uuid, gpu.handle):
                raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
            values, failed = self._gpm.read(target.identity.uuid, gpu.handle, instance)
            errors.update(NVML_ERROR_KINDS.get(code, "other") for code in failed)
            return values

        return self._optional(target, GPM.key, read, errors) or {}

    def _processes(
        self, device: Device, with_utilization: bool, errors: Counter[str]
    ) -> tuple[ProcessSample, ...] | None:
        if self._host_pid_namespace is False:
            # NVML lists only this PID namespace's processes: none of the workloads', so an
            # empty list would read as an idle device. Unknown, not none.
            return None
        uuid = device.identity.uuid
        return self._optional(
            device,
            PROCESSES.key,
            lambda: self._process_reader.read(uuid, device.handle, with_utilization),
            errors,
        )

    def _read(
        self, device: Device, readers: Mapping[str, Reader], errors: Counter[str]
    ) -> dict[str, float]:
        values: dict[str, float] = {}
        uuid = device.identity.uuid
        for name, reader in readers.items():
            if (uuid, name) in self._unsupported:
                continue
            try:
                values.update(reader(device.handle, self._features))
            except pynvml.NVMLError as exc:
                self._on_error(uuid, name, exc, errors)
        return values

    def _optional(
        self, device: Device, name: str, read: Callable[[], T], errors: Counter[str]
    ) -> T | None:
        """One reading that is None when NVML cannot give it for this device."""
        uuid = device.identity.uuid
        if (uuid, name) in self._unsupported:
            return None
        try:
            return read()
        except pynvml.NVMLError as exc:
            self._on_error(uuid, name, exc, errors)
            return None

    def _on_error(
        self, uuid: str, reader: str, exc: pynvml.NVMLError, errors: Counter[str]
    ) -> None:
        if exc.value == pynvml.NVML_ERROR_GPU_IS_LOST:
            raise _DeviceLost from exc
        if exc.value in SESSION_ERRORS:
            self._session_codes[uuid] += 1  # judged (and counted) once every device was asked
            log.debug("%s: reading %s answered a session-level code: %s", uuid, reader, exc)
            return
        if exc.value in (pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND):
            self._unsupported.add((uuid, reader))
            log.debug("%s: %s not supported, not asking again", uuid, reader)
            return
        errors[error_kind(exc)] += 1
        log.debug("%s: reading %s failed: %s", uuid, reader, exc)


def _uuids(devices: tuple[Device, ...]) -> set[str]:
    """Every GPU's and MIG instance's uuid."""
    return {d.identity.uuid for gpu in devices for d in (gpu, *gpu.children)}
