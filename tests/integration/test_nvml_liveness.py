"""The exporter process while NVML hangs, and how it stops, over the fake libnvidia-ml.

A driver can leave every NVML call stuck in the kernel (a GPU falling off the bus, a driver
upgrade under load). The exporter must then say so (`/readyz` 503, `nvml_up` 0, a `stalled`
error) while still serving its last data, recover when the call returns, and stop on SIGTERM
within the DaemonSet's grace period whatever NVML does. Bounds are generous: these run on
loaded two-core CI machines; what is asserted is the outcome, not a tight duration.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

from fakenvml import write_state
from kube_gpu_exporter.exporter.simulated.scenario import Scenario
from support import run_exporter, values, wait_until

GPU = "GPU-11111111-0000-4000-8000-000000000000"
# One A100 split into seven 1g.10gb instances, where a healthy shutdown was once reported slow.
MIG_NODE = Scenario.parse(
    f"""
devices:
  - uuid: {GPU}
    name: NVIDIA A100-SXM4-80GB
    mig:
"""
    + "".join(
        f"      - {{profile: 1g.10gb, gpu_instance_id: {7 + slot}, memory_total_bytes: 9984MiB,"
        f" uuid: MIG-{slot}0000000-0000-4000-8000-000000000000}}\n"
        for slot in range(7)
    )
)
# SIGTERM must end the process within the DaemonSet's 15 s grace period; the exporter aims
# for 5 s. The test allows more than that for a loaded machine, but far less than the 30 s+
# a hung call used to hold the process for.
EXIT_BOUND_SECONDS = 10.0


def _terminate(proc: subprocess.Popen[str]) -> tuple[int | None, float]:
    """SIGTERM `proc`; its exit code (None if still alive after the bound) and the seconds."""
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        code: int | None = proc.wait(timeout=EXIT_BOUND_SECONDS)
    except subprocess.TimeoutExpired:
        code = None
    return code, time.monotonic() - started


def test_a_hung_nvml_is_reported_stalled_then_recovers(
    nvml_env: dict[str, str], tmp_path: Path
) -> None:
    state = Path(nvml_env["FAKE_NVML_STATE"])
    write_state(state, MIG_NODE.state_at(0))
    args = ["--collector.interval=500ms", "--collector.stall-timeout=2s"]
    with run_exporter(args, tmp_path, env=nvml_env) as exporter:
        before = exporter.metrics()
        assert values(before, "kube_gpu_exporter_collection_errors_total", kind="stalled") == [0]
        assert values(before, "kube_gpu_exporter_nvml_up") == [1]

        write_state(state, MIG_NODE.state_at(0), hang=True)
        wait_until(lambda: exporter.get("/readyz")[0] == 503, timeout=20, what="not ready")
        hung = exporter.metrics()
        assert values(hung, "kube_gpu_exporter_nvml_up") == [0]
        assert values(hung, "kube_gpu_exporter_collection_errors_total", kind="stalled") == [1]
        # The last snapshot is still served, its age visible as before.
        assert len(values(hung, "nvidia_gpu_up")) == 8
        last = values(hung, "kube_gpu_exporter_last_collection_success_timestamp_seconds")[0]
        assert time.time() - last >= 2
        assert exporter.get("/healthz")[0] == 200  # restarting the pod would not help
        time.sleep(1.5)  # still stuck: counted once per stall, not once per check
        assert values(
            exporter.metrics(), "kube_gpu_exporter_collection_errors_total", kind="stalled"
        ) == [1]

        write_state(state, MIG_NODE.state_at(0))
        wait_until(lambda: exporter.get("/readyz")[0] == 200, timeout=20, what="ready again")
        after = exporter.metrics()
        assert values(after, "kube_gpu_exporter_nvml_up") == [1]
        assert values(after, "kube_gpu_exporter_collection_errors_total", kind="stalled") == [1]
        log = exporter.log()
    assert "NVML has not answered" in log and "NVML answers again" in log
    assert "Traceback" not in log


def test_a_stall_before_the_first_answer_is_reported_too(
    nvml_env: dict[str, str], tmp_path: Path
) -> None:
    # nvmlInit itself never returns: no snapshot yet, still nvml_up 0 and a stalled error.
    write_state(Path(nvml_env["FAKE_NVML_STATE"]), MIG_NODE.state_at(0), hang=True)
    args = ["--collector.interval=500ms", "--collector.stall-timeout=1s"]
    with run_exporter(args, tmp_path, env=nvml_env, wait_ready=False) as exporter:
        wait_until(lambda: exporter.get()[0] == 200, timeout=20, what="a stalled exposition")
        parsed = exporter.metrics()
        assert values(parsed, "kube_gpu_exporter_nvml_up") == [0]
        assert values(parsed, "kube_gpu_exporter_collection_errors_total", kind="stalled") == [1]
        assert exporter.get("/readyz")[0] == 503
        code, _ = _terminate(exporter.proc)
    assert code == 0


def test_sigterm_with_every_nvml_call_hung_exits_promptly(
    nvml_env: dict[str, str], tmp_path: Path
) -> None:
    state = Path(nvml_env["FAKE_NVML_STATE"])
    write_state(state, MIG_NODE.state_at(0))
    with run_exporter(["--collector.interval=500ms"], tmp_path, env=nvml_env) as exporter:
        write_state(state, MIG_NODE.state_at(0), hang=True)
        time.sleep(1.5)  # a cycle and the Xid thread are now stuck inside NVML
        code, seconds = _terminate(exporter.proc)
        log = exporter.log()
    assert code == 0, f"exit {code} after {seconds:.1f}s:\n{log[-2000:]}"
    assert "NVML did not shut down" in log


def test_sigterm_with_a_healthy_nvml_shuts_it_down_cleanly(
    nvml_env: dict[str, str], tmp_path: Path
) -> None:
    write_state(Path(nvml_env["FAKE_NVML_STATE"]), MIG_NODE.state_at(0))
    with run_exporter(["--collector.interval=1s"], tmp_path, env=nvml_env) as exporter:
        wait_until(
            lambda: values(exporter.metrics(), "kube_gpu_exporter_collections_total")[0] >= 2,
            what="two cycles",
        )
        code, seconds = _terminate(exporter.proc)
        log = exporter.log()
    assert code == 0, f"exit {code} after {seconds:.1f}s:\n{log[-2000:]}"
    assert "did not shut down" not in log and "exiting anyway" not in log
    assert "NVML shut down" in log
