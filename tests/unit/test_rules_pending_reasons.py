"""GPUPodPendingTooLong selects the cluster view's own reason words, a fixed list, so that a
pod only Kueue's gates hold — which carries its Workload's reason, Kueue's open-ended words
while it queues — never pages as a stuck pod (KubeGpuWorkloadPendingTooLong covers the queue).
The promtool cases (deploy/rules-test.yaml) check the same on Prometheus itself."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_rules_config import ERROR_LINE, _args

from kube_gpu_exporter.exporter.catalog import cluster as k
from kube_gpu_exporter.exporter.generate import command as generate
from kube_gpu_exporter.rules.alerts import all_alerts
from kube_gpu_exporter.rules.alerts.scheduling import KUEUE_REASONS, alerting_reasons
from kube_gpu_exporter.rules.config import Config, parse_config

REPO = Path(__file__).resolve().parents[2]
METRICS_MD = REPO / "docs" / "metrics.md"


def _expr(cfg: Config) -> str:
    (rule,) = (a for a in all_alerts(cfg) if a.name == "GPUPodPendingTooLong")
    return rule.expr


def test_the_rule_selects_our_reasons_less_the_ignored_ones() -> None:
    ours = [r.value for r in k.PENDING_REASONS if r is not k.Reason.GATED]
    assert list(alerting_reasons(Config().alerts.GPUPodPendingTooLong)) == ours
    assert f'reason=~"{"|".join(ours)}"' in _expr(Config())

    cfg = parse_config("alerts: {GPUPodPendingTooLong: {ignore_reasons: [gated, other]}}")
    assert f'reason=~"{"|".join(ours[:-1])}"' in _expr(cfg)
    assert not any(word in _expr(cfg) for word in KUEUE_REASONS)


def test_an_empty_ignore_list_still_leaves_kueues_words_out() -> None:
    cfg = parse_config("alerts: {GPUPodPendingTooLong: {ignore_reasons: []}}")
    everything = "|".join(r.value for r in k.PENDING_REASONS)
    assert f'reason=~"{everything}"' in _expr(cfg)


def test_metrics_md_shows_the_default_selection() -> None:
    """docs/metrics.md tells readers the selector for the scheduler's own reasons."""
    ours = "|".join(alerting_reasons(Config().alerts.GPUPodPendingTooLong))
    assert f'reason=~"{ours}"' in METRICS_MD.read_text()


def test_ignoring_every_reason_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nothing left to select would match every reason, Kueue's too: one line, exit 2."""
    path = tmp_path / "thresholds.yaml"
    every = ", ".join(k.PENDING_REASONS)
    path.write_text(f"alerts: {{GPUPodPendingTooLong: {{ignore_reasons: [{every}]}}}}")
    args = _args(config=str(path), out=str(tmp_path / "out"), runbooks=str(tmp_path / "r.md"))
    assert generate.run(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    match = ERROR_LINE.match(err.rstrip("\n"))
    assert match, err
    assert match["key"] == "alerts.GPUPodPendingTooLong.ignore_reasons", err
    assert "enabled: false" in err
