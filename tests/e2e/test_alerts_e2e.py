"""Alerts end to end: the exporter → Prometheus with the generated rules → Alertmanager → a
webhook receiver in the test, all real processes, started by the demo's own stack, on both
Prometheus / Alertmanager generations (Debian's, and Prometheus 3 with a current Alertmanager).

The node is the fake libnvidia-ml under the real pynvml, so the test decides when the node
recovers: a fine-tuning job near a full framebuffer and a notebook idling on a whole GPU fire
`GPUMemoryNearFull` (with the holding pod's namespace and name) and `GPUAllocatedIdle` (with
the workload, its GPU listed in the description), nothing else fires, and both resolve once the
memory drops and the notebook starts working.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fakenvml import write_state
from kube_gpu_exporter.demo.monitoring import Monitoring
from kube_gpu_exporter.demo.stack import Ports, Stack, StackSpec
from kube_gpu_exporter.exporter.simulated.scenario import Scenario
from kube_gpu_exporter.rules.config import parse_config
from prometheus_server import BUILT, Generation
from support import free_port, wait_until
from webhook_receiver import Webhook, key

FINETUNE_GPU = "GPU-e2e00000-0000-4000-8000-000000000000"
NOTEBOOK_GPU = "GPU-e2e00001-0000-4000-8000-000000000001"
RECOVERED_AT = 1000.0  # scenario time of the recovered state; the test writes it when ready
SCENARIO = f"""
devices:
  - uuid: {FINETUNE_GPU}
    readings: {{utilization: 0.6, memory_used_bytes: 78GiB, temperature_celsius: 61,
               power_watts: 420}}
    processes: [{{pid: 7001, used_memory_bytes: 78GiB, sm_utilization: 0.6}}]
    timeline:
      - {{at: {RECOVERED_AT}, readings: {{memory_used_bytes: 30GiB}},
         processes: [{{pid: 7002, used_memory_bytes: 30GiB, sm_utilization: 0.6}}]}}
  - uuid: {NOTEBOOK_GPU}
    readings: {{utilization: 0.0, memory_used_bytes: 2GiB, temperature_celsius: 35,
               power_watts: 70}}
    processes: [{{pid: 7101, used_memory_bytes: 2GiB}}]
    timeline:
      - {{at: {RECOVERED_AT}, readings: {{utilization: 0.85}},
         processes: [{{pid: 7101, used_memory_bytes: 2GiB, sm_utilization: 0.85}}]}}
kubelet:
  pods:
    - {{namespace: ml, name: finetune-llama, container: trainer, device: 0}}
    - {{namespace: lab, name: notebook-alice, container: jupyter, device: 1}}
"""
# The default thresholds with the two alerts' `for` shortened, as the demo does, and the idle
# window shortened so that the notebook's work shows in its mean within seconds.
THRESHOLDS = """
alerts:
  GPUAllocatedIdle: {for: 5s, window: 20s, keep_firing_for: 0s}
  GPUMemoryNearFull: {for: 5s}
"""
EXPECTED = {
    ("GPUMemoryNearFull", "ml", "finetune-llama", FINETUNE_GPU),
    ("GPUAllocatedIdle", "lab", "notebook-alice", ""),  # a workload's: its GPUs are listed
}
WAIT = 120.0  # rules need `for` plus a few evaluation and notification rounds


@pytest.fixture
def webhook() -> Iterator[Webhook]:
    hook = Webhook()
    yield hook
    hook.close()


def test_alerts_reach_alertmanager_and_resolve(
    tmp_path: Path, fake_nvml_dir: Path, webhook: Webhook, generation: Generation
) -> None:
    scenario_path = tmp_path / "node.yaml"
    scenario_path.write_text(SCENARIO)
    node = Scenario.load(scenario_path)
    state = tmp_path / "nvml-state"
    write_state(state, node.state_at(0))
    spec = StackSpec(
        scenario=scenario_path,
        thresholds=parse_config(THRESHOLDS),
        workdir=tmp_path / "stack",
        ports=Ports(free_port(), free_port(), free_port()),
        interval="1s",
        webhook_url=webhook.url,
        exporter_args=[],  # the NVML backend, over the fake library
        exporter_env={"LD_LIBRARY_PATH": str(fake_nvml_dir), "FAKE_NVML_STATE": str(state)},
        monitoring=Monitoring(
            generation.prometheus, generation.alertmanager, built=generation.name == BUILT
        ),
    )
    with Stack(spec) as stack:
        wait_until(lambda: webhook.alerts("firing") >= EXPECTED, WAIT, "both alerts to fire")
        # Nothing else fires: not the exporter's health, not the node-capacity alerts.
        assert webhook.alerts("firing") == EXPECTED
        assert {key(a["labels"]) for a in stack.alerts()} == EXPECTED
        idle = next(a for a in stack.alerts() if a["labels"]["alertname"] == "GPUAllocatedIdle")
        assert f"[GPU 1 {NOTEBOOK_GPU} on " in idle["annotations"]["description"]

        write_state(state, node.state_at(RECOVERED_AT))
        wait_until(lambda: webhook.alerts("resolved") >= EXPECTED, WAIT, "both to resolve")
        assert webhook.alerts("resolved") == EXPECTED
        assert webhook.alerts("firing") == EXPECTED
        assert stack.alerts() == []
        assert stack.exited() is None
        log = stack.log("exporter")
    assert "Traceback" not in log
