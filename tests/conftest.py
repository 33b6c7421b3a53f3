"""Shared fixtures: the fake libnvidia-ml.so.1, compiled once per test session."""

from __future__ import annotations

from pathlib import Path

import pytest

from fakenvml import build


@pytest.fixture(scope="session")
def fake_nvml_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the fake libnvidia-ml.so.1 (current driver API)."""
    return build(tmp_path_factory.mktemp("fake-nvml"))


@pytest.fixture(scope="session")
def fake_nvml_old_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the old-driver variant (no memory v2, no clock-event reasons)."""
    return build(tmp_path_factory.mktemp("fake-nvml-old"), old_driver=True)
