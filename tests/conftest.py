"""Shared fixtures: the fake libnvidia-ml.so.1, compiled once per test session."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from pathlib import Path

import pynvml
import pytest

from fakenvml import LIBRARY_NAME, build


@pytest.fixture(scope="session")
def fake_nvml_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the fake libnvidia-ml.so.1 (current driver API)."""
    return build(tmp_path_factory.mktemp("fake-nvml"))


@pytest.fixture(scope="session")
def fake_nvml_old_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the old-driver variant (no memory v2, no clock-event reasons)."""
    return build(tmp_path_factory.mktemp("fake-nvml-old"), old_driver=True)


@pytest.fixture
def nvml_state(
    tmp_path: Path, fake_nvml_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """The real pynvml bound to the fake in this process; yields the state file it serves.

    NVML is shut down afterwards as often as the test initialised it, also after a failure.
    """
    state = tmp_path / "nvml-state"
    monkeypatch.setenv("FAKE_NVML_STATE", str(state))
    monkeypatch.setattr(pynvml, "nvmlLib", ctypes.CDLL(str(fake_nvml_dir / LIBRARY_NAME)))
    pynvml._nvmlGetFunctionPointer_cache.clear()
    yield state
    while True:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError_Uninitialized:
            break
    pynvml._nvmlGetFunctionPointer_cache.clear()
