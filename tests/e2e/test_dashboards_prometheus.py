"""Every dashboard query, variables filled in, run against Debian's Prometheus scraping the
exporter on the demo scenario, with a kubelet (podresources/v1 over gRPC) whose pods hold some
of its GPUs and with the generated recording rules loaded: each query returns data.

The scheduling panels read the cluster view: `kube-gpu-exporter cluster` runs against the test
API server with a fragmented pending pod, a quota, two pods scheduled one after the other (so
the wait percentiles have a rate) and a preempted pod. The queries that read
kube-state-metrics (pending pods per pod) run against a fixed exposition of those series,
scraped as the `kube-state-metrics` job.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from cluster_objects import CREATED, disrupted, make_gpu_pod, make_node, make_quota, scheduled
from kube_gpu_exporter.demo.kube_api import KubeApiServer
from kube_gpu_exporter.grafana.dashboards import build_all
from kube_gpu_exporter.rules.config import Config
from kubelet_server import FakeKubelet, container, devices, pod
from prometheus_server import Prometheus, run_prometheus
from support import Exporter, run_exporter, serve_exposition, values, wait_until

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "exporter" / "simulated" / "scenarios" / "demo.yaml"
RULES = REPO / "deploy" / "rules.yaml"


def _queries() -> list[Any]:
    params = []
    for dashboard in build_all(Config()):
        for panel in dashboard.panels():
            for ref, target in zip("ABCDEFGH", panel.targets, strict=False):
                ident = f"{dashboard.uid}/{panel.title}/{ref}"
                params.append(pytest.param(target.expr, id=ident))
        for variable in dashboard.variables:
            if variable.kind == "query":
                ident = f"{dashboard.uid}/${variable.name}"
                params.append(pytest.param(variable.query, id=ident))
    return params


def fill(expr: str, target: str) -> str:
    """Grafana's variables as a test dashboard would set them."""
    expr = re.sub(r"label_values\((.*),\s*(\w+)\)$", r"count by (\2) (\1)", expr, flags=re.S)
    values = {
        "__rate_interval": "1m",
        "__interval": "15s",
        "__range": "5m",
        "node": target,
        "cluster": ".*",
        "gpu": ".*",
        "namespace": ".*",
        "pod": ".*",
    }
    return re.sub(r"\$\{?(\w+)\}?", lambda m: values[m.group(1)], expr)


GPU = "GPU-{0:08x}-0000-4000-8000-{0:012x}".format  # the demo's uuids
MIG_3G = "MIG-00030001-0000-4000-8000-000000000000"
MIG_2G = "MIG-00030005-0000-4000-8000-000000000001"

# What kube-state-metrics says of the demo's pods: a pod Pending on a GPU.
KUBE_STATE_METRICS = "".join(
    f"{series} {value}\n"
    for series, value in (
        ('kube_pod_status_phase{namespace="ml",pod="trainer-1",phase="Pending"}', 1),
        ('kube_pod_status_phase{namespace="ml",pod="trainer-1",phase="Running"}', 0),
        (
            'kube_pod_container_resource_requests{namespace="ml",pod="trainer-1",'
            'container="main",resource="nvidia_com_gpu",unit="integer"}',
            2,
        ),
    )
)


@contextmanager
def cluster_view(tmp: Path) -> Iterator[tuple[KubeApiServer, Exporter]]:
    """The cluster view over three H100 nodes, two with one free GPU (the third's is the
    preempted pod's), a pod wanting two (fragmented) and a GPU quota."""
    with KubeApiServer() as api:
        for name in ("gpu-a", "gpu-b", "gpu-c"):
            api.put_node(make_node(name))
            api.put(make_gpu_pod(f"holder-{name}", 7, "batch", node=name))
        api.put(make_gpu_pod("train", 2, "frag"))
        api.put_quota(make_quota("gpu-quota", "ml", hard=8, used=2))
        api.put(
            disrupted(make_gpu_pod("victim", 1, "batch", node="gpu-a"), "PreemptionByScheduler")
        )
        kubeconfig = api.write_kubeconfig(tmp / "kubeconfig")
        args = [f"--kubernetes.kubeconfig={kubeconfig}", "--cluster.interval=200ms"]
        with run_exporter(args, tmp / "cluster", command="cluster") as view:
            yield api, view


