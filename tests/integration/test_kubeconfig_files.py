"""`explain` with `KUBECONFIG=a:b:c` against the test API server: split files give the answer
one merged file gives, `--context` picks another cluster, and `--kubeconfig` reads its file
alone; the same against a real API server (`k8s`), with the CA and the token file relative to
different files, and an exec-plugin user there too. Also: a merged exec-plugin user
(exporter/kubernetes/exec_plugin.py), and `cluster` refusing an unknown
`--kubernetes.context` in one line."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from control_plane import run_control_plane

from cluster_objects import make_gpu_pod, make_node, scenarios
from kube_gpu_exporter.demo.kube_api import KubeApiServer
from kube_gpu_exporter.exporter.cli import main
from kube_gpu_exporter.exporter.kubernetes.kubeconfig import load_kubeconfig
from kube_gpu_exporter.exporter.kubernetes.kubeconfig_choice import Kubeconfig
from support import exporter_command

WAITS = "will not schedule: fragmented"
SCHEDULED = "pod ml/train is scheduled on gpu-a (Running)\n"


def section(name: str, entries: dict[str, Any]) -> list[dict[str, Any]]:
    inner = {"clusters": "cluster", "users": "user", "contexts": "context"}[name]
    return [{"name": key, inner: value} for key, value in entries.items()]


def write(path: Path, config: dict[str, Any]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "Config", **config}))
    return str(path)


@pytest.fixture
def servers() -> Iterator[tuple[KubeApiServer, KubeApiServer]]:
    """prod, where ml/train waits (fragmented), and staging, where it runs on gpu-a."""
    with KubeApiServer() as prod, KubeApiServer() as staging:
        scenario = next(s for s in scenarios() if s.name == "fragmented")
        for node in scenario.nodes:
            prod.put_node(node)
        for pod in (*scenario.bound, scenario.subject):
            prod.put(pod)
        staging.put_node(make_node("gpu-a"))
        staging.put(make_gpu_pod("train", 1, node="gpu-a"))
        yield prod, staging


@pytest.fixture
def configs(servers: tuple[KubeApiServer, KubeApiServer], tmp_path: Path) -> tuple[list[str], str]:
    """The same configuration split over three files in two folders, and as one file. The
    contexts name no namespace but ml: `explain train` takes the context's."""
    prod, staging = servers
    clusters = {"prod": {"server": prod.url}, "staging": {"server": staging.url}}
    (tmp_path / "users" / "token").parent.mkdir(parents=True)
    (tmp_path / "users" / "token").write_text("secret\n")
    users = {"alice": {"tokenFile": "token"}}
    contexts = {
        "main": {"cluster": "prod", "user": "alice", "namespace": "ml"},
        "other": {"cluster": "staging", "user": "alice", "namespace": "ml"},
    }
    split = [
        write(tmp_path / "a.yaml", {"clusters": section("clusters", clusters)}),
        write(tmp_path / "users" / "b.yaml", {"users": section("users", users)}),
        write(
            tmp_path / "c.yaml",
            {"contexts": section("contexts", contexts), "current-context": "main"},
        ),
    ]
    merged = write(
        tmp_path / "users" / "merged.yaml",
        {
            "clusters": section("clusters", clusters),
            "users": section("users", users),
            "contexts": section("contexts", contexts),
            "current-context": "main",
        },
    )
    return split, merged


