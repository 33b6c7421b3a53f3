"""`kube-gpu-exporter report` against Debian's Prometheus holding six hours of a known fleet
(tests/fakes/report_scenario.py) and the generated recording rules backfilled over them
(tests/fakes/tsdb_backfill.py): every table's numbers against what the scenario makes them,
the three formats against each other, and the page as headless Chromium renders it.

GPU-hours carry a tolerance of 0.1: promtool's blocks have no staleness markers, so the last
sample of each series still counts for the lookback (2 minutes here) after the data ends, and
the report's grid is 2 minutes: up to 4 minutes too many of a six-hour count.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from kube_gpu_exporter.rules.config import Config
from kube_gpu_exporter.rules.recording import recording_groups
from kube_gpu_exporter.rules.render import rules_file
from prometheus_server import Generation, Prometheus
from report_scenario import EXPECTED, HOURS, fleet
from support import exporter_command
from tsdb_backfill import backfilled

TOLERANCE = 0.1  # GPU-hours (see the module docstring)
PRICE = Config().cost.gpu_hour


@pytest.fixture(scope="module")
def prometheus(
    tmp_path_factory: pytest.TempPathFactory, generation: Generation
) -> Iterator[Prometheus]:
    work = tmp_path_factory.mktemp("report")
    cfg = Config()
    rules = work / "rules.yaml"
    rules.write_text(rules_file(cfg, recording_groups(cfg)))
    start = (time.time() - HOURS * 3600 - 120) // 60 * 60
    end = start + HOURS * 3600
    with backfilled(work, fleet(start), rules, start, end, generation=generation) as server:
        yield server


def report(prometheus: Prometheus, out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = exporter_command("report", f"--prometheus={prometheus.url}", "--since=7h")
    return subprocess.run(
        [*command, f"--out={out}", *args], capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def outputs(prometheus: Prometheus, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The report in the three formats, from the same Prometheus."""
    folder = tmp_path_factory.mktemp("out")
    for fmt in ("html", "json", "csv"):
        done = report(prometheus, folder / f"gpu-report.{fmt}", f"--format={fmt}")
        assert done.returncode == 0, done.stderr
        assert done.stderr == ""  # no progress line: stderr is not a terminal
    html = (folder / "gpu-report.html").read_text()
    data = json.loads((folder / "gpu-report.json").read_text())
    sheets = {
        key: list(csv.reader((folder / f"gpu-report.{key}.csv").open())) for key in data["tables"]
    }
    return {"folder": folder, "html": html, "json": data, "csv": sheets}


def rows(outputs: dict[str, Any], key: str) -> list[dict[str, Any]]:
    return list(outputs["json"]["tables"][key]["rows"])


def test_namespaces_gpu_hours_and_idle_cost(outputs: dict[str, Any]) -> None:
    by_ns = {row["namespace"]: row for row in rows(outputs, "namespaces")}
    assert set(by_ns) == set(EXPECTED)
    for ns, (allocated, idle) in EXPECTED.items():
        row = by_ns[ns]
        assert row["allocated_gpu_hours"] == pytest.approx(allocated, abs=TOLERANCE), ns
        assert row["idle_gpu_hours"] == pytest.approx(idle, abs=TOLERANCE), ns
        assert row["busy_gpu_hours"] == pytest.approx(allocated - idle, abs=TOLERANCE), ns
        # The cost is the idle GPU-hours at the config's price, to the cent.
        assert row["idle_cost"] == pytest.approx(row["idle_gpu_hours"] * PRICE, abs=0.02), ns
    # The idle notebook, a whole GPU unused for six hours, costs the most.
    assert rows(outputs, "namespaces")[0]["namespace"] == "notebooks"
    assert by_ns["notebooks"]["idle_cost"] == pytest.approx(6 * PRICE, abs=TOLERANCE * PRICE)


def test_summary_adds_up_the_namespaces(outputs: dict[str, Any]) -> None:
    (summary,) = rows(outputs, "summary")
    assert summary["gpus"] == 4  # three H100s and the A100 whose slices are MIG instances
    assert summary["utilization_percent"] == pytest.approx((0 + 90 + 80) / 3, abs=0.1)
    assert summary["target_percent"] == 70.0
    allocated = sum(a for a, _ in EXPECTED.values())
    idle = sum(i for _, i in EXPECTED.values())
    assert summary["allocated_gpu_hours"] == pytest.approx(allocated, abs=4 * TOLERANCE)
    assert summary["idle_gpu_hours"] == pytest.approx(idle, abs=4 * TOLERANCE)
    assert summary["idle_cost"] == pytest.approx(summary["idle_gpu_hours"] * PRICE, abs=0.02)


def test_worst_idle_workloads_with_their_gpus(outputs: dict[str, Any]) -> None:
    found = [(r["namespace"], r["workload"], r["gpus"]) for r in rows(outputs, "idle_workloads")]
    assert found == [
        ("notebooks", "jupyter-alice", "node-a:19400 GPU 0"),
        ("team-shared", "svc-c", "node-a:19400 GPU 2 ×0.333"),
        ("research", "dev-0", "node-b:19400 GPU 0 ×0.286"),
    ]
    hours = [r["idle_gpu_hours"] for r in rows(outputs, "idle_workloads")]
    assert hours == pytest.approx([6.0, 2.0, 6 * 2 / 7], abs=TOLERANCE)


