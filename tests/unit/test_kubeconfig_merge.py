"""Several kubeconfig files and `--context`, as kubectl (client-go's loading rules) reads
them: $KUBECONFIG's files merged with the first file's name winning, missing files skipped,
relative paths from each entry's own file, `--kubeconfig` alone, and the chosen context's
namespace. Against a server: tests/integration/test_kubeconfig_files.py."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from inprocess_cli import assert_one_line, run_cli

from kube_gpu_exporter.exporter.cli import build_parser
from kube_gpu_exporter.exporter.cluster.explain.api import context_namespace, default_kubeconfig
from kube_gpu_exporter.exporter.kubernetes.client import api_client
from kube_gpu_exporter.exporter.kubernetes.connection import Connection, KubernetesConfigError
from kube_gpu_exporter.exporter.kubernetes.kubeconfig import (
    current_context,
    load_kubeconfig,
    plugin_config,
)
from kube_gpu_exporter.exporter.kubernetes.kubeconfig_choice import Kubeconfig


def write(path: Path, **sections: Any) -> str:
    """A kubeconfig of `sections`: clusters/users/contexts as {name: inner}, current-context."""
    config: dict[str, Any] = {"apiVersion": "v1", "kind": "Config"}
    for section, inner in (("clusters", "cluster"), ("users", "user"), ("contexts", "context")):
        entries = sections.get(section, {})
        config[section] = [{"name": name, inner: value} for name, value in entries.items()]
    if "current" in sections:
        config["current-context"] = sections["current"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config))
    return str(path)


def header(connection: Connection) -> str | None:
    return None if connection.authorization is None else connection.authorization()


@pytest.fixture
def split(tmp_path: Path) -> tuple[str, str, str]:
    """The cluster in a.yaml, the user (a token file beside it) in another folder, and the
    contexts in a third file."""
    a = write(tmp_path / "a.yaml", clusters={"prod": {"server": "http://prod.example:8080"}})
    (tmp_path / "users" / "token").parent.mkdir()
    (tmp_path / "users" / "token").write_text("from-b\n")
    b = write(tmp_path / "users" / "b.yaml", users={"alice": {"tokenFile": "token"}})
    contexts = {
        "main": {"cluster": "prod", "user": "alice", "namespace": "ml"},
        "other": {"cluster": "prod", "user": "alice", "namespace": "team-b"},
    }
    c = write(tmp_path / "c.yaml", contexts=contexts, current="main")
    return a, b, c


def test_split_files_are_merged(split: tuple[str, str, str]) -> None:
    connection = load_kubeconfig(Kubeconfig(split))
    assert connection.server == "http://prod.example:8080"
    assert header(connection) == "Bearer from-b"  # b.yaml's tokenFile, from b.yaml's folder
    assert connection.namespace == "ml"
    assert connection.source == "kubeconfig " + os.pathsep.join(split)


def test_kubeconfig_variable_is_a_list_of_files_and_missing_ones_are_skipped(
    split: tuple[str, str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = str(tmp_path / "missing.yaml")
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([missing, *split, ""]))
    chosen = default_kubeconfig()
    assert chosen == Kubeconfig(split)
    assert header(api_client(chosen).connection) == "Bearer from-b"
    assert context_namespace(chosen) == "ml"


def test_context_picks_another_context_and_its_namespace(
    split: tuple[str, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join(split))
    chosen = default_kubeconfig(context="other")
    assert context_namespace(chosen) == "team-b"
    assert load_kubeconfig(Kubeconfig(split, "other")).namespace == "team-b"


def test_an_unknown_context_is_one_line(split: tuple[str, str, str]) -> None:
    with pytest.raises(KubernetesConfigError) as caught:
        load_kubeconfig(Kubeconfig(split, "nowhere"))
    assert str(caught.value) == (
        f"kubeconfig {os.pathsep.join(split)}: context 'nowhere' not found in contexts"
    )


def test_the_first_file_to_name_an_entry_wins(tmp_path: Path) -> None:
    first = write(
        tmp_path / "first.yaml",
        clusters={"c": {"server": "http://first:1"}},
        users={"u": {"token": "first"}},
        contexts={"x": {"cluster": "c", "user": "u", "namespace": "first"}},
        current="",  # empty: the next file's current-context is the current one
    )
    second = write(
        tmp_path / "second.yaml",
        clusters={"c": {"server": "http://second:1"}, "d": {"server": "http://d:1"}},
        users={"u": {"token": "second"}},
        contexts={"x": {"cluster": "d", "namespace": "second"}, "y": {"cluster": "c"}},
        current="x",
    )
    third = write(tmp_path / "third.yaml", current="y")
    connection = load_kubeconfig(Kubeconfig((first, second, third)))
    assert (connection.server, header(connection), connection.namespace) == (
        "http://first:1",
        "Bearer first",
        "first",
    )
    y = load_kubeconfig(Kubeconfig((second, first)))
    assert (y.server, y.namespace) == ("http://d:1", "second")  # second.yaml's x, cluster d


def test_relative_paths_are_from_the_file_of_their_entry(
    split: tuple[str, str, str], tmp_path: Path
) -> None:
    a, b, c = split
    user = {
        "client-certificate": "certs/alice.crt",
        "client-key": "/abs/alice.key",
        "exec": {"command": "./bin/login", "args": ["x"]},
    }
    b = write(tmp_path / "users" / "b.yaml", users={"alice": user})
    a = write(
        tmp_path / "a.yaml",
        clusters={"prod": {"server": "https://prod", "certificate-authority": "ca.crt"}},
    )
    current = current_context(Kubeconfig((a, b, c)))
    assert (current.cluster_file, current.user_file) == (a, b)
    config = plugin_config(current)
    assert config["current-context"] == "main"
    assert config["clusters"][0]["cluster"]["certificate-authority"] == str(tmp_path / "ca.crt")
    merged_user = config["users"][0]["user"]
    assert merged_user["client-certificate"] == str(tmp_path / "users" / "certs" / "alice.crt")
    assert merged_user["client-key"] == "/abs/alice.key"
    assert merged_user["exec"]["command"] == str(tmp_path / "users" / "bin" / "login")
    assert config["contexts"][0]["context"]["namespace"] == "ml"


def test_kubeconfig_flag_reads_that_file_alone(
    split: tuple[str, str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join(split))
    _, _, c = split
    assert default_kubeconfig(c, "other") == Kubeconfig((c,), "other")
    with pytest.raises(KubernetesConfigError, match="cluster 'prod' not found in clusters"):
        load_kubeconfig(default_kubeconfig(c) or Kubeconfig(()))


def test_no_file_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """$KUBECONFIG's files all missing: in-cluster, never ~/.kube/config (kubectl's rule);
    with --context, one line."""
    write(tmp_path / ".kube" / "config", current="home")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    assert default_kubeconfig() is None
    monkeypatch.delenv("KUBECONFIG")
    assert default_kubeconfig() == Kubeconfig((str(tmp_path / ".kube" / "config"),))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    with pytest.raises(KubernetesConfigError, match=r"^context 'x' not found: no kubeconfig"):
        api_client(default_kubeconfig(context="x"))


def test_empty_files_add_nothing(split: tuple[str, str, str], tmp_path: Path) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert load_kubeconfig(Kubeconfig((str(empty), *split))).namespace == "ml"
    with pytest.raises(KubernetesConfigError, match="every file is empty"):
        load_kubeconfig(Kubeconfig((str(empty), str(empty))))


@pytest.mark.parametrize("command", ["serve", "cluster"])
def test_exporter_flags_make_one_choice(command: str) -> None:
    parser = build_parser(command)
    args = parser.parse_args(
        [command, "--kubernetes.context=other", "--kubernetes.kubeconfig=k.yaml"]
    )
    assert args.kubeconfig == Kubeconfig(("k.yaml",), "other")
    args = parser.parse_args([command, "--kubernetes.kubeconfig=k.yaml"])
    assert args.kubeconfig == Kubeconfig(("k.yaml",))
    assert parser.parse_args([command]).kubeconfig is None


def test_explain_with_an_unknown_context_is_one_line_and_exit_2(
    split: tuple[str, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join(split))
    status, stderr = run_cli(["explain", "train", "--context", "nowhere"])
    assert_one_line(status, stderr, "context 'nowhere' not found in contexts")
