"""`kube-gpu-exporter cluster` counting pods refused for an exceeded GPU quota, from the
FailedCreate events the test API server serves over real HTTP: the baseline at start, new
events and their repeats, events that are not GPU quota refusals, a relist after 410, and an
events watch that fails while the rest of the view is served."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

from cluster_objects import make_quota, quota_refusal
from kube_gpu_exporter.demo.kube_api import EVENTS, EVENTS_PATH, KubeApiServer, make_event
from support import Exporter, run_exporter, values, wait_until

GPU = "nvidia.com/gpu"
REJECTED = "kube_gpu_quota_rejected_pods_total"
WATCHES = ("nodes", "pods", "resourcequotas", "events")
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture
def api() -> Iterator[KubeApiServer]:
    with KubeApiServer() as server:
        server.put_quota(make_quota("gpu-quota", "team", hard=8, used=8))
        yield server


def start(api: KubeApiServer, tmp_path: Path) -> AbstractContextManager[Exporter]:
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    args = [f"--kubernetes.kubeconfig={kubeconfig}", "--cluster.interval=200ms"]
    return run_exporter(args, tmp_path, command="cluster")


def refused(name: str, count: int = 1, namespace: str = "team", quota: str = "gpu-quota") -> Any:
    """A ReplicaSet's FailedCreate event: `quota` refused 4 more GPUs."""
    message = quota_refusal(quota, {f"requests.{GPU}": "4"})
    return make_event(name, namespace, message=message, count=count, uid=f"uid-{name}")


def rejected(m: Samples) -> dict[tuple[str, str, str], float]:
    """(namespace, quota, resource) → pods refused."""
    out = {}
    for (name, labels), value in m.items():
        if name == REJECTED:
            got = dict(labels)
            out[(got["namespace"], got["quota"], got["resource"])] = value
    return out


def counted(exporter: Exporter, want: dict[tuple[str, str, str], float], what: str) -> Samples:
    return exporter.metrics_when(lambda m: rejected(m) == want, what)


TEAM = ("team", "gpu-quota", GPU)


def test_refusals_are_counted_from_failed_create_events(api: KubeApiServer, tmp_path: Path) -> None:
    api.put_event(refused("train-old.1", count=7))  # before the start: a baseline
    with start(api, tmp_path) as exporter:
        m = counted(exporter, {TEAM: 0}, "the baseline's series at 0")
        # labelled as the quota's own series
        assert values(m, "kube_gpu_quota_hard", namespace="team", quota="gpu-quota") == [8]
        assert values(m, "kube_gpu_quota_hard", resource=GPU) == [8]
        assert values(m, "kube_gpu_cluster_watched_objects", resource="events") == [1]

        api.put_event(refused("train-7f9c.1"))
        counted(exporter, {TEAM: 1}, "a new refusal counted")
        api.put_event(refused("train-7f9c.1", count=3))  # the recorder folded two repeats
        counted(exporter, {TEAM: 3}, "its repeats counted")

        # not GPU quota refusals: a CPU quota, a webhook's denial, a Normal event
        cpu = quota_refusal("cpu-quota", {"requests.cpu": "64"})
        api.put_event(make_event("cpu.1", "team", message=cpu, count=5))
        denial = 'Error creating: admission webhook "gpu.example.com" denied the request'
        api.put_event(make_event("hook.1", "team", message=denial, count=5))
        api.put_event(
            make_event("ok.1", "team", message="Created pod: train-7f9c-x", kind="Normal")
        )
        # events arrive in order: once this one is counted, the three above were seen
        api.put_event(refused("eval.1", namespace="eval"))
        m = counted(exporter, {TEAM: 3, ("eval", "gpu-quota", GPU): 1}, "only refusals counted")
        assert values(m, "kube_gpu_cluster_watched_objects", resource="events") == [3]

        # changes the watch never delivers, then 410: the relist counts only those
        api.put_event(refused("train-7f9c.1", count=4), notify=False)
        api.put_event(refused("missed.1", count=2), notify=False)
        api.delete_event("eval", "eval.1", notify=False)
        lists = len(api.lists(EVENTS_PATH))
        api.expire("event")
        wait_until(lambda: len(api.lists(EVENTS_PATH)) > lists, what="the events relist")
        m = counted(exporter, {TEAM: 3 + 1 + 2, ("eval", "gpu-quota", GPU): 1}, "the relist")
        assert values(m, "kube_gpu_cluster_watch_errors_total", resource="events", kind="gone")
        api.put_event(refused("eval.2", namespace="eval"))
        m = counted(exporter, {TEAM: 6, ("eval", "gpu-quota", GPU): 2}, "after the relist")
        # train-old, train-7f9c, missed; eval.2 (eval.1 was deleted)
        assert values(m, "kube_gpu_cluster_watched_objects", resource="events") == [4]

        # the events watch fails: its health says so, everything else is served as before
        api.fail(503, times=100_000, resource=EVENTS)
        api.end_watches()
        m = exporter.metrics_when(
            lambda m: values(m, "kube_gpu_cluster_watch_up", resource="events") == [0],
            "the events watch down",
        )
        for resource in WATCHES[:3]:
            assert values(m, "kube_gpu_cluster_watch_up", resource=resource) == [1]
        errors = values(m, "kube_gpu_cluster_watch_errors_total", resource="events")
        assert sum(errors) > 1
        assert rejected(m) == {TEAM: 6, ("eval", "gpu-quota", GPU): 2}
        assert values(m, "kube_gpu_quota_used", namespace="team") == [8]


def test_the_view_does_not_wait_for_a_failing_events_watch(
    api: KubeApiServer, tmp_path: Path
) -> None:
    api.put_event(refused("train-old.1", count=7))
    api.fail(403, times=100_000, resource=EVENTS)  # e.g. RBAC without events
    with start(api, tmp_path) as exporter:
        m = exporter.metrics()
        assert values(m, "kube_gpu_cluster_watch_up", resource="events") == [0]
        for resource in WATCHES[:3]:
            assert values(m, "kube_gpu_cluster_watch_up", resource=resource) == [1]
        assert values(m, "kube_gpu_quota_hard", namespace="team") == [8]
        assert rejected(m) == {}


def test_namespaced_events_are_listed_and_watched_by_reason(api: KubeApiServer) -> None:
    """The test server's events, as kube-apiserver serves them under a namespace."""
    api.put_event(refused("a.1"))
    api.put_event(refused("b.1", namespace="eval"))
    api.put_event(make_event("c.1", "team", message="Created pod", reason="SuccessfulCreate"))
    selector = "fieldSelector=reason%3DFailedCreate"
    base = f"{api.url}/api/v1/namespaces/team/events?{selector}"
    with urllib.request.urlopen(base, timeout=5) as response:
        listed = json.load(response)
    assert listed["kind"] == "EventList"
    assert [e["metadata"]["name"] for e in listed["items"]] == ["a.1"]
    watch = f"{base}&watch=true&resourceVersion={listed['metadata']['resourceVersion']}"
    with urllib.request.urlopen(watch + "&timeoutSeconds=1", timeout=5) as response:
        api.put_event(refused("a.1", count=2))
        api.put_event(refused("b.1", count=2, namespace="eval"))
        api.put_event(make_event("c.1", "team", message="again", reason="SuccessfulCreate"))
        seen = [json.loads(line) for line in response.read().splitlines()]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in seen] == [("MODIFIED", "a.1")]
