"""NVIDIA GPUs on the node's PCI bus, counted from sysfs: the GPUs NVML no longer lists.

A GPU that falls off the bus (Xid 79) shows as `nvidia_gpu_up 0` only while the exporter that
saw it keeps running: after an exporter restart or a reboot NVML lists it no more, and a GPU
the driver failed to initialise (lspci shows it, nvidia-smi does not) never had a series. The
kernel's PCI device list does not depend on the driver, so its count of GPUs beside
`nvidia_gpu_node_driver_gpus` shows the gap (the GPUMissing alert).

The read is one listdir of `<sysfs>/bus/pci/devices` and one small read per PCI function (two
more for NVIDIA's): tens of microseconds per function, so it runs every collection cycle.
sysfs needs no mount in a container: the runtime mounts the host's read-only, and the PCI
devices in it are the host's.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)

DEFAULT_SYSFS = "/sys"
NVIDIA_VENDOR = b"0x10de"
# PCI class and subclass of a GPU: a VGA-compatible controller (0x0300: display GPUs, and
# data-centre GPUs in graphics mode) or a 3D controller (0x0302: compute GPUs). NVSwitches are
# bridges (0x0680), a GPU's HDMI audio function is 0x0403 and its USB-C controller 0x0c03:
# none of them is a GPU NVML would list.
GPU_CLASSES = (b"0x0300", b"0x0302")


def pci_devices(sysfs: Path) -> Path:
    """The kernel's list of PCI functions under a sysfs root."""
    return sysfs / "bus" / "pci" / "devices"


def _attribute(device: str, name: str) -> bytes:
    """A sysfs attribute such as `0x10de`; b"" when it cannot be read (the function was removed
    while being counted, or the attribute is hidden), which counts it as no GPU."""
    try:
        with open(os.path.join(device, name), "rb") as file:
            return file.read(32).strip().lower()
    except OSError:
        return b""


def count_nvidia_gpus(sysfs: Path) -> int:
    """NVIDIA GPUs on the PCI bus, physical functions only: an SR-IOV virtual function (vGPU
    on A100 and later, marked by its `physfn` link) is a slice of a GPU, not another GPU.

    Raises OSError when the device list itself cannot be read.
    """
    count = 0
    with os.scandir(pci_devices(sysfs)) as entries:
        for entry in entries:
            if _attribute(entry.path, "vendor") != NVIDIA_VENDOR:
                continue
            if _attribute(entry.path, "class")[:6] not in GPU_CLASSES:
                continue
            if os.path.lexists(os.path.join(entry.path, "physfn")):
                continue
            count += 1
    return count


class PciBus:
    """The count once per collection cycle, or None while sysfs cannot be read.

    An unreadable sysfs (a sandboxed runtime that hides it, a wrong `--path.sysfs`) must not
    stop the exporter, whose NVML metrics matter more: the series is absent, the caller counts
    the failure, and the log says so once per outage rather than every cycle.
    """

    def __init__(self, sysfs: Path) -> None:
        self._sysfs = sysfs
        self._failing = False

    def gpus(self) -> int | None:
        try:
            count = count_nvidia_gpus(self._sysfs)
        except OSError as exc:
            if not self._failing:
                log.warning(
                    "cannot list PCI devices under %s (%s); nvidia_gpu_node_pci_gpus is "
                    "absent until it can",
                    pci_devices(self._sysfs),
                    exc.strerror or exc,
                )
            self._failing = True
            return None
        if self._failing:
            log.info("PCI devices readable again under %s", pci_devices(self._sysfs))
        self._failing = False
        return count
