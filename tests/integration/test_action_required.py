"""nvidia_gpu_action_required through the real path: the exporter over the fake libnvidia-ml,
whose field 230 (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, what nvmlDeviceGetGpuRecoveryAction
answers) and row-remapper fields the scenario sets.

Each GPU's series say what it needs now in the Xid catalog's words, with the reading that asks;
"none" only where the recovery action was read; nothing where NVML cannot say (unknown, never
healthy), and nothing for a lost GPU. The actions change as the readings do.
"""

from __future__ import annotations

from pathlib import Path

from fakenvml import write_state
from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.exporter.simulated.scenario import Scenario
from support import Samples, run_exporter

REBOOT, PENDING, FINE, UNKNOWN, ASKS_UNREAD, LOST = (
    f"GPU-{n}{n}{n}{n}{n}{n}{n}{n}-0000-4000-8000-000000000000" for n in range(1, 7)
)
NODE = Scenario.parse(
    f"""
devices:
  - uuid: {REBOOT}
    readings: {{recovery_action: 2, row_remap_failed: 1}}
  - uuid: {PENDING}
    readings: {{recovery_action: 0, row_remap_pending: 1}}
    timeline: [{{at: 10, readings: {{row_remap_pending: 0}}}}]
  - uuid: {FINE}
    readings: {{recovery_action: 0}}
    timeline: [{{at: 10, readings: {{recovery_action: 1}}}}]
  - uuid: {UNKNOWN}
    unsupported: [recovery_action]
  - uuid: {ASKS_UNREAD}
    unsupported: [recovery_action]
    readings: {{row_remap_pending: 1}}
  - uuid: {LOST}
    readings: {{recovery_action: 1}}
    timeline: [{{at: 10, lost: true}}]
"""
)


def actions(body: Samples) -> dict[str, set[tuple[str, str]]]:
    """Per GPU uuid, its (action, source) series."""
    found: dict[str, set[tuple[str, str]]] = {}
    for (name, labels), value in body.items():
        if name == c.ACTION_REQUIRED.name:
            assert value == 1
            lab = dict(labels)
            found.setdefault(lab["uuid"], set()).add((lab["action"], lab["source"]))
    return found


def test_the_action_each_gpu_needs_now(nvml_env: dict[str, str], tmp_path: Path) -> None:
    state = Path(nvml_env["FAKE_NVML_STATE"])
    write_state(state, NODE.state_at(0))
    with run_exporter(["--collector.interval=1s"], tmp_path, env=nvml_env) as exporter:
        body = exporter.metrics_when(lambda b: bool(actions(b)), "the actions")
        assert actions(body) == {
            REBOOT: {("reboot", "recovery_action"), ("rma", "row_remap_failed")},
            PENDING: {("reset_gpu", "row_remap_pending")},
            FINE: {("none", "nvml")},
            ASKS_UNREAD: {("reset_gpu", "row_remap_pending")},
            LOST: {("reset_gpu", "recovery_action")},
        }  # UNKNOWN: no series at all
        write_state(state, NODE.state_at(10))
        body = exporter.metrics_when(
            lambda b: actions(b).get(PENDING) == {("none", "nvml")}, "the readings' change"
        )
        now = actions(body)
        assert now[FINE] == {("reset_gpu", "recovery_action")}
        assert UNKNOWN not in now and LOST not in now
