"""GPM profiling metrics: computed between the previous cycle's sample and this one's.

NVML's GPU Performance Monitoring (Hopper and newer) gives SM, tensor, DRAM and engine
activity — the counters DCGM profiling reads — per GPU and, through the GPU instance id, per
MIG instance. A metric is a difference of two samples, and two samples must be more than
100 ms apart (closer ones read 0 or NaN on a real H100, with SUCCESS). So each device keeps its
previous cycle's sample; a cycle computes between that one and a new one and keeps the new
one. The first cycle after discovery has no values; a cycle closer than 100 ms to the last
sample keeps the older sample and gives none. Nothing here sleeps.

Two sample buffers per device alternate, so steady state allocates nothing. Every metric has
its own return code: one the GPU does not count is dropped for good, the others stay.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pynvml

from kube_gpu_exporter.exporter.reading import Value, from_nvml
from kube_gpu_exporter.exporter.readings_table import GPM

# NVML needs > 100 ms; the margin covers the time between reading our clock and the driver's
# own timestamp inside nvmlGpmSampleGet (too-close pairs read SUCCESS 0.0 on a real H100).
MIN_SAMPLE_GAP_SECONDS = 0.11


@dataclass
class _Device:
    """One device's GPM state: its last sample, a spare buffer, the metrics it counts."""

    values: list[Value]
    last: Any = None  # nvmlGpmSample_t of the previous cycle
    last_at: float = 0.0
    spare: Any = None


def _metric(value: Value, raw: float) -> float | None:
    """A GPM number in the catalog's base unit; NaN (too-close samples) and noise dropped."""
    if not math.isfinite(raw) or raw < 0:
        return None
    number = from_nvml(value.encoding, raw)
    if value.metric.unit == "ratio":
        number = min(number, 1.0)  # counters sampled at slightly different instants
    return number


class GpmReader:
    """GPM metrics per device (GPU or MIG instance), keyed by the device's uuid."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._devices: dict[str, _Device] = {}
        self._request = pynvml.c_nvmlGpmMetricsGet_t()
        self._supported: dict[str, bool] = {}  # by the physical GPU's uuid

    def supported(self, gpu_uuid: str, gpu_handle: Any) -> bool:
        """Whether the physical GPU has GPM (asked once; a MIG instance answers its GPU's)."""
        if gpu_uuid not in self._supported:
            support = pynvml.nvmlGpmQueryDeviceSupport(gpu_handle)
            self._supported[gpu_uuid] = bool(support.isSupportedDevice)
        return self._supported[gpu_uuid]

    def read(
        self, uuid: str, gpu_handle: Any, gpu_instance_id: int | None = None
    ) -> tuple[dict[str, float], list[int]]:
        """This cycle's metrics of a GPU (gpu_instance_id None) or of one of its MIG instances.

        Returns the values and the return codes of metrics that failed for another reason than
        NOT_SUPPORTED. Raises NVMLError when sampling itself fails (NOT_SUPPORTED: no GPM).
        """
        device = self._devices.get(uuid)
        if device is None:
            device = self._devices[uuid] = _Device(values=list(GPM.values))
        now = self._clock()
        if device.last is not None and now - device.last_at < MIN_SAMPLE_GAP_SECONDS:
            return {}, []
        sample = device.spare if device.spare is not None else pynvml.nvmlGpmSampleAlloc()
        device.spare = None
        try:
            if gpu_instance_id is None:
                pynvml.nvmlGpmSampleGet(gpu_handle, sample)
            else:
                pynvml.nvmlGpmMigSampleGet(gpu_handle, gpu_instance_id, sample)
        except pynvml.NVMLError:
            device.spare = sample
            raise
        previous, device.last, device.last_at = device.last, sample, now
        if previous is None:
            return {}, []
        try:
            return self._metrics(device, previous, sample)
        finally:
            device.spare = previous

    def _metrics(
        self, device: _Device, first: Any, second: Any
    ) -> tuple[dict[str, float], list[int]]:
        request = self._request
        request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(device.values)
        request.sample1, request.sample2 = first, second
        for i, value in enumerate(device.values):
            request.metrics[i].metricId = value.nvml_id
        pynvml.nvmlGpmMetricsGet(request)
        values: dict[str, float] = {}
        kept: list[Value] = []
        failed: list[int] = []
        for i, value in enumerate(device.values):
            entry = request.metrics[i]
            if entry.nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED:
                continue  # this GPU does not count it: never ask again
            kept.append(value)
            if entry.nvmlReturn != pynvml.NVML_SUCCESS:
                failed.append(int(entry.nvmlReturn))
                continue
            number = _metric(value, float(entry.value))
            if number is not None:
                values[value.metric.name] = number
        device.values = kept
        return values, failed

    def forget(self, uuids: set[str]) -> None:
        """Free the samples of the devices named (MIG repartitioned, GPU gone) and forget
        whether those GPUs have GPM."""
        for uuid in uuids & set(self._devices):
            self._free(self._devices.pop(uuid))
        for uuid in uuids & set(self._supported):
            del self._supported[uuid]

    def close(self) -> None:
        self.forget(set(self._devices) | set(self._supported))

    @staticmethod
    def _free(device: _Device) -> None:
        for sample in (device.last, device.spare):
            if sample is not None:
                # The session may be going away; the driver frees it with the context then.
                with contextlib.suppress(pynvml.NVMLError):
                    pynvml.nvmlGpmSampleFree(sample)
