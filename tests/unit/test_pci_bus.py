"""The GPUs on the PCI bus, counted from a fake sysfs tree laid out as the kernel lays it out
(tests/fakes/fake_sysfs.py), and the series they become."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from fake_sysfs import NODE_GPUS, add_function, write_sysfs

from kube_gpu_exporter.exporter import pci_bus
from kube_gpu_exporter.exporter.exposition.render import render
from kube_gpu_exporter.exporter.pci_bus import PciBus, count_nvidia_gpus, pci_devices
from kube_gpu_exporter.exporter.snapshot import ExporterState, NodeSample, Snapshot
from support import samples, values


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    return write_sysfs(tmp_path / "sys")


def test_counts_nvidia_display_and_3d_controllers_only(sysfs: Path) -> None:
    """Not the NVSwitch, the audio and USB functions, another vendor's VGA or a NIC."""
    assert count_nvidia_gpus(sysfs) == NODE_GPUS == 2


def test_an_sriov_virtual_function_is_not_another_gpu(sysfs: Path) -> None:
    vf = add_function(sysfs, "0000:18:00.4", "0x10de", "0x030200")
    (vf / "physfn").symlink_to(sysfs / "devices" / "pci0000:00" / "0000:18:00.0")
    assert count_nvidia_gpus(sysfs) == 2


def test_a_function_that_vanishes_or_hides_its_attributes_is_not_counted(sysfs: Path) -> None:
    gone = add_function(sysfs, "0000:9a:00.0", "0x10de", "0x030200")
    (gone / "class").unlink()  # removed while being counted
    (pci_devices(sysfs) / "0000:ab:00.0").symlink_to(sysfs / "devices" / "nowhere")  # dangling
    assert count_nvidia_gpus(sysfs) == 2
    add_function(sysfs, "0000:9b:00.0", "0X10DE", "0x0302ff")  # case and prog-if do not matter
    assert count_nvidia_gpus(sysfs) == 3


def test_an_empty_bus_is_zero_and_a_missing_one_raises(tmp_path: Path) -> None:
    pci_devices(tmp_path / "empty").mkdir(parents=True)
    assert count_nvidia_gpus(tmp_path / "empty") == 0
    with pytest.raises(OSError):
        count_nvidia_gpus(tmp_path / "no-sysfs")


def test_unreadable_sysfs_gives_none_and_logs_once_per_outage(
    tmp_path: Path, sysfs: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # test_layout.py runs import-linter in this process, whose logging dictConfig disables
    # every logger that exists by then.
    monkeypatch.setattr(pci_bus.log, "disabled", False)
    moved = tmp_path / "moved"
    bus = PciBus(sysfs)
    assert bus.gpus() == 2
    with caplog.at_level(logging.INFO, logger="kube_gpu_exporter.exporter.pci_bus"):
        pci_devices(sysfs).rename(moved)
        assert bus.gpus() is None
        assert bus.gpus() is None
        moved.rename(pci_devices(sysfs))
        assert bus.gpus() == 2
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2, messages
    assert messages[0].startswith(f"cannot list PCI devices under {pci_devices(sysfs)}")
    assert "No such file or directory" in messages[0]
    assert messages[1] == f"PCI devices readable again under {pci_devices(sysfs)}"


def _snapshot(pci_gpus: int | None) -> Snapshot:
    state = ExporterState(0.01, 1_790_000_000.0, 1, {"init": 0})
    return Snapshot(NodeSample(nvml_up=True), state, 1_790_000_000.0, pci_gpus=pci_gpus)


def test_rendered_as_a_node_series_and_absent_when_not_read() -> None:
    body, _ = render(_snapshot(3)).body("", gzipped=False)
    assert values(samples(body), "nvidia_gpu_node_pci_gpus") == [3]
    assert b"# HELP nvidia_gpu_node_pci_gpus NVIDIA GPUs on the node's PCI bus" in body
    body, _ = render(_snapshot(None)).body("", gzipped=False)
    assert b"nvidia_gpu_node_pci_gpus" not in body
