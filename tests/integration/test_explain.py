"""`kube-gpu-exporter explain` against the test API server over real HTTP: every scenario's
checks, verdict and exit status, manifests before submission (`-f`), and bad input as one
line with exit status 2."""

from __future__ import annotations

import io
import json
import os
import pty
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cluster_objects import (
    A100,
    PRODUCT,
    Scenario,
    as_manifest,
    make_gpu_pod,
    make_node,
    make_quota,
    scenarios,
)
from kube_gpu_exporter.demo.kube_api import NODES_PATH, PODS_PATH, KubeApiServer, write_kubeconfig
from kube_gpu_exporter.exporter import input_yaml
from kube_gpu_exporter.exporter.cli import main
from kube_gpu_exporter.exporter.cluster.explain import api as explain_api
from support import exporter_command, free_port

CHECKS = ("gates", "preemption", "quota", "device plugin", "taints", "gpu type", "affinity")
CHECKS += ("gpu fit", "cpu/memory")
AS_WRITTEN = "takes no dry-run create (HTTP 501 Unsupported method ('POST')): the manifest is "
AS_WRITTEN += "judged as written, without the API server's admission\n"


@pytest.fixture
def api() -> Iterator[KubeApiServer]:
    with KubeApiServer() as server:
        yield server


@pytest.fixture
def kubeconfig(api: KubeApiServer, tmp_path: Path) -> Path:
    return api.write_kubeconfig(tmp_path / "kubeconfig")


def load(api: KubeApiServer, scenario: Scenario) -> None:
    for node in scenario.nodes:
        api.put_node(node)
    for pod in scenario.bound if scenario.manifest else (*scenario.bound, scenario.subject):
        api.put(pod)
    for quota in scenario.quotas:
        api.put_quota(quota)


def explain(
    capsys: pytest.CaptureFixture[str], kubeconfig: Path, *args: str
) -> tuple[int, str, str]:
    status = main(["explain", f"--kubeconfig={kubeconfig}", *args])
    out, err = capsys.readouterr()
    return status, out, err


def manifest_file(tmp_path: Path, *documents: Any) -> str:
    path = tmp_path / "pod.yaml"
    path.write_text(yaml.safe_dump_all(documents))
    return str(path)


def scenario_args(scenario: Scenario, tmp_path: Path) -> list[str]:
    args = [f"--gpu-type-label={label}" for label in scenario.gpu_type_labels]
    if scenario.manifest:
        return [*args, "-f", manifest_file(tmp_path, scenario.subject)]
    return [*args, scenario.subject["metadata"]["name"], "-n", "ml"]