def test_mig_slices_and_shared_gpus_count_by_their_weight(outputs: dict[str, Any]) -> None:
    holds = {r["pod"]: r for r in rows(outputs, "fractional_holds")}
    assert set(holds) == {"svc-a", "svc-b", "svc-c", "inference-0", "dev-0"}  # no whole GPU
    assert holds["inference-0"]["profile"] == "3g.20gb"
    assert holds["inference-0"]["weight"] == round(3 / 7, 3)
    assert holds["dev-0"]["profile"] == "2g.10gb"
    assert holds["dev-0"]["weight"] == round(2 / 7, 3)
    for pod in ("svc-a", "svc-b", "svc-c"):
        assert (holds[pod]["profile"], holds[pod]["weight"]) == ("shared", 0.333)
        assert holds[pod]["allocated_gpu_hours"] == pytest.approx(2.0, abs=TOLERANCE)
    assert holds["svc-c"]["idle_gpu_hours"] == pytest.approx(2.0, abs=TOLERANCE)
    assert holds["svc-a"]["idle_gpu_hours"] == 0
    assert holds["inference-0"]["idle_gpu_hours"] == 0
    assert holds["dev-0"]["idle_gpu_hours"] == pytest.approx(6 * 2 / 7, abs=TOLERANCE)


def test_thermal_slowdowns_and_xids_per_gpu(outputs: dict[str, Any]) -> None:
    (slowed,) = rows(outputs, "slowdowns")
    assert (slowed["node"], slowed["gpu"], slowed["reason"]) == (
        "node-a:19400",
        "1",
        "hw_thermal_slowdown",
    )
    assert slowed["slowed_hours"] == pytest.approx(2.0, abs=0.05)
    assert slowed["slowed_percent"] == pytest.approx(200 / 7, abs=0.5)  # 2 h of the 7 h asked
    assert slowed["hottest_celsius"] == 88
    (xid,) = rows(outputs, "xids")
    assert (xid["node"], xid["gpu"], xid["xid"], xid["events"]) == ("node-a:19400", "1", "13", 1)
    assert xid["name"] == "Graphics Engine Exception"


def test_pending_demand_from_the_cluster_view(outputs: dict[str, Any]) -> None:
    (waiting,) = rows(outputs, "pending")
    assert (waiting["namespace"], waiting["reason"], waiting["peak_pods"]) == (
        "ml",
        "insufficient_gpus",
        2,
    )
    assert waiting["mean_pods"] == pytest.approx(2 * 2 / 7, abs=0.02)  # 2 pods for 2 h of 7
    assert waiting["longest_wait_hours"] == pytest.approx(2.0, abs=0.05)


def test_kueue_queues_waits_and_quota(outputs: dict[str, Any]) -> None:
    """2 GPUs waited in ml-cq for hours 2-4 (the lookback adds up to 2 minutes after the
    data ends); lab-cq had quota and nothing waiting, its use never counted."""
    ml, lab = rows(outputs, "queues")
    assert (ml["cluster_queue"], lab["cluster_queue"]) == ("ml-cq", "lab-cq")
    assert ml["waited_gpu_hours"] == pytest.approx(4.0, abs=0.15)
    assert ml["peak_gpus_waiting"] == 2
    assert ml["longest_wait_hours"] == pytest.approx(2.0, abs=0.05)
    assert (lab["waited_gpu_hours"], lab["longest_wait_hours"]) == (0.0, None)
    quota = {(r["cluster_queue"], r["flavor"]): r for r in rows(outputs, "queue_quota")}
    h100, a100 = quota["ml-cq", "h100"], quota["lab-cq", "a100"]
    assert (h100["nominal"], h100["borrowing_limit"], h100["used_peak"]) == (8, 4, 12)
    assert h100["used_mean"] == pytest.approx((2 * 12 + 4 * 4) / 6, abs=0.05)
    assert (a100["nominal"], a100["borrowing_limit"], a100["used_mean"]) == (2, None, None)