def explain(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(["explain", "train", "--color=never", *args])
    out, err = capsys.readouterr()
    return status, out, err


def test_split_files_answer_as_one_merged_file(
    configs: tuple[list[str], str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    split, merged = configs
    answers = {}
    for name, files in [("split", split), ("merged", [merged])]:
        missing = str(tmp_path / "missing.yaml")  # skipped, as kubectl skips it
        monkeypatch.setenv("KUBECONFIG", os.pathsep.join([missing, *files]))
        answers[name] = explain(capsys)
        assert answers[name][0] == 1 and WAITS in answers[name][1], answers[name]
        assert explain(capsys, "--context", "other") == (0, SCHEDULED, "")
    assert answers["split"] == answers["merged"]


def test_kubeconfig_flag_reads_its_file_alone(
    configs: tuple[list[str], str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    split, merged = configs
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join(split))
    assert explain(capsys, f"--kubeconfig={merged}", "--context=other") == (0, SCHEDULED, "")
    status, out, err = explain(capsys, f"--kubeconfig={split[2]}")
    assert (status, out) == (2, "") and err.count("\n") == 1
    assert "cluster 'prod' not found in clusters" in err


def test_an_unknown_context_is_one_line_and_exit_2(
    configs: tuple[list[str], str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    split, _ = configs
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join(split))
    status, out, err = explain(capsys, "--context", "nowhere")
    assert (status, out) == (2, "") and err.count("\n") == 1, err
    assert err.startswith("kube-gpu-exporter: error: kubeconfig ")
    assert "context 'nowhere' not found in contexts" in err


def test_a_merged_exec_user_logs_in_through_its_plugin(tmp_path: Path) -> None:
    """The plugin is a relative command of the user's own file, in another folder than the
    cluster's; it sees the chosen context's cluster."""
    plugin = tmp_path / "users" / "bin" / "login"
    plugin.parent.mkdir(parents=True)
    plugin.write_text(
        f"#!{sys.executable}\n"
        "import json\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', "
        "'kind': 'ExecCredential', 'status': {'token': 'from-plugin'}}))\n"
    )
    plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
    exec_user = {"apiVersion": "client.authentication.k8s.io/v1", "command": "./bin/login",
                 "interactiveMode": "Never"}  # fmt: skip
    a = write(
        tmp_path / "a.yaml",
        {
            "clusters": section("clusters", {"c": {"server": "http://127.0.0.1:1"}}),
            "contexts": section("contexts", {"x": {"cluster": "c", "user": "sso"}}),
            "current-context": "elsewhere",
        },
    )
    b = write(
        tmp_path / "users" / "b.yaml", {"users": section("users", {"sso": {"exec": exec_user}})}
    )
    connection = load_kubeconfig(Kubeconfig((a, b), "x"))
    assert connection.authorization is not None
    assert connection.authorization() == "Bearer from-plugin"
    assert connection.server == "http://127.0.0.1:1"


def test_cluster_refuses_an_unknown_context_in_one_line(
    configs: tuple[list[str], str],
) -> None:
    _, merged = configs
    result = subprocess.run(
        exporter_command(
            "cluster", f"--kubernetes.kubeconfig={merged}", "--kubernetes.context=nowhere"
        ),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "context 'nowhere' not found in contexts" in result.stderr


@pytest.mark.k8s
def test_split_files_against_a_real_api_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with run_control_plane(tmp_path / "plane") as plane:
        plane.ok("POST", "/api/v1/namespaces", {"metadata": {"name": "ml"}})
        node = make_node("gpu-a", gpus=2)
        node["metadata"].pop("uid")
        plane.ok("POST", "/api/v1/nodes", node)
        waiting = make_gpu_pod("big", 4, "ml")
        for key in ("uid", "creationTimestamp"):
            waiting["metadata"].pop(key)
        plane.ok("POST", "/api/v1/namespaces/ml/pods", waiting)

        clusters = {"real": {"server": plane.url, "certificate-authority": "ca.crt"}}
        # The exec user's plugin hands over the token file's token, from its own folder.
        login = {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": "./login"}
        users = {
            "admin": {"tokenFile": "token"},
            "stranger": {"token": "not-a-token"},
            "sso": {"exec": login},
        }
        contexts = {
            "main": {"cluster": "real", "user": "admin", "namespace": "ml"},
            "stranger": {"cluster": "real", "user": "stranger", "namespace": "ml"},
            "sso": {"cluster": "real", "user": "sso", "namespace": "ml"},
        }
        for folder in ("pki", "users", "merged"):
            (tmp_path / folder).mkdir()
        for folder in ("users", "merged"):
            plugin = tmp_path / folder / "login"
            plugin.write_text(
                f"#!{sys.executable}\n"
                "import json, pathlib\n"
                "token = (pathlib.Path(__file__).parent / 'token').read_text()\n"
                "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1beta1', "
                "'kind': 'ExecCredential', 'status': {'token': token}}))\n"
            )
            plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
        for folder in ("pki", "merged"):
            shutil.copy(plane.ca_file, tmp_path / folder / "ca.crt")
        for folder in ("users", "merged"):
            (tmp_path / folder / "token").write_text(plane.token)
        split = [
            write(tmp_path / "pki" / "a.yaml", {"clusters": section("clusters", clusters)}),
            write(tmp_path / "users" / "b.yaml", {"users": section("users", users)}),
            write(
                tmp_path / "c.yaml",
                {"contexts": section("contexts", contexts), "current-context": "main"},
            ),
        ]
        merged = write(
            tmp_path / "merged" / "config",
            {
                "clusters": section("clusters", clusters),
                "users": section("users", users),
                "contexts": section("contexts", contexts),
                "current-context": "main",
            },
        )
        answers = []
        for files in (split, [merged]):
            monkeypatch.setenv("KUBECONFIG", os.pathsep.join(files))
            status, out, err = main(["explain", "big", "--color=never"]), *capsys.readouterr()
            assert status == 1 and "pod ml/big (" in out and "gpu-a" in out, out + err
            answers.append(ageless(out))
            status, out, err = main(["explain", "big", "--context=sso"]), *capsys.readouterr()
            assert (status, ageless(out)) == (1, answers[0]), out + err
            status, out, err = main(["explain", "big", "--context=stranger"]), *capsys.readouterr()
            assert (status, out) == (2, "") and err.count("\n") == 1, err
            assert "401" in err, err
    assert answers[0] == answers[1]


def ageless(answer: str) -> str:
    """explain's answer without the pod's age ("Pending for 1s"), which moves between calls."""
    return re.sub(r"\(Pending for [^)]*\)", "(Pending)", answer)
