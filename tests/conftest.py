"""Shared fixtures: the fake libnvidia-ml.so.1, compiled once per test session (under
pytest-xdist once per worker, in the worker's own folder: it takes half a second), and what
keeps one test's process-wide state from reaching the tests after it on its worker."""

from __future__ import annotations

import ctypes
import logging
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pynvml
import pytest

from fakenvml import LIBRARY_NAME, build
from prometheus_server import BUILT, DEBIAN, Generation, binaries_of


@pytest.fixture(autouse=True)
def _loggers_left_enabled() -> Iterator[None]:
    """Loggers a test disabled are as they were again after it. logging.config.dictConfig,
    run in-process by importlinter's lint_imports (test_layout.py), disables every logger that
    exists; the tests after it on the same worker (an order xdist picks, not the file order)
    would then miss the records they assert on."""
    before = {name: logger.disabled for name, logger in _loggers()}
    disabled_below = logging.root.manager.disable
    yield
    logging.disable(disabled_below)
    for name, logger in _loggers():
        logger.disabled = before.get(name, False)  # a new one: as getLogger made it


def _loggers() -> list[tuple[str, logging.Logger]]:
    return [
        (name, logger)
        for name, logger in list(logging.Logger.manager.loggerDict.items())
        if isinstance(logger, logging.Logger)
    ]


@pytest.fixture(scope="session")
def fake_nvml_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the fake libnvidia-ml.so.1 (current driver API)."""
    return build(tmp_path_factory.mktemp("fake-nvml"))


@pytest.fixture(scope="session")
def fake_nvml_old_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the old-driver variant (no memory v2, no clock-event reasons)."""
    return build(tmp_path_factory.mktemp("fake-nvml-old"), old_driver=True)


@pytest.fixture
def nvml_env(fake_nvml_dir: Path, tmp_path: Path) -> dict[str, str]:
    """What an exporter subprocess needs to load the fake NVML; the state file is the test's
    to write (fakenvml.write_state)."""
    return {"LD_LIBRARY_PATH": str(fake_nvml_dir), "FAKE_NVML_STATE": str(tmp_path / "state")}


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


@pytest.fixture(
    scope="session",
    params=[
        pytest.param(DEBIAN, id="prom2"),
        pytest.param(BUILT, id="prom3", marks=pytest.mark.k8s),  # built by make prom-bin
    ],
)
def generation(request: pytest.FixtureRequest) -> Generation:
    """Prometheus, promtool, Alertmanager and amtool of one generation; a test taking it runs
    on Debian's (2.42 / 0.25) and on the built ones (3.x / current), as users run either."""
    name: str = request.param
    return binaries_of(name)


@pytest.fixture(scope="session")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed P-256 certificate and key for 127.0.0.1 (openssl, as make test installs
    it): the TLS ports' tests share it."""
    openssl = shutil.which("openssl")
    assert openssl, "the openssl CLI is missing (Debian's openssl package)"
    folder = tmp_path_factory.mktemp("tls")
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-days", "2", "-subj", "/CN=localhost", "-addext",
         "subjectAltName=IP:127.0.0.1", "-keyout", "server.key", "-out", "server.crt"],
        cwd=folder, check=True, capture_output=True,
    )  # fmt: skip
    return folder / "server.crt", folder / "server.key"
