"""The example queries in docs/metrics.md parse, read only series that exist, and the one that
finds memory nobody holds gives what it says on a node with a MIG-enabled GPU.

A reader copies these into Prometheus as they are. "memory held on a GPU nobody holds" once
listed every MIG-enabled GPU, whose framebuffer is the sum of its instances' and which no pod
holds itself; the shipped memory alerts leave such parents out (`Query.mig_parents`), and
promtool evaluates the doc's query over a small node to hold it to the same answer.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from kube_gpu_exporter.exporter.catalog import BY_NAME
from kube_gpu_exporter.rules.promql_names import metric_names

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "metrics.md"
RULES = REPO / "deploy" / "rules.yaml"
UNHELD_MEMORY = "memory held on a GPU nobody holds"

needs_promtool = pytest.mark.skipif(
    shutil.which("promtool") is None, reason="Debian's promtool is not installed"
)


def doc_queries() -> dict[str, list[str]]:
    """The `## Queries` table: each question's PromQL (a row may give two, joined by prose)."""
    section = DOC.read_text(encoding="utf-8").split("\n## Queries\n", 1)[1].split("\n## ", 1)[0]
    queries: dict[str, list[str]] = {}
    for row in section.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", row)[1:-1]]
        if len(cells) != 2 or cells[0] in ("question", "---"):
            continue
        spans = [s.replace("\\|", "|") for s in re.findall(r"`([^`]+)`", cells[1])]
        # Label names quoted in the prose (`namespace`) are not queries.
        queries[cells[0]] = [s for s in spans if not re.fullmatch(r"[a-z_]+", s) or s in BY_NAME]
    return queries


def recorded_names() -> set[str]:
    groups = yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
    return {r["record"] for g in groups for r in g["rules"] if "record" in r}


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["promtool", *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


def test_the_table_is_read() -> None:
    queries = doc_queries()
    assert len(queries) >= 20 and UNHELD_MEMORY in queries
    assert all(queries.values()), [q for q, found in queries.items() if not found]


def test_queries_read_only_known_series() -> None:
    known = set(BY_NAME) | recorded_names()
    for question, queries in doc_queries().items():
        for query in queries:
            unknown = metric_names(query) - known
            assert not unknown, f"{question}: {query!r} reads unknown series {unknown}"


@needs_promtool
def test_queries_parse(tmp_path: Path) -> None:
    rules = [
        {"record": f"doc:metrics_{i}:query", "expr": query}
        for i, query in enumerate(q for queries in doc_queries().values() for q in queries)
    ]
    (tmp_path / "doc.yaml").write_text(
        yaml.safe_dump({"groups": [{"name": "doc", "rules": rules}]})
    )
    result = promtool("check", "rules", "doc.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def _device(name: str, uuid: str, gpu: str, instance_id: str = "") -> str:
    """A device series as the exporter labels it: MIG instances carry their parent's uuid and
    their instance ids (exporter/catalog/metric.py)."""
    labels = f'instance="n1", gpu="{gpu}", uuid="{uuid}"'
    if instance_id:
        labels += f', parent_uuid="GPU-parent", gpu_instance_id="{instance_id}"'
        labels += ', compute_instance_id="0"'
    return f"{name}{{{labels}}}"


@needs_promtool
def test_unheld_memory_leaves_mig_parents_out(tmp_path: Path) -> None:
    """GPU 0 is MIG-enabled: its instance MIG-a is held, MIG-b is not. GPU 1 holds memory and
    no pod; GPU 2 is held; GPU 3 is unheld and empty. Only MIG-b and GPU 1 are answers."""
    (query,) = doc_queries()[UNHELD_MEMORY]
    devices = {  # uuid: (gpu, MIG instance id, memory used, holding pod)
        "GPU-parent": ("0", "", "40e9", ""),
        "MIG-a": ("0", "1", "30e9", "trainer"),
        "MIG-b": ("0", "2", "10e9", ""),
        "GPU-lone": ("1", "", "5e9", ""),
        "GPU-held": ("2", "", "5e9", "notebook"),
        "GPU-empty": ("3", "", "0", ""),
    }
    series: dict[str, str] = {}
    for uuid, (gpu, instance_id, used, pod) in devices.items():
        series[_device("nvidia_gpu_info", uuid, gpu, instance_id)] = "1x5"
        series[_device("nvidia_gpu_memory_used_bytes", uuid, gpu, instance_id)] = f"{used}x5"
        if pod:
            holder = f'nvidia_gpu_allocation_info{{instance="n1", uuid="{uuid}", pod="{pod}"}}'
            series[holder] = "1x5"
    expected = [
        {"labels": _device("nvidia_gpu_memory_used_bytes", "MIG-b", "0", "2"), "value": 10e9},
        {"labels": _device("nvidia_gpu_memory_used_bytes", "GPU-lone", "1"), "value": 5e9},
    ]
    test = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": s, "values": v} for s, v in series.items()],
                "promql_expr_test": [{"expr": query, "eval_time": "2m", "exp_samples": expected}],
            }
        ],
    }
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(test, sort_keys=False))
    result = promtool("test", "rules", "test.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