class _Tables(HTMLParser):
    """Every `<table data-table=…>`'s cells and the summary cards' values, as the page shows."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.cards: dict[str, str] = {}
        self._table: str | None = None
        self._card: str | None = None
        self._cell: list[str] | None = None
        self._value = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "table" and a.get("data-table"):
            self._table = a["data-table"]
            self.tables[self._table] = []
        elif tag == "tr" and self._table:
            self.tables[self._table].append([])
        elif tag == "td" and self._table:
            self._cell = []
        elif tag == "div" and a.get("data-key"):
            self._card = a["data-key"]
        elif tag == "div" and self._card and a.get("class") == "value":
            self._value = True

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._table = None
        elif tag == "td" and self._table and self._cell is not None:
            self.tables[self._table][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "div" and self._value:
            self._value, self._card = False, None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)
        elif self._value and self._card:
            self.cards[self._card] = self.cards.get(self._card, "") + data.strip()


def test_json_and_csv_hold_the_html_tables(outputs: dict[str, Any]) -> None:
    page = _Tables()
    page.feed(outputs["html"])
    for key, table in outputs["json"]["tables"].items():
        sheet = outputs["csv"][key]
        assert sheet[0] == table["columns"], key
        if key == "summary":
            assert [page.cards[c] for c in table["columns"]] == sheet[1], key
            continue
        shown = [r for r in page.tables.get(key, []) if r]  # the header row has no <td>
        assert shown == sheet[1:], key
        for cells, row in zip(shown, table["rows"], strict=True):
            for cell, column in zip(cells, table["columns"], strict=True):
                value = row[column]
                assert cell == (value if isinstance(value, str) else cell), (key, column)
                if isinstance(value, float):
                    assert float(cell) == value, (key, column)


def test_chromium_renders_every_section_and_chart(outputs: dict[str, Any]) -> None:
    chromium = shutil.which("chromium")
    assert chromium, "Debian's chromium is not installed (make test installs it)"
    page = outputs["folder"] / "gpu-report.html"
    headless = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    dom = subprocess.run(
        [*headless, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120
    ).stdout
    sections = ("namespaces", "idle_workloads", "fractional_holds", "slowdowns", "xids")
    for section in (*sections, "queues", "queue_quota"):
        assert f'id="table-{section}"' in dom, section
    for chart in ("utilization", "allocation", "slowdowns", "pending"):
        start = dom.index(f'id="chart-{chart}"')
        svg = dom[start : dom.index("</section>", start)]
        assert "<svg" in svg and svg.count("<path") > 5, chart  # axes, ticks and the lines
    # Nothing to fetch: no script, stylesheet, image or font from anywhere, and every link
    # inside the SVGs points into the page (`#id`).
    html = outputs["html"]
    for fetching in ("<script", "<link", "<img", "src=", "@import"):
        assert fetching not in html, fetching
    assert all(part.startswith('"#') for part in html.split("href=")[1:])
    assert all(part.startswith("#") for part in html.split("url(")[1:])
    shot = outputs["folder"] / "report.png"
    subprocess.run(
        [*headless, f"--screenshot={shot}", "--window-size=1280,900", page.as_uri()],
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert shot.stat().st_size > 10_000
    if os.environ.get("REPORT_SCREENSHOT"):  # docs/img/report.png is made this way
        shutil.copyfile(shot, os.environ["REPORT_SCREENSHOT"])


def test_namespace_filter(prometheus: Prometheus, tmp_path: Path) -> None:
    done = report(prometheus, tmp_path / "r.json", "--format=json", "--namespace=research")
    assert done.returncode == 0, done.stderr
    data = json.loads((tmp_path / "r.json").read_text())
    assert [r["namespace"] for r in data["tables"]["namespaces"]["rows"]] == ["research"]
    (summary,) = data["tables"]["summary"]["rows"]
    assert summary["idle_gpu_hours"] == pytest.approx(6 * 2 / 7, abs=TOLERANCE)
    assert {r["namespace"] for r in data["tables"]["fractional_holds"]["rows"]} == {"research"}
    assert data["tables"]["pending"]["rows"] == []  # scheduling data, but none waited here


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--since=yesterday",), "--since 'yesterday': not a duration"),
        (("--namespace=nobody",), "--namespace nobody: held no GPU in the last 7h"),
        (("--namespace=Bad_Name",), "not a Kubernetes namespace name"),
        (("--cluster=prod",), "--cluster needs the thresholds file's labels.cluster"),
        (("--format=pdf",), "invalid choice"),
    ],
)
def test_bad_input_is_one_line(
    prometheus: Prometheus, tmp_path: Path, args: tuple[str, ...], says: str
) -> None:
    done = report(prometheus, tmp_path / "r.html", *args)
    assert done.returncode == 2
    assert says in done.stderr
    assert len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr


def test_bad_places_are_one_line(prometheus: Prometheus, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    cases = [
        ("http://127.0.0.1:9/", tmp_path / "r.html", "cannot reach Prometheus at"),
        (prometheus.url, blocker / "r.html", "is not a directory"),
        (prometheus.url, tmp_path, "is a directory"),
        (f"{prometheus.url}/graph", tmp_path / "r.html", "does not answer as a Prometheus API"),
    ]
    for url, out, says in cases:
        done = subprocess.run(
            [*exporter_command("report", f"--prometheus={url}", f"--out={out}")],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2, (url, out)
        assert says in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr


def test_no_data_for_the_period(prometheus: Prometheus, tmp_path: Path) -> None:
    """The data ends minutes ago; a Prometheus asked about the exporter under another job has
    none, and says which selector found nothing."""
    thresholds = tmp_path / "thresholds.yaml"
    thresholds.write_text('selectors:\n  exporter: job="other"\n')
    done = report(prometheus, tmp_path / "r.html", f"--thresholds={thresholds}")
    assert done.returncode == 2
    assert "no kube-gpu-exporter data in the last 7h" in done.stderr
    assert 'job="other"' in done.stderr and len(done.stderr.splitlines()) == 1
