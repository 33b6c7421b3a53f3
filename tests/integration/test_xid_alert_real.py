"""A first Xid through the real path: the exporter over the fake libnvidia-ml (NVML's event
thread), Prometheus of both generations scraping it and evaluating the generated rules. No
Xid counter exists before the event; the counter appears at 1 and GPUXidErrors fires, by the
exporter's watch start read against Prometheus' own clock (the promtool cases hold the rest:
restarts, reboots, gaps)."""

from __future__ import annotations

import time
from pathlib import Path

from fakenvml import write_state
from kube_gpu_exporter.exporter.simulated.scenario import Scenario
from prometheus_server import Generation, run_prometheus
from support import run_exporter

RULES = Path(__file__).resolve().parents[2] / "deploy" / "rules.yaml"
NODE = Scenario.parse(
    """
devices:
  - uuid: GPU-11111111-0000-4000-8000-000000000000
    timeline: [{at: 10, xid: [109]}]
  - uuid: GPU-22222222-0000-4000-8000-000000000000
"""
)


def test_a_first_xid_fires_gpuxiderrors(
    nvml_env: dict[str, str], tmp_path: Path, generation: Generation
) -> None:
    state = Path(nvml_env["FAKE_NVML_STATE"])
    write_state(state, NODE.state_at(0))
    with (
        run_exporter(["--collector.interval=1s"], tmp_path, env=nvml_env) as exporter,
        run_prometheus(
            tmp_path, [f"127.0.0.1:{exporter.port}"], rule_files=[RULES], generation=generation
        ) as prom,
    ):
        prom.wait_for("kube_gpu_exporter_xid_watch_start_timestamp_seconds", count=1)
        assert prom.query("nvidia_gpu_xid_errors_total") == []  # no zeros served
        prom.evaluated_rules(since=time.time())  # else the next line holds before the rules
        assert prom.query('ALERTS{alertname="GPUXidErrors"}') == []
        write_state(state, NODE.state_at(10))
        (firing,) = prom.wait_for('ALERTS{alertname="GPUXidErrors", alertstate="firing"}')
        assert (firing["metric"]["gpu"], firing["metric"]["xid"]) == ("0", "109")
        assert prom.query("nvidia_gpu_xid_errors_total")[0]["value"] == 1
