"""`generate`: byte-identical output, `--check` on the committed files, and what it reports
when they are stale."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kube_gpu_exporter.exporter.generate.command import main as generate

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
RUNBOOKS = REPO / "docs" / "runbooks.md"


def files(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def run_generate(*args: str, hash_seed: str = "0") -> subprocess.CompletedProcess[str]:
    """The generator as a separate process, as `make` runs it."""
    command = [sys.executable, "-m", "kube_gpu_exporter.exporter.generate.command", *args]
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    return subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_check_passes_on_the_committed_output():
    result = run_generate("--check")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


def test_two_runs_are_byte_identical(tmp_path: Path):
    """Also across processes with different hash seeds: no set or dict order leaks out."""
    for name, seed in (("one", "1"), ("two", "2")):
        args = ["--out", str(tmp_path / name), "--runbooks", str(tmp_path / name / "runbooks.md")]
        assert run_generate(*args, hash_seed=seed).returncode == 0
    assert files(tmp_path / "one") == files(tmp_path / "two")
    assert len(files(tmp_path / "one")) == 23  # with deploy/node-health/ (3 files)


def test_the_committed_output_is_what_the_defaults_and_the_example_generate(tmp_path: Path):
    example = REPO / "rules" / "thresholds.example.yaml"
    for name, extra in (("defaults", []), ("example", ["--config", str(example)])):
        out = tmp_path / name
        assert generate([*extra, "--out", str(out), "--runbooks", str(out / "runbooks.md")]) == 0
        generated = files(out)
        assert generated.pop("runbooks.md") == RUNBOOKS.read_bytes()
        assert generated == files(DEPLOY)


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """A copy of the committed output to tamper with."""
    shutil.copytree(DEPLOY, tmp_path / "deploy")
    shutil.copy(RUNBOOKS, tmp_path / "runbooks.md")
    return tmp_path


def check(copy: Path) -> subprocess.CompletedProcess[str]:
    return run_generate(
        "--check", "--out", str(copy / "deploy"), "--runbooks", str(copy / "runbooks.md")
    )


def test_check_fails_after_tampering(copy: Path):
    assert check(copy).returncode == 0
    rules = copy / "deploy" / "rules.yaml"
    rules.write_text(rules.read_text().replace("> 85", "> 95"))
    (copy / "deploy" / "dashboards" / "kube-gpu-node.json").unlink()
    (copy / "deploy" / "dashboards" / "old-dashboard.json").write_text("{}")
    result = check(copy)
    assert result.returncode == 1
    assert f"differs: {rules}" in result.stderr
    assert "missing: " in result.stderr and "kube-gpu-node.json" in result.stderr
    assert "not generated: " in result.stderr and "old-dashboard.json" in result.stderr
    assert "run `kube-gpu-exporter generate`" in result.stderr
    assert (copy / "deploy" / "dashboards" / "old-dashboard.json").exists(), (
        "--check writes nothing"
    )


def test_check_fails_on_stale_runbooks(copy: Path):
    (copy / "runbooks.md").write_text("# Runbooks\n")
    result = check(copy)
    assert result.returncode == 1 and "runbooks.md" in result.stderr


def test_generate_repairs_a_stale_output(copy: Path):
    (copy / "deploy" / "rules.yaml").write_text("groups: []\n")
    (copy / "deploy" / "dashboards" / "old-dashboard.json").write_text("{}")
    args = ["--out", str(copy / "deploy"), "--runbooks", str(copy / "runbooks.md")]
    assert run_generate(*args).returncode == 0
    assert not (copy / "deploy" / "dashboards" / "old-dashboard.json").exists()
    assert check(copy).returncode == 0


def test_a_bad_config_is_one_line_and_exit_2(tmp_path: Path):
    (tmp_path / "t.yaml").write_text("alerts: {GPUMemoryNearFull: {threshold: 1.5}}\n")
    result = run_generate("--config", str(tmp_path / "t.yaml"), "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    assert result.stderr == (
        f"kube-gpu-exporter: error: {tmp_path / 't.yaml'}: alerts.GPUMemoryNearFull.threshold: "
        "Input should be less than 1 (got 1.5)\n"
    )
