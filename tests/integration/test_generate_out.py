"""`generate --out DIR` writes under DIR and nowhere else, whatever folder it runs in.

It once wrote the runbooks to ./docs/runbooks.md beside any --out, so generating another
thresholds file from inside a checkout overwrote the checkout's runbooks. The command runs as
a real process from a folder laid out like a checkout, with sentinels where the default outputs
go, and every file on disk is compared before and after.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from support import exporter_command

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "rules" / "thresholds.example.yaml"
SENTINEL = "# the checkout's own runbooks: must stay as they are\n"


def snapshot(folder: Path) -> dict[Path, bytes]:
    """Every file under `folder` and its bytes."""
    return {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def generate(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        exporter_command("generate", "--config", str(EXAMPLE), *args),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A folder with the files a run without --out would overwrite."""
    root = tmp_path / "checkout"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "runbooks.md").write_text(SENTINEL)
    (root / "deploy").mkdir()
    (root / "deploy" / "rules.yaml").write_text("# sentinel\n")
    return root


@pytest.mark.parametrize("inside", [False, True], ids=["out-elsewhere", "out-relative"])
def test_everything_lands_under_out(checkout: Path, tmp_path: Path, inside: bool) -> None:
    out = checkout / "generated" if inside else tmp_path / "elsewhere" / "out"
    flag = "generated" if inside else str(out)
    before = snapshot(tmp_path)

    result = generate(checkout, "--out", flag)

    assert result.returncode == 0, result.stderr
    assert (checkout / "docs" / "runbooks.md").read_text() == SENTINEL
    after = snapshot(tmp_path)
    changed = {p for p in after if before.get(p) != after[p]} | (before.keys() - after.keys())
    outside = sorted(str(p) for p in changed if not p.is_relative_to(out))
    assert not outside, f"written outside {out}: {outside}"
    written = {str(p.relative_to(out)) for p in changed}
    # Rules, promtool tests, runbooks, dashboards and their ConfigMaps, manifests.
    assert {"rules.yaml", "rules-test.yaml", "runbooks.md", "daemonset.yaml"} <= written
    assert any(name.startswith("dashboards/") for name in written)
    assert any(name.endswith("kustomization.yaml") for name in written)
    # And --check reads back the same place.
    checked = generate(checkout, "--check", "--out", flag)
    assert checked.returncode == 0, checked.stderr


def test_explicit_runbooks_go_where_named(checkout: Path, tmp_path: Path) -> None:
    out, runbooks = tmp_path / "out", tmp_path / "books" / "gpu.md"
    result = generate(checkout, "--out", str(out), "--runbooks", str(runbooks))
    assert result.returncode == 0, result.stderr
    assert runbooks.read_text().startswith("# ") and not (out / "runbooks.md").exists()
    assert (checkout / "docs" / "runbooks.md").read_text() == SENTINEL


def test_without_out_the_checkout_layout_is_regenerated(checkout: Path) -> None:
    result = generate(checkout)
    assert result.returncode == 0, result.stderr
    assert (checkout / "docs" / "runbooks.md").read_text() != SENTINEL
    assert (checkout / "deploy" / "rules.yaml").read_text() != "# sentinel\n"
    written = {str(p.relative_to(checkout)) for p in snapshot(checkout)}
    assert {p.split("/")[0] for p in written} == {"deploy", "docs", "charts"}
    assert generate(checkout, "--check").returncode == 0
