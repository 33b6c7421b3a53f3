"""The exporter over the fake libnvidia-ml and a fake sysfs: the GPUs on the PCI bus served
beside NVML's count, an unreadable sysfs that leaves only that series absent, and GPUMissing
firing in Debian's Prometheus from the generated rule."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml
from fake_sysfs import NODE_GPUS, add_function, bus, remove_function, write_sysfs

import support
from fakenvml import write_state
from kube_gpu_exporter.exporter.simulated.scenario import Scenario
from kube_gpu_exporter.rules.alerts.node_devices import GPU_MISSING
from kube_gpu_exporter.rules.config import parse_config
from kube_gpu_exporter.rules.promql import Query
from kube_gpu_exporter.rules.render import rule_dict
from prometheus_server import Generation, run_prometheus
from support import free_port, run_exporter, values, wait_until

# Two GPUs in NVML; the fake bus has NODE_GPUS (2) of them and the test adds a third.
NVML = Scenario.parse(
    """
devices:
  - uuid: GPU-11111111-0000-4000-8000-000000000000
  - uuid: GPU-22222222-0000-4000-8000-000000000000
"""
)
THIRD = "0000:9a:00.0"


@pytest.fixture
def nvml_env(nvml_env: dict[str, str]) -> dict[str, str]:
    """conftest's, with the state written."""
    write_state(Path(nvml_env["FAKE_NVML_STATE"]), NVML.state_at(0))
    return nvml_env


def test_served_beside_nvml_and_absent_while_sysfs_is_unreadable(
    nvml_env: dict[str, str], tmp_path: Path
) -> None:
    sysfs = write_sysfs(tmp_path / "sys")
    add_function(sysfs, THIRD, "0x10de", "0x030200")  # on the bus, not in NVML
    args = ["--collector.interval=0.2s", f"--path.sysfs={sysfs}"]
    with run_exporter(args, tmp_path, env=nvml_env) as exporter:
        parsed = exporter.metrics()
        assert values(parsed, "nvidia_gpu_node_pci_gpus") == [NODE_GPUS + 1]
        assert values(parsed, "nvidia_gpu_node_driver_gpus") == [2]
        errors = "kube_gpu_exporter_collection_errors_total"
        assert values(parsed, errors, kind="sysfs") == [0]

        moved = tmp_path / "devices-moved"
        bus(sysfs).rename(moved)
        wait_until(
            lambda: not values(exporter.metrics(), "nvidia_gpu_node_pci_gpus"),
            what="the PCI count to go absent",
        )
        parsed = exporter.metrics()
        assert values(parsed, errors, kind="sysfs")[0] >= 1
        assert values(parsed, "nvidia_gpu_up") == [1, 1]  # NVML's series unaffected
        assert exporter.get("/readyz")[0] == 200

        moved.rename(bus(sysfs))
        remove_function(sysfs, THIRD)
        wait_until(
            lambda: values(exporter.metrics(), "nvidia_gpu_node_pci_gpus") == [NODE_GPUS],
            what="the PCI count back, one GPU fewer",
        )
        log = exporter.log()
    assert log.count("cannot list PCI devices under") == 1
    assert "PCI devices readable again" in log
    assert "Traceback" not in log


def test_off_with_an_empty_path(nvml_env: dict[str, str], tmp_path: Path) -> None:
    with run_exporter(["--path.sysfs="], tmp_path, env=nvml_env) as exporter:
        parsed = exporter.metrics()
    assert values(parsed, "nvidia_gpu_node_pci_gpus") == []
    assert values(parsed, "kube_gpu_exporter_collection_errors_total", kind="sysfs") == []


def test_gpu_missing_fires_in_prometheus_from_the_generated_rule(
    nvml_env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    generation: Generation,
) -> None:
    """A GPU on the bus that NVML does not list fires (a); after a restart that finds it gone
    from both, the drop in NVML's count keeps it firing (b) for the window."""
    cfg = parse_config("alerts: {GPUMissing: {for: 0m, window: 10m}}")
    rule = GPU_MISSING.alert(Query(cfg))
    rules = tmp_path / "rules.yaml"
    group = {"name": "kube-gpu-exporter.nodes", "rules": [rule_dict(cfg, rule)]}
    rules.write_text(yaml.safe_dump({"groups": [group]}))
    sysfs = write_sysfs(tmp_path / "sys")
    args = ["--collector.interval=0.2s", f"--path.sysfs={sysfs}"]
    port = free_port()
    monkeypatch.setattr(support, "free_port", lambda: port)  # the restart keeps the target
    firing = 'ALERTS{alertname="GPUMissing", alertstate="firing"}'
    with run_prometheus(
        tmp_path, [f"127.0.0.1:{port}"], rule_files=[rules], generation=generation
    ) as prom:
        with run_exporter(args, tmp_path, env=nvml_env):
            prom.wait_for("nvidia_gpu_node_pci_gpus == nvidia_gpu_node_driver_gpus")
            prom.evaluated_rules(since=time.time())  # the rule has read the equal counts
            assert prom.query('ALERTS{alertname="GPUMissing"}') == []  # nothing missing
            add_function(sysfs, THIRD, "0x10de", "0x030200")  # (a): on the bus, not in NVML
            alert = prom.wait_for(firing)[0]["metric"]
            assert (alert["instance"], alert["severity"]) == (f"127.0.0.1:{port}", "warning")

        # The node comes back with one GPU in NVML and one on the bus: only (b) holds.
        write_state(Path(nvml_env["FAKE_NVML_STATE"]), Scenario.parse("devices: [{}]").state_at(0))
        remove_function(sysfs, THIRD)
        remove_function(sysfs, "0000:2a:00.0")
        with run_exporter(args, tmp_path, env=nvml_env):
            prom.wait_for("nvidia_gpu_node_pci_gpus == 1 and nvidia_gpu_node_driver_gpus == 1")
            assert [r["value"] for r in prom.wait_for(rule.expr)] == [1]  # (b): 2 → 1
            prom.wait_for(firing)  # by the rule's next evaluation
