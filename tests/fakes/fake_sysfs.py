"""A fake sysfs tree laid out as the kernel lays it out: each PCI function a folder under
devices/pci0000:00/ with its `vendor` and `class` attributes, and a link to it in
bus/pci/devices/. The exporter reads it through `--path.sysfs`."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

# address → (vendor, class) as the kernel writes them: an 8-GPU H100 node's kinds of function
NODE: Mapping[str, tuple[str, str]] = {
    "0000:18:00.0": ("0x10de", "0x030200"),  # H100 SXM: 3D controller
    "0000:2a:00.0": ("0x10de", "0x030000"),  # a GPU in graphics mode: VGA controller
    "0000:05:00.0": ("0x10de", "0x068000"),  # NVSwitch: bridge
    "0000:2a:00.1": ("0x10de", "0x040300"),  # the display GPU's HDMI audio function
    "0000:2a:00.2": ("0x10de", "0x0c0330"),  # its USB-C controller
    "0000:03:00.0": ("0x8086", "0x030000"),  # the BMC's or the CPU's own VGA: not NVIDIA
    "0000:4b:00.0": ("0x15b3", "0x020700"),  # a ConnectX InfiniBand NIC
}
NODE_GPUS = 2  # of NODE's functions, the GPUs


def bus(sysfs: Path) -> Path:
    return sysfs / "bus" / "pci" / "devices"


def add_function(sysfs: Path, address: str, vendor: str, pci_class: str) -> Path:
    """One PCI function and its link; returns its folder."""
    device = sysfs / "devices" / "pci0000:00" / address
    device.mkdir(parents=True)
    (device / "vendor").write_text(vendor + "\n")
    (device / "class").write_text(pci_class + "\n")
    bus(sysfs).mkdir(parents=True, exist_ok=True)
    (bus(sysfs) / address).symlink_to(device, target_is_directory=True)
    return device


def remove_function(sysfs: Path, address: str) -> None:
    """As `echo 1 > remove` does: the link goes first, then the folder."""
    (bus(sysfs) / address).unlink()
    device = sysfs / "devices" / "pci0000:00" / address
    for attribute in device.iterdir():
        attribute.unlink()
    device.rmdir()


def write_sysfs(sysfs: Path, functions: Mapping[str, tuple[str, str]] = NODE) -> Path:
    for address, (vendor, pci_class) in functions.items():
        add_function(sysfs, address, vendor, pci_class)
    return sysfs
