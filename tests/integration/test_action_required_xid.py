"""Xids as a source of nvidia_gpu_action_required, through the real path: `serve` over the
real pynvml and the fake libnvidia-ml, whose Xid events the scenario raises.

An Xid the catalog answers with a reset or a reboot makes its GPU's action that one (source
`xid`, the code as `xid`), with the unix time the exporter saw it in
nvidia_gpu_action_required_since_timestamp_seconds; an application's Xid holds nothing. The
action is held, with its time, until the GPU shows it was acted on: lost and answering again
(a reset), or a new NVML session (a reloaded driver, which delivers no old event).
"""

from __future__ import annotations

import time
from pathlib import Path

import pynvml

from fakenvml import write_state
from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.exporter.simulated.scenario import Scenario
from support import Samples, run_exporter

RESET, REBOOT, APP = (
    f"GPU-{n}{n}{n}{n}{n}{n}{n}{n}-0000-4000-8000-000000000000" for n in (1, 2, 3)
)
NODE = Scenario.parse(
    f"""
devices:
  - uuid: {RESET}
    readings: {{recovery_action: 0}}
    timeline:
      - {{at: 10, xid: [109, 13]}}
      - {{at: 20, lost: true}}
      - {{at: 30, lost: false}}
  - uuid: {REBOOT}
    readings: {{recovery_action: 0}}
    timeline: [{{at: 10, xid: [79]}}]
  - uuid: {APP}
    readings: {{recovery_action: 0}}
    timeline: [{{at: 10, xid: [13, 43]}}]
"""
)
Series = tuple[str, str, str]  # action, source, xid ("" where none)


def actions(body: Samples) -> dict[str, dict[Series, float | None]]:
    """Per GPU uuid, its series and their "since" (None where none is served)."""
    found: dict[str, dict[Series, float | None]] = {}
    since: dict[tuple[str, Series], float] = {}
    for (name, labels), value in body.items():
        lab = dict(labels)
        key = (lab.get("action", ""), lab.get("source", ""), lab.get("xid", ""))
        if name == c.ACTION_REQUIRED.name:
            assert value == 1
            found.setdefault(lab["uuid"], {})[key] = None
        elif name == c.ACTION_REQUIRED_SINCE.name:
            since[(lab["uuid"], key)] = value
    for (uuid, key), value in since.items():
        assert key in found.get(uuid, {}), f"a since without its series: {uuid} {key}"
        found[uuid][key] = value
    return found


def test_an_xid_asks_until_its_gpu_is_reset(nvml_env: dict[str, str], tmp_path: Path) -> None:
    state = Path(nvml_env["FAKE_NVML_STATE"])
    write_state(state, NODE.state_at(0))
    with run_exporter(["--collector.interval=1s"], tmp_path, env=nvml_env) as exporter:
        body = exporter.metrics_when(lambda b: len(actions(b)) == 3, "every GPU's action")
        none = ("none", "nvml", "")
        assert all(set(a) == {none} for a in actions(body).values())
        assert all(since is not None for a in actions(body).values() for since in a.values())

        before = time.time()
        write_state(state, NODE.state_at(10))
        body = exporter.metrics_when(
            lambda b: none not in actions(b)[RESET] and none not in actions(b)[REBOOT],
            "the Xids' actions",
        )
        after = time.time()
        now = actions(body)
        reset, reboot = ("reset_gpu", "xid", "109"), ("reboot", "xid", "79")
        assert set(now[RESET]) == {reset}  # 13 (the application's) holds nothing
        assert set(now[REBOOT]) == {reboot}
        assert set(now[APP]) == {none}
        reset_since, reboot_since = now[RESET][reset], now[REBOOT][reboot]
        assert reset_since is not None and before <= reset_since <= after + 1
        assert reboot_since is not None and before <= reboot_since <= after + 1

        # Nothing new: still asked, since the same time, cycles later
        seen = body[(c.COLLECTIONS.name, frozenset())]
        body = exporter.metrics_when(
            lambda b: b[(c.COLLECTIONS.name, frozenset())] > seen + 1, "two cycles later"
        )
        assert actions(body) == now

        # GPU 1 is lost, then answers again: it was reset, it owes nothing
        write_state(state, NODE.state_at(20))
        exporter.metrics_when(lambda b: RESET not in actions(b), "the lost GPU's silence")
        write_state(state, NODE.state_at(30))
        body = exporter.metrics_when(lambda b: RESET in actions(b), "the GPU back")
        assert set(actions(body)[RESET]) == {none}
        assert actions(body)[REBOOT] == {reboot: reboot_since}

        # The driver is replaced under the exporter: NVML re-initialises, and the new driver
        # delivers no event from before it (the state file's Xid list starts over)
        mismatch = {
            (index, "nvmlDeviceGetMemoryInfo_v2"): pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH
            for index in range(3)
        }
        write_state(state, NODE.state_at(30), errors=mismatch)
        exporter.metrics_when(lambda b: not actions(b), "NVML down")
        write_state(state, NODE.state_at(0))
        body = exporter.metrics_when(lambda b: len(actions(b)) == 3, "NVML back")
        assert all(set(a) == {none} for a in actions(body).values())
