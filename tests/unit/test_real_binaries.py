"""The tests find the binaries `make real-bin` builds only where and when the build finished.

A component's folder counts only once its stamp is written (last, after every binary): a build
killed halfway must be rebuilt, not run. A test needing a binary that is not built fails, with
the make target to run, rather than skipping out of sight."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from real_binaries import find, real_components, require

SCRIPT = Path(real_components.__file__)


@pytest.fixture
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KGE_BIN_CACHE", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize(
    ("binary", "target"),
    [
        ("kube-apiserver", "make k8s-bin"),
        ("etcd", "make k8s-bin"),
        ("promtool", "make prom-bin"),
        ("kubelet", "make node-bin"),
    ],
)
def test_missing_binary_fails_the_test_naming_the_make_target(
    empty_cache: Path, binary: str, target: str
) -> None:
    with pytest.raises(pytest.fail.Exception) as failed:
        require(binary)
    component = real_components.component_of(binary)
    assert f"`{target}`" in str(failed.value)
    assert f"{component.module}@{component.version}" in str(failed.value)


def test_the_older_kubelet_has_a_folder_of_its_own(empty_cache: Path) -> None:
    """Two kubelets, one binary name: each version in its folder, both built by node-bin."""
    older = real_components.K8S_OLDEST_KUBELET
    with pytest.raises(pytest.fail.Exception) as failed:
        require("kubelet", older)
    assert f"k8s.io/kubernetes@{older}" in str(failed.value)
    assert "`make node-bin`" in str(failed.value)
    folder = empty_cache / f"kubelet-{older}"
    folder.mkdir()
    (folder / real_components.STAMP).write_text("{}")
    assert find("kubelet", older) == folder / "kubelet"
    assert find("kubelet") is None  # the control plane's version: not built here
    node = {real_components.PINS[n].version for n in real_components.GROUPS["node"]}
    assert node == {real_components.K8S, older}


def test_a_build_without_its_stamp_is_not_used(empty_cache: Path) -> None:
    kubernetes = real_components.PINS["kubernetes"]
    folder = empty_cache / f"kubernetes-{kubernetes.version}"
    folder.mkdir()
    (folder / "kube-apiserver").write_bytes(b"half written")
    assert find("kube-apiserver") is None
    path = subprocess.run(
        [sys.executable, str(SCRIPT), "path", "kube-apiserver"], capture_output=True, text=True
    )
    assert (path.returncode, path.stdout) == (1, "")

    (folder / real_components.STAMP).write_text("{}")
    assert find("kube-apiserver") == folder / "kube-apiserver"
    path = subprocess.run(
        [sys.executable, str(SCRIPT), "path", "kube-apiserver"], capture_output=True, text=True
    )
    assert (path.returncode, path.stdout.strip()) == (0, str(folder / "kube-apiserver"))


def test_a_present_build_is_reused_without_running_go(empty_cache: Path) -> None:
    """`make k8s-bin` the second time: no go command at all (GO points at nothing)."""
    for name in real_components.GROUPS["k8s"]:
        component = real_components.PINS[name]
        folder = empty_cache / f"{name}-{component.version}"
        folder.mkdir()
        stamp = {"seconds": 1, "bytes": dict.fromkeys(component.binaries, 1)}
        (folder / real_components.STAMP).write_text(json.dumps(stamp))
    build = subprocess.run(
        [sys.executable, str(SCRIPT), "build", "k8s"],
        capture_output=True,
        text=True,
        env={"KGE_BIN_CACHE": str(empty_cache), "GO": "/nonexistent/go", "PATH": "/usr/bin"},
        timeout=60,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    assert build.stdout.count(": present (") == 2, build.stdout


def test_unknown_binary_is_one_line_and_exit_2(empty_cache: Path) -> None:
    path = subprocess.run(
        [sys.executable, str(SCRIPT), "path", "kubectl"], capture_output=True, text=True
    )
    assert (path.returncode, path.stderr) == (2, "unknown binary 'kubectl'\n")