def schedule_one(api: KubeApiServer, view: Exporter, name: str, waited: int) -> None:
    """A GPU pod of namespace ml seen pending by the view, then bound `waited` s after its
    creation: one scheduling-wait observation. It is bound to a node the view does not
    know, so the free GPUs (and the fragmented pod's reason) stay as they are."""
    pending = make_gpu_pod(name, 1, "ml")
    api.put(pending)
    wait_until(
        lambda: values(view.metrics(), "kube_gpu_pending_pods", namespace="ml") or None,
        what=f"the view sees {name} pending",
    )
    at = CREATED.replace("10:00:00", f"10:00:{waited:02d}")
    api.put(scheduled(pending, "elsewhere", at))


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Prometheus, str]]:
    """The demo node scraped every second, with the generated rules evaluated every second.

    Added to the demo: an Xid on two GPUs (so the Xid panels have series) and a kubelet whose
    pods hold a busy GPU, an idle GPU and a MIG instance, leaving one GPU free.
    """
    tmp = tmp_path_factory.mktemp("dashboards")
    scenario = yaml.safe_load(DEMO.read_text())
    scenario["devices"][0]["timeline"] = [{"at": 0, "xid": [13]}]
    scenario["devices"][2]["timeline"].append({"at": 0, "xid": [79]})
    path = tmp / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario))
    socket = tmp / "kubelet.sock"
    args = [
        "--simulate",
        str(path),
        "--collector.interval=1s",
        f"--kubelet.pod-resources-socket={socket}",
        "--kubelet.interval=1s",
    ]
    with FakeKubelet(socket) as kubelet:
        kubelet.pods = [
            pod("ml", "trainer-0", container("main", devices("nvidia.com/gpu", GPU(0)))),
            pod("lab", "notebook-a", container("jupyter", devices("nvidia.com/gpu", GPU(1)))),
            pod("ml", "mig-0", container("main", devices("nvidia.com/mig-3g.20gb", MIG_3G))),
        ]
        kubelet.allocatable = [
            devices("nvidia.com/gpu", GPU(0), GPU(1), GPU(2)),
            devices("nvidia.com/mig-3g.20gb", MIG_3G),
            devices("nvidia.com/mig-2g.10gb", MIG_2G),
        ]
        (tmp / "cluster").mkdir()
        with (
            run_exporter(args, tmp) as exporter,
            serve_exposition(KUBE_STATE_METRICS) as ksm,
            cluster_view(tmp) as (api, view),
        ):
            target = f"127.0.0.1:{exporter.port}"
            jobs = {
                "kube-state-metrics": [ksm],
                "kube-gpu-exporter-cluster": [f"127.0.0.1:{view.port}"],
            }
            with run_prometheus(tmp, [target], rule_files=[RULES], extra_jobs=jobs) as prom:
                prom.wait_for('count_over_time(nvidia_gpu_up{job="kube-gpu-exporter"}[1m]) >= 3', 7)
                prom.wait_for("cluster:nvidia_gpu_utilization_ratio:avg")
                # Two waits, scraped apart, so that their histogram has a rate.
                schedule_one(api, view, "first", 30)
                prom.wait_for("kube_gpu_scheduling_wait_seconds_count == 1")
                schedule_one(api, view, "second", 50)
                prom.wait_for(
                    'cluster_quantile:kube_gpu_scheduling_wait_seconds:histogram_quantile{quantile="0.95"}'
                )
                # The idle-hours subquery steps on 15-second boundaries: wait for the first.
                prom.wait_for("cluster:nvidia_gpu_idle_cost:sum1h", timeout=45)
                yield prom, target


@pytest.mark.parametrize("expr", _queries())
def test_every_dashboard_query_returns_data(prometheus: tuple[Prometheus, str], expr: str) -> None:
    prom, target = prometheus
    query = fill(expr, target)
    assert prom.query(query), f"no data for {query}"


def test_the_variables_are_filled() -> None:
    for param in _queries():
        assert "$" not in fill(param.values[0], "127.0.0.1:19400")


def test_every_rule_evaluates_without_error(prometheus: tuple[Prometheus, str]) -> None:
    """The generated rules on real exporter output (pods, MIG, Xids): no rule errors, e.g. a
    join that turns many-to-many on labels the promtool inputs lacked."""
    prom, _ = prometheus
    groups = prom.api("rules")["groups"]
    rules = [r for g in groups for r in g["rules"]]
    assert len(rules) == len(
        [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    )
    broken = [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"]
    assert not broken, broken
