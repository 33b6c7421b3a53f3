"""Bad input ends in one clear line and exit status 2; the simulated node serves for real."""

from __future__ import annotations

import gzip
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from support import exporter_command, run_exporter, values, wait_until

DEMO = str(Path(__file__).parents[2] / "exporter" / "simulated" / "scenarios" / "demo.yaml")


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(exporter_command(*args), capture_output=True, text=True, timeout=30)


def assert_usage_error(result: subprocess.CompletedProcess[str], message: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert message in lines[0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["serve", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        (["serve", "--web.listen-address=nonsense"], "not a listen address: 'nonsense'"),
        (["serve", "--web.listen-address=:70000"], "not a listen address: ':70000'"),
        (["serve", "--collector.interval=0s"], "must be positive"),
        (["serve", "--collector.interval=often"], "not a duration"),
        (["serve", "--web.telemetry-path=metrics"], "must start with '/'"),
        (["serve", "--path.sysfs=/no/such/sys"], "not a directory: '/no/such/sys'"),
        (["serve", "--log.level=loud"], "invalid choice: 'loud'"),
        (["bogus"], "invalid choice: 'bogus'"),
        ([], "required: command"),
    ],
)
def test_bad_flags(args: list[str], message: str) -> None:
    assert_usage_error(run_cli(*args), message)


def test_bad_scenario_file(tmp_path: Path) -> None:
    scenario = tmp_path / "bad.yaml"
    scenario.write_text("devices: [{readings: {utilization: 7}}]\n")
    result = run_cli("serve", "--simulate", str(scenario))
    assert_usage_error(result, f"{scenario}: devices[0].readings.utilization")
    assert_usage_error(run_cli("serve", "--simulate", str(tmp_path / "nope.yaml")), "cannot read")


def test_unreadable_and_invalid_web_config(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yml"
    assert_usage_error(run_cli("serve", f"--web.config.file={missing}"), str(missing))
    invalid = tmp_path / "web.yml"
    invalid.write_text(
        "tls_server_config: {cert_file: /nonexistent.crt, key_file: /nonexistent.key}\n"
    )
    assert_usage_error(run_cli("serve", f"--web.config.file={invalid}"), "cert_file")
    invalid.write_text("basic_auth_userz: {}\n")
    assert_usage_error(run_cli("serve", f"--web.config.file={invalid}"), "basic_auth_userz")


def test_bad_kubernetes_config(tmp_path: Path) -> None:
    missing = tmp_path / "kubeconfig"
    base = ["serve", "--simulate", DEMO, "--kubernetes.enabled"]
    result = run_cli(*base, f"--kubernetes.kubeconfig={missing}", "--kubernetes.node-name=n1")
    assert_usage_error(result, str(missing))
    missing.write_text("::: not yaml")
    result = run_cli(*base, f"--kubernetes.kubeconfig={missing}", "--kubernetes.node-name=n1")
    assert_usage_error(result, "kubeconfig")
    result = run_cli(*base, f"--kubernetes.kubeconfig={missing}", "--kubernetes.node-name=")
    assert_usage_error(result, "node")


def test_port_in_use() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_cli("serve", "--simulate", DEMO, f"--web.listen-address=127.0.0.1:{port}")
    assert_usage_error(result, f"cannot listen on 127.0.0.1:{port}")


def test_simulated_node_serves_metrics_landing_and_probes(tmp_path: Path) -> None:
    with run_exporter(["--simulate", DEMO, "--collector.interval=1s"], tmp_path) as exporter:
        parsed = exporter.metrics()
        assert values(parsed, "nvidia_gpu_utilization_ratio", gpu="0") == [0.93]
        assert len(values(parsed, "nvidia_gpu_info")) == 5 + 3
        assert values(parsed, "kube_gpu_exporter_nvml_up") == [1]

        status, headers, body = exporter.get("/metrics", **{"Accept-Encoding": "gzip"})
        assert status == 200 and headers["Content-Encoding"] == "gzip"
        assert b"nvidia_gpu_up" in gzip.decompress(body)

        accept = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
        status, headers, body = exporter.get("/metrics", Accept=accept)
        assert headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
        assert body.endswith(b"# EOF\n")
        assert exporter.get("/metrics")[1]["Content-Type"].startswith("text/plain; version=0.0.4")

        status, _, page = exporter.get("/")
        assert status == 200 and b"NVIDIA A100-SXM4-40GB" in page and b"3g.20gb" in page
        assert exporter.get("/healthz")[0] == 200
        assert exporter.get("/readyz")[0] == 200
        assert exporter.get("/nope")[0] == 404

        collections = values(exporter.metrics(), "kube_gpu_exporter_collections_total")[0]
        wait_until(
            lambda: (
                values(exporter.metrics(), "kube_gpu_exporter_collections_total")[0] > collections
            ),
            what="another collection cycle",
        )


def test_sigterm_shuts_down_cleanly(tmp_path: Path) -> None:
    with run_exporter(["--simulate", DEMO], tmp_path) as exporter:
        exporter.proc.send_signal(signal.SIGTERM)
        assert exporter.proc.wait(timeout=10) == 0
        log = exporter.log()
    assert "shutting down" in log and "Traceback" not in log


def test_json_logs(tmp_path: Path) -> None:
    import json

    with run_exporter(["--simulate", DEMO, "--log.format=json"], tmp_path) as exporter:
        first = exporter.log().splitlines()[0]
    record = json.loads(first)
    assert record["level"] == "info" and "serving on" in record["msg"]
