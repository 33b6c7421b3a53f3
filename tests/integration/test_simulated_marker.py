"""Invented readings say so: `serve --simulate` serves a scenario under the real metric names,
and its build_info carries simulated="true", where the exporter on NVML (the real pynvml over
the fake libnvidia-ml) says "false" — so a dashboard or a query can tell them apart."""

from __future__ import annotations

from pathlib import Path

from fakenvml import exporter_env
from kube_gpu_exporter.exporter.simulated.scenario import Scenario
from support import run_exporter, values

SCENARIO = "devices:\n  - uuid: GPU-00000000-0000-4000-8000-000000000000\n"
INFO = "kube_gpu_exporter_build_info"


def test_simulated_data_is_marked(tmp_path: Path) -> None:
    (tmp_path / "node.yaml").write_text(SCENARIO)
    args = ["--simulate", str(tmp_path / "node.yaml"), "--collector.interval=0.5s"]
    with run_exporter(args, tmp_path) as exporter:
        parsed = exporter.metrics()
    assert values(parsed, INFO, simulated="true") == [1]
    assert values(parsed, INFO, simulated="false") == []
    assert values(parsed, "nvidia_gpu_info")  # the invented GPU under the real name


def test_nvml_data_is_not_marked(fake_nvml_dir: Path, tmp_path: Path) -> None:
    env = exporter_env(fake_nvml_dir, tmp_path / "state", Scenario.parse(SCENARIO).state_at(0))
    with run_exporter(["--collector.interval=0.5s"], tmp_path, env=env) as exporter:
        parsed = exporter.metrics()
    assert values(parsed, INFO, simulated="false") == [1]
    assert values(parsed, INFO, simulated="true") == []
