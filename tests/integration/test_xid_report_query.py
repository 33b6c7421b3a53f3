"""The report's Xid count over a period (rules/xid_query.py `xid_events_over`), evaluated by
promtool of both generations: counters appear at their first event, at 1, and a GPU may be
gone before the period ends. The alerts' instant query is tested by the generated promtool
cases (rules/alerts/xid_events.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from kube_gpu_exporter.rules.config import Config
from kube_gpu_exporter.rules.promql import Query
from kube_gpu_exporter.rules.xid_query import xid_events_over
from prometheus_server import Generation

JOB = 'job="kube-gpu-exporter"'
START = "kube_gpu_exporter_xid_watch_start_timestamp_seconds"
XID = "nvidia_gpu_xid_errors_total"


def _xid(node: str, gpu: int) -> str:
    return f'{XID}{{{JOB}, instance="{node}", gpu="{gpu}", xid="79"}}'


# Minutes 0 to 90, one sample a minute; the report reads the last hour at minute 90.
SERIES = {
    # node a has counted since minute 0 and is scraped throughout
    f'{START}{{{JOB}, instance="a"}}': "0+0x90",
    _xid("a", 1): "_x40 1+0x4 2+0x4 3+0x9 stale",  # born at 40, 3 by 50, GPU gone at 60
    _xid("a", 2): "2+0x90",  # old: nothing in the period
    _xid("a", 3): "2+0x59 4+0x30",  # old, then two more at 60
    # node b's exporter restarted at 50 (continuous scrapes), no new Xid since
    f'{START}{{{JOB}, instance="b"}}': "0+0x49 3000+0x40",
    _xid("b", 1): "3+0x49 stale",
    # node c joined at 45 (its exporter started then); an Xid at 50
    f'{START}{{{JOB}, instance="c"}}': "_x45 2700+0x45",
    _xid("c", 1): "_x50 1+0x40",
}
EXPECTED = {("a", "1"): 3, ("a", "3"): 2, ("c", "1"): 1}


def test_the_report_counts_first_xids_and_those_of_gpus_gone(
    tmp_path: Path, generation: Generation
) -> None:
    events = xid_events_over(Query(Config()), "1h", "3600")
    expr = f"round(sum by (instance, gpu) ({events}))"
    tests = {
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": k, "values": v} for k, v in SERIES.items()],
                "promql_expr_test": [
                    {
                        "expr": expr,
                        "eval_time": "90m",
                        "exp_samples": [
                            {"labels": f'{{instance="{n}", gpu="{g}"}}', "value": v}
                            for (n, g), v in EXPECTED.items()
                        ],
                    }
                ],
            }
        ]
    }
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(tests))
    done = subprocess.run(
        [generation.promtool, "test", "rules", "t.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
