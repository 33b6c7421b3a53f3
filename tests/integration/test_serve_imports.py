"""`serve` loads only what serving needs: a node's exporter starts in the time and memory of
its imports, so every module another command uses (the generator, the report, the demo, the
cluster view, the rules and dashboards) or only a flag turns on (pydantic for a web config or
a scenario, gRPC for the kubelet, the Kubernetes client) must stay out of a plain `serve`.
With attribution on, the kubelet's gRPC is grpclib's (pure Python on asyncio), never grpcio's
C core, and its answers are read by exporter/kubelet/wire.py, without the protobuf runtime:
the two cost every node's exporter ~13 MiB more to import.

The exporter runs over the fake libnvidia-ml in a wrapper that lists `sys.modules` once
/metrics has answered with the GPUs in it, i.e. after serving and collecting have both run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from fakenvml import write_state
from kube_gpu_exporter.exporter.simulated.scenario import Scenario
from support import free_port, http_get, wait_until

NODE = Scenario.parse(
    """
devices:
  - uuid: GPU-11111111-0000-4000-8000-000000000000
    readings: {utilization: 0.5}
"""
)

# Module prefixes a plain `serve` (NVML, attribution off) must not load.
NOT_SERVING = (
    "kube_gpu_exporter.rules",
    "kube_gpu_exporter.grafana",
    "kube_gpu_exporter.demo",
    "kube_gpu_exporter.exporter.cluster",
    "kube_gpu_exporter.exporter.cluster_app",
    "kube_gpu_exporter.exporter.generate",
    "kube_gpu_exporter.exporter.report",
    "kube_gpu_exporter.exporter.simulated",
    "kube_gpu_exporter.exporter.kubernetes",
    "kube_gpu_exporter.exporter.serve.web_config_schema",
    "kubernetes",
    "pydantic",
    "pydantic_core",
    "yaml",
    "grpc",
    "grpclib",
    "h2",
    "hpack",
    "hyperframe",
    "multidict",
    "google.protobuf",
    "re2",
    "jinja2",
    "matplotlib",
    "bcrypt",
    "aiohttp",  # the server is httpd/'s own; aiohttp is a test client only
)

# Lists sys.modules into argv[1] once the file argv[2] exists (or at exit), then runs the CLI.
WRAPPER = """
import os, sys, threading, time, atexit
out, flag, *argv = sys.argv[1:]
def dump():
    with open(out, "w") as f:
        f.write("\\n".join(sorted(sys.modules)))
def wait():
    while not os.path.exists(flag):
        time.sleep(0.02)
    dump()
threading.Thread(target=wait, daemon=True).start()
atexit.register(dump)
from kube_gpu_exporter.exporter.cli import main
sys.exit(main(argv))
"""


# Loaded under a prefix above, and allowed: the --kubeconfig / --context flags that `serve`
# shares with `cluster` (standard library only), in the kubernetes package's empty __init__.
FLAGS_ONLY = frozenset(
    {
        "kube_gpu_exporter.exporter.kubernetes",
        "kube_gpu_exporter.exporter.kubernetes.kubeconfig_choice",
    }
)


def _loaded(modules: Path, prefixes: Sequence[str]) -> list[str]:
    names = set(modules.read_text().split()) - FLAGS_ONLY
    return sorted(n for n in names if any(n == p or n.startswith(p + ".") for p in prefixes))


def _serve_modules(tmp_path: Path, env: dict[str, str], *args: str) -> Path:
    """The modules of a running `serve` over the fake NVML, once /metrics names its GPU."""
    port = free_port()
    out, flag = tmp_path / "modules", tmp_path / "dump-now"
    argv = ["serve", f"--web.listen-address=127.0.0.1:{port}", *args]
    log = (tmp_path / "serve.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-c", WRAPPER, str(out), str(flag), *argv],
        env={**os.environ, **env},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:

        def served() -> bool:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()
            status, _, body = http_get(f"http://127.0.0.1:{port}/metrics", {})
            return status == 200 and b"GPU-11111111" in body

        wait_until(lambda: _quiet(served), what="serve's /metrics with the GPU")
        flag.touch()
        wait_until(lambda: out.exists() and out.stat().st_size > 0, what="the module list")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
        log.close()
    return out


def _quiet(check: object) -> bool | None:
    try:
        return bool(check()) or None  # type: ignore[operator]
    except OSError:
        return None


@pytest.fixture
def nvml_env(nvml_env: dict[str, str]) -> dict[str, str]:
    """conftest's, with the state written."""
    write_state(Path(nvml_env["FAKE_NVML_STATE"]), NODE.state_at(0))
    return nvml_env


def test_serve_loads_only_what_serving_needs(nvml_env: dict[str, str], tmp_path: Path) -> None:
    modules = _serve_modules(
        tmp_path, nvml_env, "--collector.interval=1s", "--kubelet.pod-resources-socket="
    )
    assert "pynvml" in modules.read_text().split()  # the wrapper saw a serving exporter
    assert _loaded(modules, NOT_SERVING) == []


def test_serve_help_loads_no_other_command(tmp_path: Path) -> None:
    out = tmp_path / "modules"
    result = subprocess.run(
        [sys.executable, "-c", WRAPPER, str(out), str(tmp_path / "never"), "serve", "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "--collector.interval" in result.stdout
    assert _loaded(out, NOT_SERVING) == []


def test_attribution_loads_grpclib_and_never_grpcio_or_protobuf(
    nvml_env: dict[str, str], tmp_path: Path
) -> None:
    """The test's kubelet socket need not answer: the client is built as serve starts."""
    socket = tmp_path / "kubelet.sock"
    modules = _serve_modules(
        tmp_path, nvml_env, "--collector.interval=1s", f"--kubelet.pod-resources-socket={socket}"
    )
    names = modules.read_text().split()
    assert "kube_gpu_exporter.exporter.kubelet.client" in names
    assert "grpclib.client" in names
    # wire.py reads the kubelet's answers: no protobuf runtime either
    stubs = "kube_gpu_exporter.exporter.kubelet.v1"
    assert _loaded(modules, ("grpc", "google.protobuf", stubs)) == []


def test_the_pod_watch_loads_http_client_and_never_urllib3(
    nvml_env: dict[str, str], tmp_path: Path
) -> None:
    """The DaemonSet's `--kubernetes.enabled`: the watch's client is the standard library's
    http.client (exporter/kubernetes/http_pool.py). urllib3 loaded importlib.metadata with it,
    ~3 MiB of every node's exporter. The API server need not answer."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        '{"clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],'
        ' "users": [{"name": "u", "user": {"token": "t"}}],'
        ' "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],'
        ' "current-context": "x"}'
    )
    modules = _serve_modules(
        tmp_path,
        nvml_env,
        "--kubernetes.enabled",
        f"--kubernetes.kubeconfig={kubeconfig}",
        "--kubernetes.node-name=n1",
        "--kubelet.pod-resources-socket=",
    )
    names = modules.read_text().split()
    assert "kube_gpu_exporter.exporter.kubernetes.http_pool" in names
    assert _loaded(modules, ("urllib3", "importlib.metadata", "kubernetes")) == []
