"""The fake libnvidia-ml the tests compile, reused so the bench runs without a GPU.

Measuring through the real pynvml bindings and a C library (rather than the simulated backend)
keeps the ctypes calls, handle lookups and error paths of a real node in the CPU figures.
"""

from __future__ import annotations

import ctypes
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pynvml

REPO = Path(__file__).resolve().parents[1]
# tests/ is not a package; the fakes are imported the way pytest imports them (pythonpath).
sys.path.insert(0, str(REPO / "tests" / "fakes"))

from fakenvml import LIBRARY_NAME, build, write_state  # noqa: E402
from kube_gpu_exporter.exporter.simulated.scenario import Scenario  # noqa: E402


@dataclass(frozen=True)
class FakeNode:
    """A compiled fake and the state file it reads; `env` points a subprocess at both."""

    lib_dir: Path
    state: Path

    @property
    def env(self) -> dict[str, str]:
        return {"LD_LIBRARY_PATH": str(self.lib_dir), "FAKE_NVML_STATE": str(self.state)}

    def set_delay(self, scenario: Scenario, delay_ms: int) -> None:
        """Rewrite the state; the fake sleeps `delay_ms` in every NVML call from then on."""
        write_state(self.state, scenario.state_at(0), delay_ms=delay_ms)


def prepare(work_dir: Path, scenario: Scenario) -> FakeNode:
    """Compile the fake into `work_dir` and write the scenario's state (no delay)."""
    node = FakeNode(build(work_dir / "fake-nvml"), work_dir / "nvml-state")
    node.set_delay(scenario, 0)
    return node


def load_in_process(node: FakeNode) -> None:
    """Make this process's pynvml use the fake, as tests/test_nvml_sampler.py does."""
    os.environ["FAKE_NVML_STATE"] = str(node.state)
    pynvml.nvmlLib = ctypes.CDLL(str(node.lib_dir / LIBRARY_NAME))
    pynvml._nvmlGetFunctionPointer_cache.clear()
