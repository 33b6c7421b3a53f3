"""`kube-gpu-exporter demo`: the story's kubelet listing, bad input and a port in use.

Whole runs as a user meets them are in test_demo_stack.py; the alerts the demo's stack delivers
are tested end to end in test_alerts_e2e.py.
"""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

from kube_gpu_exporter.demo.kubelet_listing import allocatable, pod_resources
from kube_gpu_exporter.exporter.simulated.scenario import Scenario, ScenarioError
from support import exporter_command, free_port

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "exporter" / "simulated" / "scenarios" / "demo.yaml"
GPU = "GPU-{0:08x}-0000-4000-8000-{0:012x}".format  # the scenario's generated uuids


def test_the_story_kubelet_lists_each_pod_with_device_plugin_ids() -> None:
    scenario = Scenario.load(DEMO)
    pods = {(p.namespace, p.name): p for p in pod_resources(scenario)}
    assert len(pods) == 8

    def held(namespace: str, name: str) -> list[tuple[str, list[str]]]:
        (container,) = pods[(namespace, name)].containers
        return [(d.resource_name, list(d.device_ids)) for d in container.devices]

    assert held("lab", "notebook-alice") == [("nvidia.com/gpu", [GPU(1)])]
    mig = scenario.state_at(0).devices[3].mig[0]
    assert held("ml", "embeddings") == [("nvidia.com/mig-3g.20gb", [mig.uuid])]
    assert held("serving", "chat-2") == [("nvidia.com/gpu", [f"{GPU(4)}::2"])]

    advertised = {d.resource_name: list(d.device_ids) for d in allocatable(scenario)}
    assert advertised["nvidia.com/gpu"] == [
        GPU(0), GPU(1), GPU(2), *(f"{GPU(4)}::{n}" for n in range(4))
    ]  # fmt: skip
    assert set(advertised) == {
        "nvidia.com/gpu", "nvidia.com/mig-3g.20gb", "nvidia.com/mig-2g.10gb",
        "nvidia.com/mig-1g.5gb",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("kubelet", "message"),
    [
        ("pods: [{namespace: a, name: p, device: 7}]", "device 7 is not in `devices`"),
        ("pods: [{namespace: a, name: p, device: 1}]", "mig must name one of device 1"),
        ("pods: [{namespace: a, name: p, device: 0, replica: 0}]", "replica must be set"),
        ("replicas: {1: 2}", "1 is not a whole GPU"),
        (
            "replicas: {0: 1}",
            "kubelet.replicas[0]: Input should be greater than or equal to 2 (got 1)",
        ),
    ],
)
def test_a_kubelet_section_naming_no_device_is_a_one_line_error(kubelet: str, message: str) -> None:
    text = f"""
devices:
  - {{}}
  - mig: [{{profile: 1g.5gb, gpu_instance_id: 13, memory_total_bytes: 4864MiB}}]
kubelet: {{{kubelet}}}
"""
    with pytest.raises(ScenarioError) as caught:
        Scenario.parse(text)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def run_demo(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    command = exporter_command("demo", *args)
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


def test_bad_thresholds_and_a_missing_binary_are_one_line_errors(tmp_path: Path) -> None:
    bad = tmp_path / "thresholds.yaml"
    bad.write_text("alerts: {GPUAllocatedIdle: {for: soon}}\n")
    result = run_demo(f"--thresholds={bad}")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "GPUAllocatedIdle" in result.stderr

    # No prometheus on this PATH, and none built (make prom-bin) in this cache.
    env_path = {"PATH": str(tmp_path), "KGE_BIN_CACHE": str(tmp_path / "no-builds")}
    command = exporter_command("demo", f"--workdir={tmp_path / 'w'}")
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=30, env={**os.environ, **env_path}
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "`prometheus` is not installed" in result.stderr and "make prom-bin" in result.stderr


def test_a_port_in_use_is_named_with_its_holder_before_anything_starts(tmp_path: Path) -> None:
    workdir = tmp_path / "demo"
    chosen = {part: free_port() for part in PARTS}
    with socket.socket() as taken:  # a server holds it, with SO_REUSEADDR as servers set
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind(("127.0.0.1", chosen["alertmanager"]))
        taken.listen()
        flags = [f"--port.{part}={port}" for part, port in chosen.items()]
        result = run_demo(f"--workdir={workdir}", *flags)
    holder = f"{Path('/proc/self/comm').read_text().strip()} (pid {os.getpid()})"  # this test
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        f"kube-gpu-exporter demo: error: port {chosen['alertmanager']} is in use by {holder}: "
        "stop it, or give the demo another with --port.alertmanager=PORT"
    ]
    assert not list(workdir.glob("*.log"))  # nothing was started


PARTS = ("exporter", "prometheus", "alertmanager", "cluster", "alerts")


def test_alerts_are_described_by_pod_and_gpu_when_they_have_them() -> None:
    from kube_gpu_exporter.demo.run import _describe

    assert _describe(("GPUAllocatedIdle", "lab", "nb", "1")) == "GPUAllocatedIdle lab/nb GPU 1"
    assert _describe(("KubeGpuExporterDown", "", "", "")) == "KubeGpuExporterDown"
