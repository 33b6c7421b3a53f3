"""The exporter process over the fake libnvidia-ml, scraped by Debian's real Prometheus."""

from __future__ import annotations

from pathlib import Path

from fakenvml import write_state
from kube_gpu_exporter.exporter.simulated.scenario import Scenario
from prometheus_server import Generation, run_prometheus
from support import run_exporter, values, wait_until

NODE = Scenario.parse(
    """
devices:
  - uuid: GPU-11111111-0000-4000-8000-000000000000
    readings: {utilization: 0.75, memory_used_bytes: 3GiB, temperature_celsius: 66}
    timeline: [{at: 10, lost: true}, {at: 10, xid: [79]}]
  - uuid: GPU-22222222-0000-4000-8000-000000000000
    name: NVIDIA A100-SXM4-40GB
    mig:
      - {profile: 3g.20gb, gpu_instance_id: 1, uuid: MIG-33333333-0000-4000-8000-000000000000,
         memory_total_bytes: 19968MiB, readings: {memory_used_bytes: 12GiB}}
  - uuid: GPU-55555555-0000-4000-8000-000000000000
    unsupported: [power_watts]
    readings: {utilization: 0.5, temperature_celsius: 40}
"""
)
GPU0 = "GPU-11111111-0000-4000-8000-000000000000"


def test_prometheus_scrapes_every_gpu_and_sees_a_gpu_lost(
    nvml_env: dict[str, str], tmp_path: Path, generation: Generation
) -> None:
    state = Path(nvml_env["FAKE_NVML_STATE"])
    write_state(state, NODE.state_at(0))
    with (
        run_exporter(["--collector.interval=1s"], tmp_path, env=nvml_env) as exporter,
        run_prometheus(tmp_path, [f"127.0.0.1:{exporter.port}"], generation=generation) as prom,
    ):
        up = prom.wait_for("nvidia_gpu_up == 1", count=4)
        assert {r["metric"]["uuid"] for r in up} == {
            GPU0,
            "GPU-22222222-0000-4000-8000-000000000000",
            "MIG-33333333-0000-4000-8000-000000000000",
            "GPU-55555555-0000-4000-8000-000000000000",
        }
        util = prom.query("nvidia_gpu_utilization_ratio")
        assert {r["metric"]["uuid"]: r["value"] for r in util} == {
            GPU0: 0.75,
            "GPU-55555555-0000-4000-8000-000000000000": 0.5,
        }
        mig = prom.query('nvidia_gpu_memory_used_bytes{uuid=~"MIG-.*"}')
        assert mig[0]["value"] == 12 * 2**30
        assert mig[0]["metric"]["parent_uuid"] == "GPU-22222222-0000-4000-8000-000000000000"
        info = prom.query('nvidia_gpu_info{mig_profile="3g.20gb"}')
        assert info[0]["metric"]["model"] == "NVIDIA A100-SXM4-40GB"
        assert prom.query('nvidia_gpu_power_watts{gpu="2"}') == []  # unsupported: absent
        assert prom.query('up{job="kube-gpu-exporter"}')[0]["value"] == 1

        write_state(state, NODE.state_at(10))
        prom.wait_for(f'nvidia_gpu_up{{uuid="{GPU0}"}} == 0')
        prom.wait_for(f'nvidia_gpu_xid_errors_total{{uuid="{GPU0}", xid="79"}} == 1')
        wait_until(
            lambda: not prom.query(f'nvidia_gpu_temperature_celsius{{uuid="{GPU0}"}}'),
            what="the lost GPU's temperature to go stale",
        )
        others = prom.query("nvidia_gpu_temperature_celsius")
        assert {r["metric"]["gpu"] for r in others} == {"1", "2"}
        assert prom.query('kube_gpu_exporter_collection_errors_total{kind="gpu_is_lost"} > 0')


def test_driver_missing_at_start_then_loaded(nvml_env: dict[str, str], tmp_path: Path) -> None:
    # No state file yet: the fake answers DRIVER_NOT_LOADED, as a node before its driver is up.
    with run_exporter(["--collector.interval=1s"], tmp_path, env=nvml_env, wait_ready=False) as exp:
        wait_until(lambda: exp.get()[0] == 200, what="first collection")
        assert exp.get("/readyz")[0] == 503
        assert values(exp.metrics(), "kube_gpu_exporter_nvml_up") == [0]
        assert values(exp.metrics(), "nvidia_gpu_up") == []
        write_state(Path(nvml_env["FAKE_NVML_STATE"]), NODE.state_at(0))
        wait_until(lambda: exp.get("/readyz")[0] == 200, timeout=20, what="readiness after retry")
        assert values(exp.metrics(), "kube_gpu_exporter_nvml_up") == [1]
        log = exp.log()
    assert "NVML unavailable" in log and "Driver Not Loaded" in log
    assert "Traceback" not in log


def test_no_nvml_library_at_all(tmp_path: Path) -> None:
    env = {"LD_LIBRARY_PATH": str(tmp_path)}  # no libnvidia-ml.so.1 anywhere
    with run_exporter(["--collector.interval=1s"], tmp_path, env=env, wait_ready=False) as exp:
        wait_until(lambda: exp.get()[0] == 200, what="first collection")
        assert exp.get("/readyz")[0] == 503 and exp.get("/healthz")[0] == 200
        assert values(exp.metrics(), "kube_gpu_exporter_nvml_up") == [0]
        assert (
            values(exp.metrics(), "kube_gpu_exporter_collection_errors_total", kind="init")[0] >= 1
        )
        log = exp.log()
    assert "NVML unavailable: NVML Shared Library Not Found" in log
    assert "Traceback" not in log