@pytest.mark.parametrize("scenario", scenarios(), ids=lambda s: s.name)
def test_each_scenario(
    scenario: Scenario,
    api: KubeApiServer,
    kubeconfig: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    load(api, scenario)
    status, out, err = explain(capsys, kubeconfig, *scenario_args(scenario, tmp_path))
    # the test server takes no POST: a manifest is judged as written, and explain says so
    assert status == scenario.exit_status, out
    assert err.endswith(AS_WRITTEN) if scenario.manifest else not err, err
    lines = out.splitlines()
    assert lines[0].startswith("pod ml/train (")
    names = [line[2:16].strip() for line in lines[2:11]]
    assert names == [*CHECKS]
    if scenario.reason is None:
        assert "FAIL" not in out
        assert lines[-3:-1] == ["would schedule now", "  fits on 3 nodes: gpu-a, gpu-b, gpu-c"]
    else:
        assert lines[-2] == f"will not schedule: {scenario.reason}"
        assert sum("FAIL" in line for line in lines) == 1, out
    for expected in scenario.says:
        assert expected in out, out
    assert "\033[" not in out  # not a terminal: no colour


def test_the_node_table_is_aligned(
    api: KubeApiServer, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    load(api, next(s for s in scenarios() if s.name == "tainted"))
    _, out, _ = explain(capsys, kubeconfig, "train", "-n", "ml")
    table = out.split("\n\n")[2].splitlines()
    assert table == [
        "  NODE   PRODUCT                GPU FREE  RESULT",
        "  gpu-c  NVIDIA-H100-80GB-HBM3  8/8       taint dedicated=inference:NoSchedule",
        "  gpu-b  NVIDIA-H100-80GB-HBM3  2/8       too few free GPUs",
        "  gpu-a  NVIDIA-H100-80GB-HBM3  0/8       too few free GPUs",
    ]


def test_a_manifest_of_a_workload_with_limits_only(
    api: KubeApiServer, kubeconfig: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Job's pod template, the second document of its file, asking for GPUs by limits."""
    api.put_node(make_node("gpu-a"))
    api.put_node(make_node("a100-a", product=A100))
    pod = make_gpu_pod("x", 2, limits_only=True, node_selector={PRODUCT: A100})
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "finetune", "namespace": "research"},
        "spec": {"template": {"metadata": {}, "spec": pod["spec"]}},
    }
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    status, out, err = explain(capsys, kubeconfig, "-f", manifest_file(tmp_path, config, job))
    assert status == 0 and err.endswith(AS_WRITTEN), out
    assert out.startswith("pod research/finetune (not created yet) requests nvidia.com/gpu 2,")
    assert "fits on 1 node: a100-a" in out


def test_a_manifest_takes_the_namespace_from_the_flag(
    api: KubeApiServer, kubeconfig: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api.put_node(make_node("gpu-a"))
    api.put_quota(make_quota("gpu-quota", "team-a", hard=1, used=0))
    manifest = as_manifest(make_gpu_pod("train", 2))
    del manifest["metadata"]["namespace"]
    path = manifest_file(tmp_path, manifest)
    status, out, _ = explain(capsys, kubeconfig, "-f", path, "-n", "team-a")
    assert status == 1 and "will not schedule: quota_exceeded" in out
    status, out, _ = explain(capsys, kubeconfig, "-f", path)  # the context's: default
    assert status == 0 and out.startswith("pod default/train ")


def test_a_manifest_on_standard_input(
    api: KubeApiServer,
    kubeconfig: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`-f -`, as kubectl reads it: standard input, read once though explain looks at the
    manifest twice (a Job queued by Kueue first, then the pod)."""
    api.put_node(make_node("gpu-a"))
    manifest = yaml.safe_dump(as_manifest(make_gpu_pod("train", 2))).encode()
    input_yaml._stdin.cache_clear()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(manifest)))
    try:
        status, out, err = explain(capsys, kubeconfig, "-f", "-")
    finally:
        input_yaml._stdin.cache_clear()
    assert status == 0 and out.startswith("pod ml/train (not created yet)"), err


def test_a_scheduled_pod_needs_no_explaining(
    api: KubeApiServer, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api.put_node(make_node("gpu-a"))
    api.put(make_gpu_pod("train", 1, node="gpu-a"))
    assert explain(capsys, kubeconfig, "pod/train", "-n", "ml") == (
        0,
        "pod ml/train is scheduled on gpu-a (Running)\n",
        "",
    )


def test_lists_are_read_page_by_page(
    api: KubeApiServer,
    kubeconfig: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(explain_api, "PAGE", 2)
    for number in range(5):
        api.put_node(make_node(f"gpu-{number}"))
        api.put(make_gpu_pod(f"holder-{number}", 8, "batch", node=f"gpu-{number}"))
    api.put(make_gpu_pod("done", 8, "batch", node="gpu-0", phase="Succeeded"))
    api.put(make_gpu_pod("train", 1))
    status, out, _ = explain(capsys, kubeconfig, "train", "-n", "ml")
    assert status == 1 and "will not schedule: insufficient_gpus" in out
    assert "0 of 5 nodes have 1 nvidia.com/gpu free" in out or "no node has 1" in out
    assert len(api.lists(NODES_PATH)) == 3
    pod_lists = api.lists(PODS_PATH)
    assert len(pod_lists) == 3  # 6 active pods in pages of 2; the ended one filtered out
    assert pod_lists[0].params["fieldSelector"] == "status.phase!=Succeeded,status.phase!=Failed"


def one_line_error(result: tuple[int, str, str], message: str) -> None:
    status, out, err = result
    assert (status, out) == (2, ""), err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("kube-gpu-exporter: error: ") and message in err, err


def test_bad_input_is_one_line_and_exit_2(
    api: KubeApiServer, kubeconfig: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def run(*args: str) -> tuple[int, str, str]:
        return explain(capsys, kubeconfig, *args)

    one_line_error(run("missing", "-n", "ml"), "pod ml/missing not found")
    one_line_error(run("-f", str(tmp_path / "nope.yaml")), "cannot read manifest")
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: Pod\nspec: [unclosed\n")
    one_line_error(run("-f", str(bad)), "not valid YAML at line 3")
    bad.write_text(json.dumps({"kind": "ConfigMap", "data": {}}))
    one_line_error(run("-f", str(bad)), "no Pod or pod template in it (found kind 'ConfigMap')")
    bad.write_text(json.dumps({"kind": "Pod", "metadata": {"name": 7}, "spec": {}}))
    one_line_error(run("-f", str(bad)), "metadata.name or namespace is not a string")
    # A manifest goes through the bounded reader of every input file: aliases, keys, depth.
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
        for p, c in zip("abcdefg", "bcdefgh", strict=True)
    )
    bad.write_text("kind: Pod\n---\n" + bomb)
    one_line_error(run("-f", str(bad)), "aliases")
    bad.write_text("kind: Pod\nkind: Job\nspec: {}\n")
    one_line_error(run("-f", str(bad)), "duplicate key")
    good = manifest_file(tmp_path, as_manifest(make_gpu_pod("train", 1)))
    one_line_error(run("-f", good, "-n", "other"), "namespace ml does not match -n other")
    one_line_error(run("train", "-f", good), "a POD name or -f FILE")
    one_line_error(run(), "a POD name or -f FILE")
    one_line_error(run("a/b/c"), "not a pod name")
    api.fail(500)
    one_line_error(run("train", "-n", "ml"), "answered HTTP 500")


def test_an_unreachable_api_server_or_kubeconfig(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    closed = write_kubeconfig(tmp_path / "closed", f"http://127.0.0.1:{free_port()}")
    one_line_error(
        explain(capsys, closed, "train", "-n", "ml"), "cannot reach the API server at http://127"
    )
    one_line_error(explain(capsys, tmp_path / "none", "train"), "no such file")


def on_a_terminal(command: list[str], env: dict[str, str]) -> str:
    """What `command` writes to a terminal (a pseudo-terminal as its stdout)."""
    main_fd, sub_fd = pty.openpty()
    process = subprocess.Popen(command, stdout=sub_fd, env={**os.environ, **env})
    os.close(sub_fd)
    chunks = []
    while True:
        try:
            chunk = os.read(main_fd, 65536)
        except OSError:  # EIO: the terminal's other end closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(main_fd)
    process.wait(timeout=60)
    return b"".join(chunks).decode()


def test_the_command_as_a_person_runs_it(
    api: KubeApiServer, kubeconfig: Path, tmp_path: Path
) -> None:
    """A real process: exit 1 with the reason; colour on a terminal or when asked for, never
    with NO_COLOR."""
    load(api, next(s for s in scenarios() if s.name == "fragmented"))
    base = [*exporter_command("explain", "train", "-n", "ml"), f"--kubeconfig={kubeconfig}"]
    result = subprocess.run(base, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and result.stderr == ""
    assert "will not schedule: fragmented\n" in result.stdout and "\033[" not in result.stdout
    coloured = subprocess.run([*base, "--color=always"], capture_output=True, text=True)
    assert "\033[1;31mFAIL\033[0m" in coloured.stdout
    assert "\033[1;31mFAIL" in on_a_terminal(base, {})
    assert "FAIL" in on_a_terminal(base, {"NO_COLOR": "1"})
    assert "\033[" not in on_a_terminal(base, {"NO_COLOR": "1"})
    missing = subprocess.run(
        [
            *exporter_command("explain", "-f", str(tmp_path / "x.yaml")),
            f"--kubeconfig={kubeconfig}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1
