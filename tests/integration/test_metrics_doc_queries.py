"""The example queries in docs/metrics.md parse, read only series that exist, and each answers
its question: run as written over a node whose answers are known (Debian's Prometheus over its
backfilled history: a lost GPU, a hot one, a time-sliced one, a MIG-enabled A100, counters
rising at known rates), each gives exactly the expected series and values. The join of "SM
activity per pod" once failed outright on any node with a time-sliced GPU.

A reader copies these into Prometheus as they are. "memory held on a GPU nobody holds" once
listed every MIG-enabled GPU, whose framebuffer is the sum of its instances' and which no pod
holds itself; the shipped memory alerts leave such parents out (`Query.mig_parents`), and
promtool evaluates the doc's query over a small node to hold it to the same answer.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from kube_gpu_exporter.exporter.catalog import BY_NAME
from kube_gpu_exporter.exporter.catalog.xid import REBOOT_XIDS, RESET_XIDS
from kube_gpu_exporter.rules.config import Config
from kube_gpu_exporter.rules.promql import Query, agg
from kube_gpu_exporter.rules.promql_names import metric_names
from kube_gpu_exporter.rules.xid_query import xid_events
from prometheus_server import Generation, Prometheus
from tsdb_backfill import backfilled

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


def squeezed(query: str) -> str:
    return re.sub(r"\s+", "", query)


def test_the_xid_queries_count_as_the_alerts_do() -> None:
    """The hand-written critical-Xid queries (the section's block and the table's row) are
    the alerts' count of Xid events (rules/xid_query.py) over an hour, without the job
    selector: one that lacked an arm the alerts gained (the `offset` one, which keeps an event
    to the window's end on Prometheus 3) answered differently from the alert it explains."""
    critical = sorted((*RESET_XIDS, *REBOOT_XIDS))  # GPUXidErrors' and GPUXidRebootRequired's
    codes = f'xid=~"{"|".join(map(str, critical))}"'
    events = xid_events(Query(Config()), "1h", "3600", codes)
    expected = agg("max", ("instance", "gpu", "uuid", "xid"), events)
    expected = squeezed(expected).replace('job="kube-gpu-exporter",', "")
    expected = expected.replace('{job="kube-gpu-exporter"}', "")
    text = DOC.read_text(encoding="utf-8").split("\n### Xid events in a window\n", 1)[1]
    block = text.split("```promql\n", 1)[1].split("```", 1)[0]
    assert squeezed(block) == expected
    (row,) = doc_queries()["critical Xids in the last hour"]
    assert squeezed(row) == expected


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


# --- every question answered over a node whose answers are known ---------------------------

J = {"job": "kube-gpu-exporter"}
N1 = {**J, "instance": "n1"}
MIG_A = {"parent_uuid": "GPU-3", "gpu_instance_id": "1", "compute_instance_id": "0"}
MIG_B = {"parent_uuid": "GPU-3", "gpu_instance_id": "9", "compute_instance_id": "0"}
# uuid → (gpu, model, MIG labels): GPU-1 is lost, GPU-3 an A100 in MIG mode.
DEVICES = {
    "GPU-0": ("0", "H100", {}),
    "GPU-1": ("1", "H100", {}),
    "GPU-2": ("2", "H100", {}),
    "GPU-3": ("3", "A100", {}),
    "MIG-a": ("3", "A100", MIG_A),
    "MIG-b": ("3", "A100", MIG_B),
}
# (namespace, pod, uuid, sharing): trainer-0 has GPU 0, two notebooks time-slice GPU 2.
HOLDS = [
    ("ml", "trainer-0", "GPU-0", "exclusive"),
    ("lab", "notebook-a", "GPU-2", "shared"),
    ("lab", "notebook-b", "GPU-2", "shared"),
    ("ml", "mig-0", "MIG-a", "exclusive"),
]
MINUTES = 20
STEP = 15  # seconds between samples


def dev(uuid: str, **extra: str) -> dict[str, str]:
    gpu, _, mig = DEVICES[uuid]
    return {**N1, "gpu": gpu, "uuid": uuid, **mig, **extra}


def world(start: float) -> list[tuple[str, dict[str, str], list[tuple[float, float]]]]:
    """The node's series over MINUTES: constants, and counters rising at known rates."""
    times = [start + i * STEP for i in range(MINUTES * 60 // STEP + 1)]

    def const(value: float) -> list[tuple[float, float]]:
        return [(t, value) for t in times]

    def rising(per_second: float, base: float = 0) -> list[tuple[float, float]]:
        return [(t, base + per_second * (t - start)) for t in times]

    series = [
        ("nvidia_gpu_info", dev(u, model=model, parent_uuid=mig.get("parent_uuid", "")), const(1))
        for u, (_, model, mig) in DEVICES.items()
    ]
    series += [("nvidia_gpu_up", dev(u), const(0 if u == "GPU-1" else 1)) for u in DEVICES]
    used = {"GPU-0": 60e9, "GPU-2": 15e9, "GPU-3": 28e9, "MIG-a": 20e9, "MIG-b": 8e9}
    total = {"GPU-0": 80e9, "GPU-2": 80e9, "GPU-3": 40e9, "MIG-a": 20e9, "MIG-b": 10e9}
    series += [("nvidia_gpu_memory_used_bytes", dev(u), const(v)) for u, v in used.items()]
    series += [("nvidia_gpu_memory_total_bytes", dev(u), const(v)) for u, v in total.items()]
    series += [
        ("nvidia_gpu_clock_event_active", dev(u, reason=r), const(v))
        for u, r, v in [
            ("GPU-0", "hw_thermal_slowdown", 1),
            ("GPU-0", "sw_thermal_slowdown", 0),
            ("GPU-0", "sw_power_cap", 1),
            ("GPU-2", "hw_thermal_slowdown", 0),
            ("GPU-2", "sw_power_cap", 1),
        ]
    ]
    power = {"GPU-0": 600, "GPU-2": 300, "GPU-3": 200}
    series += [("nvidia_gpu_power_watts", dev(u), const(v)) for u, v in power.items()]
    series += [
        ("nvidia_gpu_xid_errors_total", dev("GPU-0", xid="13"), const(0)),
        ("nvidia_gpu_xid_errors_total", dev("GPU-3", xid="48"), const(0)),
        (  # one Xid 79 halfway: its counter appears then, at 1 (the zeros above: the flag's)
            "nvidia_gpu_xid_errors_total",
            dev("GPU-2", xid="79"),
            [(t, 1) for t in times if t - start >= MINUTES * 30],
        ),
        ("kube_gpu_exporter_xid_watch_start_timestamp_seconds", N1, const(start - 60)),
    ]
    stale = [(t, t - 120) for t in times]  # n1's last good cycle is 2 minutes old
    fresh = [(t, t) for t in times]
    last_success = "kube_gpu_exporter_last_collection_success_timestamp_seconds"
    series += [(last_success, N1, stale), (last_success, {**J, "instance": "n2"}, fresh)]
    for namespace, pod, uuid, sharing in HOLDS:
        who = {"namespace": namespace, "pod": pod, "container": "main"}
        resource = "nvidia.com/mig-3g.20gb" if uuid.startswith("MIG") else "nvidia.com/gpu"
        series.append(
            (
                "nvidia_gpu_allocation_info",
                dev(uuid, **who, resource=resource, sharing=sharing),
                const(1),
            )
        )
    pod_use = {"trainer-0": (0.9, 60e9), "notebook-a": (0.3, 10e9), "notebook-b": (0.2, 5e9)}
    for namespace, pod, uuid, _ in HOLDS:
        if pod in pod_use:
            who = {"namespace": namespace, "pod": pod, "container": "main"}
            utilization, memory = pod_use[pod]
            series.append(
                ("nvidia_gpu_pod_utilization_ratio", dev(uuid, **who), const(utilization))
            )
            series.append(("nvidia_gpu_pod_memory_used_bytes", dev(uuid, **who), const(memory)))
    owner = {"owner_kind": "StatefulSet", "workload": "notebooks"}
    series += [
        (
            "instance_uuid_namespace_pod:nvidia_gpu_idle_gpus:share",
            {**N1, "uuid": "GPU-2", "namespace": "lab", "pod": p, **owner},
            const(0.5),
        )
        for p in ("notebook-a", "notebook-b")
    ]
    view = {"job": "kube-gpu-exporter-cluster", "instance": "cluster:19401"}
    series += [
        ("kube_gpu_queue_pod_info", {**view, "namespace": ns, "pod": p, **queue}, const(1))
        for ns, p, queue in (
            ("lab", "notebook-a", {"cluster_queue": "lab-cq", "local_queue": "notebooks"}),
            ("ml", "trainer-0", {"cluster_queue": "ml-cq", "local_queue": "training"}),
        )
    ]
    for cq, lq, reason, gpus, age in (
        ("ml-cq", "training", "Pending", 8, 600),
        ("ml-cq", "training", "ExceedsMaxQuota", 16, 1200),
        ("lab-cq", "notebooks", "Pending", 2, 300),
    ):
        waiting = {**view, "cluster_queue": cq, "namespace": "ml", "local_queue": lq}
        waiting["reason"] = reason
        series.append(("kube_gpu_pending_workload_gpus", waiting, const(gpus)))
        series.append(("kube_gpu_pending_workload_seconds", waiting, const(age)))
    n3 = {**J, "instance": "n3"}  # a node whose device plugin advertises nothing
    advertised = "nvidia_gpu_node_advertised_devices"
    series += [
        ("nvidia_gpu_node_driver_gpus", N1, const(4)),
        ("nvidia_gpu_node_driver_gpus", n3, const(2)),
        ("nvidia_gpu_node_pci_gpus", N1, const(5)),
        ("nvidia_gpu_node_pci_gpus", n3, const(2)),
        ("nvidia_gpu_node_free_gpus", N1, const(0)),
        ("nvidia_gpu_node_free_gpus", n3, const(2)),
        (advertised, {**N1, "resource": "nvidia.com/gpu"}, const(2)),
        (advertised, {**N1, "resource": "nvidia.com/mig-3g.20gb"}, const(1)),
        (advertised, {**n3, "resource": "nvidia.com/gpu"}, const(0)),
    ]
    slowed = "nvidia_gpu_clock_event_duration_seconds_total"
    series += [
        ("nvidia_gpu_sm_active_ratio", dev("GPU-0"), const(0.8)),
        ("nvidia_gpu_sm_active_ratio", dev("MIG-a"), const(0.4)),
        ("nvidia_gpu_share_ratio", dev("GPU-0"), const(1)),
        ("nvidia_gpu_share_ratio", dev("GPU-2"), const(1)),
        ("nvidia_gpu_share_ratio", dev("MIG-a"), const(3 / 7)),
        ("nvidia_gpu_share_ratio", dev("MIG-b"), const(1 / 7)),
        (slowed, dev("GPU-0", reason="hw_thermal_slowdown"), rising(0.5)),
        (slowed, dev("GPU-0", reason="sw_thermal_slowdown"), const(100)),
        (slowed, dev("GPU-2", reason="hw_thermal_slowdown"), const(0)),
        (slowed, dev("GPU-2", reason="hw_power_brake_slowdown"), rising(0.25)),
        ("nvidia_gpu_pcie_replays_total", dev("GPU-0"), rising(0.2)),
        ("nvidia_gpu_pcie_replays_total", dev("GPU-2"), const(5)),
        ("nvidia_gpu_nvlink_errors_total", dev("GPU-0", link="3", type="crc_flit"), rising(1 / 60)),
        ("nvidia_gpu_nvlink_errors_total", dev("GPU-0", link="2", type="replay"), const(7)),
    ]
    return series


# Per question: the doc's placeholders as this node fills them, and for each of its queries
# the label that tells its answers apart (a tuple of them) and the answer by their values.
PLACEHOLDERS = {
    "which pod holds GPU X?": {"GPU-…": "GPU-0"},
    "who shares GPU X, and how much each?": {"GPU-…": "GPU-2"},
}
Answer = tuple[tuple[str, ...], dict[tuple[str, ...], float]]
ANSWERS: dict[str, list[Answer]] = {
    "which GPUs are lost?": [(("uuid",), {("GPU-1",): 0})],
    "memory headroom per device": [
        (
            ("uuid",),
            {("GPU-0",): 0.25, ("GPU-2",): 0.8125, ("GPU-3",): 0.3, ("MIG-a",): 0, ("MIG-b",): 0.2},
        )
    ],
    "which GPUs throttle for heat?": [(("uuid",), {("GPU-0",): 1})],
    "power per model": [(("model",), {("H100",): 900, ("A100",): 200})],
    "critical Xids in the last hour": [(("uuid", "xid"), {("GPU-2", "79"): 1})],
    "is the data fresh?": [(("instance",), {("n1",): 120})],
    "which pod holds GPU X?": [(("pod",), {("trainer-0",): 1})],
    "which GPUs does pod Y hold, on which node?": [(("instance", "uuid"), {("n1", "GPU-0"): 1})],
    "how much of this shared GPU does pod Y use?": [
        (("pod",), {("notebook-a",): 0.3}),
        (("pod",), {("notebook-a",): 10e9}),
    ],
    "who shares GPU X, and how much each?": [
        (("pod",), {("notebook-a",): 0.3, ("notebook-b",): 0.2})
    ],
    "idle allocated GPUs, per workload": [
        (("namespace", "owner_kind", "workload"), {("lab", "StatefulSet", "notebooks"): 1.0})
    ],
    "GPUs waiting in each Kueue queue, and its oldest wait": [
        (("cluster_queue",), {("ml-cq",): 24, ("lab-cq",): 2}),
        (("cluster_queue",), {("ml-cq",): 1200, ("lab-cq",): 300}),
    ],
    # notebook-a idles half of GPU 2 in lab-cq; trainer-0 (ml-cq) holds no idle GPU
    "idle GPUs per Kueue queue": [(("cluster_queue",), {("lab-cq",): 0.5})],
    "model of the GPU a pod holds": [(("pod", "model"), {("trainer-0", "H100"): 1})],
    "GPU usage per namespace": [(("namespace",), {("ml",): 0.9, ("lab",): 0.5})],
    "is the device plugin advertising what the driver sees?": [(("instance",), {("n3",): 2})],
    "GPUs on the PCI bus that NVML does not list": [(("instance",), {("n1",): 1})],
    "free whole GPUs per node (fragmentation)": [(("instance",), {("n1",): 0, ("n3",): 2})],
    UNHELD_MEMORY: [(("uuid",), {("MIG-b",): 8e9})],
    "SM activity per pod on H100 MIG": [
        (("uuid", "pod"), {("GPU-0", "trainer-0"): 0.8, ("MIG-a", "mig-0"): 0.4})
    ],
    "allocated GPUs, MIG slices as fractions": [((), {(): 3 + 3 / 7})],
    "share of time throttled for heat": [(("uuid",), {("GPU-0",): 0.5, ("GPU-2",): 0})],
    "PCIe link degrading": [(("uuid",), {("GPU-0",): 0.2})],
    "which NVLink of a GPU is erroring": [(("uuid", "link"), {("GPU-0", "3"): 10})],
}


@pytest.fixture(scope="module")
def answered(
    tmp_path_factory: pytest.TempPathFactory, generation: Generation
) -> Iterator[tuple[Prometheus, float]]:
    """Prometheus of each generation over the node's MINUTES of history; (server, the last
    sample's time, at which the questions are asked)."""
    tmp = tmp_path_factory.mktemp("doc-queries")
    start = (time.time() - MINUTES * 60 - 600) // 60 * 60
    noop = tmp / "rules.yaml"  # nothing to record: the one recorded series is in the world
    rule = {"record": "doc:noop:sum", "expr": "vector(1)"}
    noop.write_text(yaml.safe_dump({"groups": [{"name": "n", "rules": [rule]}]}))
    end = start + MINUTES * 60
    with backfilled(tmp, world(start), noop, start, end, generation=generation) as prom:
        yield prom, end


def test_every_question_has_its_answer() -> None:
    assert set(ANSWERS) == set(doc_queries())
    assert all(len(ANSWERS[q]) == len(queries) for q, queries in doc_queries().items())


@pytest.mark.parametrize("question", sorted(doc_queries()))
def test_each_query_answers_its_question(answered: tuple[Prometheus, float], question: str) -> None:
    """The doc's query, run as written (its placeholders filled), answers the question over
    the node: exactly the expected series, with the expected values (rates within 5 %)."""
    prom, at = answered
    for query, (labels, expected) in zip(doc_queries()[question], ANSWERS[question], strict=True):
        for placeholder, value in PLACEHOLDERS.get(question, {}).items():
            query = query.replace(placeholder, value)
        result = prom.api("query", query=query, time=str(at))["result"]
        got = {tuple(r["metric"].get(k, "") for k in labels): float(r["value"][1]) for r in result}
        assert len(got) == len(result), f"{query}: answers not told apart by {labels}: {result}"
        assert got == pytest.approx(expected, rel=0.05, abs=1e-9), query
