"""The docs' figures that follow from the code are generated, and `generate --check` catches
them stale.

The README once said "23 alerts, 18 recording rules" while `generate` wrote 31 and 22, and
docs/metrics.md listed the kinds of collection_errors_total without the kubelet's and the API
server's. Those figures now sit in marked blocks that `generate` rewrites: this file holds the
blocks to the committed deploy/rules.yaml (parsed here, not rendered again), checks that no
doc states a count of alerts or rules outside a block, and runs the real command on a copy of
the docs to see a stale figure refused by `--check` and rewritten by `generate`.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from support import exporter_command

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
METRICS = REPO / "docs" / "metrics.md"
DOCS = [README, *sorted((REPO / "docs").glob("*.md"))]
BLOCK = re.compile(r"<!-- generate:([a-z-]+) -->(.*?)<!-- /generate:\1 -->", re.DOTALL)
# "31 alerts", "22 recording rules", "5 rule groups": figures that follow from the rules.
RULE_FIGURE = re.compile(r"\b\d+ (?:alerts?|recording rules?|alert rules?|rule groups?)\b")


def blocks(path: Path) -> dict[str, str]:
    return dict(BLOCK.findall(path.read_text(encoding="utf-8")))


def deployed() -> list[tuple[str, list[dict[str, str]]]]:
    """(group name, its rules) of the committed deploy/rules.yaml."""
    groups = yaml.safe_load((REPO / "deploy" / "rules.yaml").read_text())["groups"]
    return [(group["name"], group["rules"]) for group in groups]


def generate(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        exporter_command("generate", *args),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_readme_counts_the_deployed_alerts_and_recording_rules() -> None:
    rules = [rule for _, group in deployed() for rule in group]
    alerts = sum("alert" in rule for rule in rules)
    records = sum("record" in rule for rule in rules)
    assert blocks(README).get("rule-counts") == f"{alerts} alerts, {records} recording rules"


def test_the_readme_lists_the_deployed_alerts_by_group() -> None:
    listed = blocks(README).get("alert-groups", "")
    items = re.findall(r"^  - `([^`]+)`: (.*?)(?=^  - |\Z)", listed, re.MULTILINE | re.DOTALL)
    shown = [(group, re.findall(r"\w+", names)) for group, names in items]
    expected = [(name, [r["alert"] for r in rules if "alert" in r]) for name, rules in deployed()]
    assert shown == [(name, alerts) for name, alerts in expected if alerts]


def test_no_doc_states_a_rule_figure_outside_a_generated_block() -> None:
    stated = [
        f"{path.relative_to(REPO)}: {figure!r}"
        for path in DOCS
        if path.name != "runbooks.md"  # generated whole
        for figure in RULE_FIGURE.findall(BLOCK.sub("", path.read_text(encoding="utf-8")))
    ]
    assert not stated, f"hand-kept figures (put them in a generated block): {stated}"


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A copy of the docs that carry blocks, as the repository lays them out."""
    root = tmp_path / "checkout"
    for path in (README, METRICS, REPO / "docs" / "troubleshooting.md"):
        target = root / path.relative_to(REPO)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)
    assert generate(root).returncode == 0  # deploy/ and docs/runbooks.md beside them
    return root


def test_check_refuses_a_stale_figure_and_generate_rewrites_it(checkout: Path) -> None:
    readme, metrics = checkout / "README.md", checkout / "docs" / "metrics.md"
    assert readme.read_bytes() == README.read_bytes(), "the committed README's blocks are stale"
    assert metrics.read_bytes() == METRICS.read_bytes(), "docs/metrics.md's blocks are stale"
    counts = blocks(readme)["rule-counts"]
    readme.write_text(readme.read_text().replace(counts, "23 alerts, 18 recording rules"))
    kinds = blocks(metrics)["collection-error-kinds"]
    metrics.write_text(metrics.read_text().replace(kinds, kinds.replace("`kubernetes_gone`, ", "")))

    checked = generate(checkout, "--check")
    assert checked.returncode == 1
    assert f"differs: {Path('README.md')}" in checked.stderr
    assert f"differs: {Path('docs/metrics.md')}" in checked.stderr

    assert generate(checkout).returncode == 0
    assert readme.read_bytes() == README.read_bytes()
    assert metrics.read_bytes() == METRICS.read_bytes()
    assert generate(checkout, "--check").returncode == 0


def test_with_out_the_docs_are_left_alone(checkout: Path, tmp_path: Path) -> None:
    readme = checkout / "README.md"
    readme.write_text(readme.read_text().replace(blocks(readme)["rule-counts"], "1 alert"))
    stale = readme.read_bytes()
    assert generate(checkout, "--out", str(tmp_path / "out")).returncode == 0
    assert readme.read_bytes() == stale


def test_a_block_generate_does_not_know_is_one_line_and_exit_2(checkout: Path) -> None:
    readme = checkout / "README.md"
    readme.write_text(
        readme.read_text() + "\n<!-- generate:no-such -->x<!-- /generate:no-such -->\n"
    )
    result = generate(checkout, "--check")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "no-such" in result.stderr, result.stderr
