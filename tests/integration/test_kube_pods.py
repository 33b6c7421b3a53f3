"""The pod watch against a real HTTP server speaking the API server's list/watch protocol."""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kube_gpu_exporter.demo.kube_api import NODE, KubeApiServer, make_pod, write_kubeconfig
from kube_gpu_exporter.exporter.catalog.errors import KUBERNETES_ERROR_KINDS
from kube_gpu_exporter.exporter.kubernetes.pods import (
    STOP_WAIT_SECONDS,
    KubernetesConfigError,
    PodIndex,
    PodInfo,
    PodWatcher,
    parse_pod,
)
from support import free_port, wait_until

CID_A = "3b9f1e0c7a4d2f8e6b5a1c9d0e7f3a2b4c6d8e0f1a3b5c7d9e2f4a6b8c0d1e3f"
CID_B = "a1c2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d2"
CID_INIT = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0"
CID_DBG = "9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b1a0f9e8d"
WAIT = 30.0  # generous: a loaded 2-core CI machine

WatcherFactory = Callable[..., PodWatcher]


@pytest.fixture
def api() -> Iterator[KubeApiServer]:
    with KubeApiServer() as server:
        yield server


@pytest.fixture
def kubeconfig(api: KubeApiServer, tmp_path: Path) -> Path:
    return api.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def start_watcher(kubeconfig: Path) -> Iterator[WatcherFactory]:
    """Starts PodWatchers on NODE (waiting until `up` unless told not to); stops them after."""
    watchers: list[PodWatcher] = []

    def start(wait_up: bool = True, config: Path = kubeconfig, **kwargs: Any) -> PodWatcher:
        watcher = PodWatcher(NODE, str(config), **kwargs)
        watchers.append(watcher)
        watcher.start()
        if wait_up:
            wait_until(lambda: watcher.up, WAIT, "the watcher's first list")
        return watcher

    yield start
    for watcher in watchers:
        watcher.stop()


def names(index: PodIndex) -> set[str]:
    return {pod.name for pod in index.by_uid.values()}


def no_errors(watcher: PodWatcher) -> bool:
    return all(count == 0 for count in watcher.errors_total.values())


# --- parsing --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("owner", "labels", "expected"),
    [
        (
            ("ReplicaSet", "web-7d4b9c8f6d"),
            {"pod-template-hash": "7d4b9c8f6d"},
            ("Deployment", "web"),
        ),
        (
            ("ReplicaSet", "trainer-v2-5f6b7c8d9e"),
            {"pod-template-hash": "5f6b7c8d9e"},
            ("Deployment", "trainer-v2"),
        ),
        # a ReplicaSet not made by a Deployment (no matching template hash) stays itself
        (("ReplicaSet", "web-7d4b9c8f6d"), {}, ("ReplicaSet", "web-7d4b9c8f6d")),
        (("ReplicaSet", "web-abc"), {"pod-template-hash": "7d4b9c8f6d"}, ("ReplicaSet", "web-abc")),
        # a CronJob's Job keeps its own name (with the schedule timestamp)
        (("Job", "nightly-train-28979040"), {}, ("Job", "nightly-train-28979040")),
        (("StatefulSet", "llm-serve"), {}, ("StatefulSet", "llm-serve")),
        (("DaemonSet", "gpu-burn"), {}, ("DaemonSet", "gpu-burn")),
        (None, {}, ("", "")),
    ],
)
def test_owner_resolution(
    owner: tuple[str, str] | None, labels: dict[str, str], expected: tuple[str, str]
) -> None:
    pod = parse_pod(make_pod("p", owner=owner, labels=labels))
    assert pod is not None
    assert (pod.owner_kind, pod.owner_name) == expected


def test_an_owner_that_is_not_the_controller_is_not_the_workload() -> None:
    obj = make_pod("p", owner=("ReplicaSet", "web-7d4b9c8f6d"))
    obj["metadata"]["ownerReferences"][0]["controller"] = False
    pod = parse_pod(obj)
    assert pod is not None and (pod.owner_kind, pod.owner_name) == ("", "")


def test_container_ids_lose_their_runtime_prefix() -> None:
    obj = make_pod(
        "p",
        containers={"main": f"containerd://{CID_A}", "sidecar": f"cri-o://{CID_B}"},
        init_containers={"setup": f"docker://{CID_INIT}"},
    )
    obj["status"]["ephemeralContainerStatuses"] = [
        {"name": "debugger", "containerID": f"containerd://{CID_DBG}"}
    ]
    # a container that has not started yet has no id
    obj["status"]["containerStatuses"].append({"name": "waiting", "ready": False})
    pod = parse_pod(obj)
    assert pod is not None
    assert dict(pod.containers) == {
        CID_A: "main",
        CID_B: "sidecar",
        CID_INIT: "setup",
        CID_DBG: "debugger",
    }


def test_parse_pod_tolerates_missing_and_odd_fields() -> None:
    assert parse_pod({}) is None
    assert parse_pod({"metadata": {"name": "p", "namespace": "ns"}}) is None  # no uid
    pod = parse_pod(
        {
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": None},
            "status": {"containerStatuses": "junk"},
        }
    )
    assert pod == PodInfo("u", "ns", "p", "Pending", {}, "", "", {})


def test_a_nodes_watch_keeps_only_the_labels_attribution_copies() -> None:
    obj = make_pod(
        "p", labels={"team": "a", "app": "x", "pod-template-hash": "7d9f8c"},
        owner=("ReplicaSet", "web-7d9f8c"),
    )  # fmt: skip
    pod = parse_pod(obj, labels=frozenset({"team", "missing"}))
    assert pod is not None
    assert dict(pod.labels) == {"team": "a"}
    assert (pod.owner_kind, pod.owner_name) == ("Deployment", "web")  # read before dropping
    unlabelled = parse_pod(obj, labels=frozenset())
    assert unlabelled is not None and dict(unlabelled.labels) == {}
    assert parse_pod(obj) is not None and len(parse_pod(obj).labels) == 3  # type: ignore[union-attr]


def test_the_index_is_built_when_read_and_only_after_a_change(
    api: KubeApiServer, start_watcher: WatcherFactory
) -> None:
    api.put(make_pod("a", "ml", labels={"team": "x", "other": "y"}))
    watcher = start_watcher(labels=("team",))
    first = wait_until(lambda: watcher.index().by_name.get(("ml", "a")), WAIT, "pod a")
    assert dict(first.labels) == {"team": "x"}
    index = watcher.index()
    assert watcher.index() is index  # nothing changed: the same index, not rebuilt
    api.put(make_pod("b", "ml"))
    wait_until(lambda: ("ml", "b") in watcher.index().by_name, WAIT, "pod b in a new index")
    assert watcher.index() is not index


def test_index_lookups_and_completed_pods() -> None:
    running = parse_pod(make_pod("run", "ml", containers={"main": f"containerd://{CID_A}"}))
    done = parse_pod(make_pod("done", "ml", phase="Succeeded"))
    failed = parse_pod(make_pod("failed", "ml", phase="Failed"))
    assert running and done and failed
    index = PodIndex.build([running, done, failed])
    assert set(index.by_uid) == {running.uid}
    assert index.by_name[("ml", "run")] is running
    assert index.by_container_id[CID_A] is running
    assert index.lookup(None, CID_A) == (running, "main")
    assert index.lookup(running.uid, CID_B) == (running, "")  # status not posted yet
    assert index.lookup(done.uid, None) is None
    assert index.lookup(None, None) is None
    with pytest.raises(TypeError):
        index.by_uid["x"] = running  # type: ignore[index]
    assert len({running, done, running}) == 2  # hashable despite its mappings


def test_module_does_not_import_kubernetes() -> None:
    """The API is optional: importing the module must not load (or need) the client."""
    code = (
        "import sys, kube_gpu_exporter.exporter.kubernetes.pods\n"
        "assert 'kubernetes' not in sys.modules, 'kubernetes imported at module import'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --- configuration --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (None, "no such file"),
        ("", "empty"),
        ("clusters: [unclosed", "not valid YAML at line 2"),
        ("- a\n- b\n", "kubeconfig"),
        ("apiVersion: v1\nkind: Config\ncurrent-context: nowhere\n", "nowhere"),
        (b"\xff\xfe\x00\x01binary", "kubeconfig"),
    ],
)
def test_bad_kubeconfig_is_a_one_line_error(
    tmp_path: Path, content: str | bytes | None, fragment: str
) -> None:
    path = tmp_path / "kubeconfig"
    if isinstance(content, str):
        path.write_text(content)
    elif isinstance(content, bytes):
        path.write_bytes(content)
    with pytest.raises(KubernetesConfigError) as caught:
        PodWatcher(NODE, str(path))
    message = str(caught.value)
    assert "\n" not in message and str(path) in message and fragment in message


def test_kubeconfig_that_is_a_directory(tmp_path: Path) -> None:
    with pytest.raises(KubernetesConfigError, match="no such file"):
        PodWatcher(NODE, str(tmp_path))


def test_in_cluster_config_outside_a_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    with pytest.raises(KubernetesConfigError, match=r"^in-cluster config: .+") as caught:
        PodWatcher(NODE, None)
    assert "\n" not in str(caught.value)


def test_empty_node_name(kubeconfig: Path) -> None:
    with pytest.raises(KubernetesConfigError, match="node name"):
        PodWatcher("", str(kubeconfig))


# --- list and watch -------------------------------------------------------------------------


def test_initial_list_selects_this_nodes_active_pods(
    api: KubeApiServer, start_watcher: WatcherFactory
) -> None:
    api.put(
        make_pod(
            "trainer-0",
            "ml",
            owner=("StatefulSet", "trainer"),
            labels={"app": "trainer"},
            containers={"pytorch": f"containerd://{CID_A}"},
        )
    )
    api.put(make_pod("starting", "ml", phase="Pending"))
    api.put(make_pod("finished", "ml", phase="Succeeded"))
    api.put(make_pod("crashed", "ml", phase="Failed"))
    api.put(make_pod("elsewhere", "ml", node="node-b"))
    api.put(
        make_pod(
            "web-7d4b9c8f6d-x2x9z",
            "serving",
            owner=("ReplicaSet", "web-7d4b9c8f6d"),
            labels={"pod-template-hash": "7d4b9c8f6d"},
        )
    )
    watcher = start_watcher(labels=("app",))
    index = watcher.index()
    assert names(index) == {"trainer-0", "starting", "web-7d4b9c8f6d-x2x9z"}
    trainer = index.by_name[("ml", "trainer-0")]
    assert (trainer.owner_kind, trainer.owner_name, trainer.phase) == (
        "StatefulSet",
        "trainer",
        "Running",
    )
    assert dict(trainer.labels) == {"app": "trainer"}
    assert index.lookup(None, CID_A) == (trainer, "pytorch")
    web = index.by_name[("serving", "web-7d4b9c8f6d-x2x9z")]
    assert (web.owner_kind, web.owner_name) == ("Deployment", "web")
    first = api.lists()[0]
    assert first.params["fieldSelector"] == f"spec.nodeName={NODE}"
    assert first.params["resourceVersion"] == "0"  # served from the API server's cache
    wait_until(lambda: api.open_watches == 1, WAIT, "the watch")
    assert no_errors(watcher) and set(watcher.errors_total) == set(KUBERNETES_ERROR_KINDS)


def test_watch_adds_modifies_and_deletes(api: KubeApiServer, start_watcher: WatcherFactory) -> None:
    watcher = start_watcher()
    wait_until(lambda: api.open_watches == 1, WAIT, "the watch")
    assert names(watcher.index()) == set()

    pod = make_pod("job-x", "ml", phase="Pending", owner=("Job", "job-x"))
    api.put(pod)
    wait_until(lambda: "job-x" in names(watcher.index()), WAIT, "ADDED")
    before = watcher.index()

    pod["status"]["phase"] = "Running"
    pod["status"]["containerStatuses"] = [{"name": "main", "containerID": f"cri-o://{CID_B}"}]
    api.put(pod)
    wait_until(lambda: watcher.index().lookup(None, CID_B), WAIT, "MODIFIED")
    running = watcher.index().by_name[("ml", "job-x")]
    assert (running.phase, running.owner_kind, running.owner_name) == ("Running", "Job", "job-x")
    assert before.by_name[("ml", "job-x")].phase == "Pending"  # snapshots are immutable

    pod["status"]["phase"] = "Succeeded"
    api.put(pod)
    wait_until(lambda: "job-x" not in names(watcher.index()), WAIT, "completed pod removed")
    assert watcher.index().lookup(None, CID_B) is None

    api.put(make_pod("other-node", "ml", node="node-b"))
    other = make_pod("short", "ml")
    api.put(other)
    wait_until(lambda: "short" in names(watcher.index()), WAIT, "second ADDED")
    api.delete("ml", "short")
    wait_until(lambda: "short" not in names(watcher.index()), WAIT, "DELETED")
    assert names(watcher.index()) == set()
    assert len(api.lists()) == 1 and no_errors(watcher) and watcher.up


def test_ended_watch_resumes_from_the_bookmark_without_relist(
    api: KubeApiServer, start_watcher: WatcherFactory
) -> None:
    watcher = start_watcher()
    wait_until(lambda: api.open_watches == 1, WAIT, "the watch")
    api.put(make_pod("a", node="node-b"))  # moves the resourceVersion, not our pods
    api.end_watches()
    wait_until(lambda: len(api.watches()) == 2, WAIT, "a second watch")
    first, second = api.watches()
    assert first.params["allowWatchBookmarks"] == "true"
    assert int(first.params["timeoutSeconds"]) > 0
    assert second.params["resourceVersion"] == str(api.version)  # from the bookmark
    assert len(api.lists()) == 1 and no_errors(watcher) and watcher.up


@pytest.mark.parametrize("form", ["event", "http"])
def test_gone_relists_and_catches_up(
    api: KubeApiServer, start_watcher: WatcherFactory, form: Any
) -> None:
    api.put(make_pod("stays"))
    api.put(make_pod("vanishes"))
    watcher = start_watcher()
    wait_until(lambda: api.open_watches == 1, WAIT, "the watch")
    # Changes whose events the watch never gets (compacted away): only a relist sees them.
    api.delete("default", "vanishes", notify=False)
    api.put(make_pod("appears"), notify=False)
    api.expire(form)
    wait_until(lambda: names(watcher.index()) == {"stays", "appears"}, WAIT, "relist")
    counts = watcher.errors_total
    assert counts["gone"] == 1 and sum(counts.values()) == 1
    assert watcher.up
    relist = api.lists()[1]
    assert "resourceVersion" not in relist.params  # a consistent read after a 410
    wait_until(lambda: api.open_watches == 1, WAIT, "the watch again")
    api.put(make_pod("after"))
    wait_until(lambda: "after" in names(watcher.index()), WAIT, "events after the relist")


def test_repeated_gone_without_progress_backs_off(
    api: KubeApiServer, start_watcher: WatcherFactory
) -> None:
    """A 410 right after a relist (a lagging cache) must not turn into a tight relist loop."""
    watcher = start_watcher()
    wait_until(lambda: api.open_watches == 1, WAIT, "the watch")
    api.fail(410, times=2)
    api.end_watches()
    wait_until(lambda: watcher.errors_total["gone"] == 2, WAIT, "two 410s")
    wait_until(lambda: watcher.up and api.open_watches == 1, WAIT, "recovery")
    gone = [i for i, r in enumerate(api.requests) if r.answered == 410]
    first, second = (api.requests[i] for i in gone)
    after = api.requests[gone[1] + 1]
    assert first.watch and not second.watch
    assert "resourceVersion" not in second.params  # the relist after a 410 is consistent
    assert after.at - second.at >= 0.45  # the second 410 went through the backoff
    assert sum(watcher.errors_total.values()) == 2


def test_server_errors_back_off_then_recover(
    api: KubeApiServer, start_watcher: WatcherFactory
) -> None:
    watcher = start_watcher()
    wait_until(lambda: api.open_watches == 1, WAIT, "the watch")
    api.fail(500, times=3)
    api.put(make_pod("during-outage"), notify=False)
    api.end_watches()
    wait_until(lambda: not watcher.up, WAIT, "up False during the outage")
    wait_until(lambda: watcher.up, WAIT, "up True after the outage")
    wait_until(lambda: "during-outage" in names(watcher.index()), WAIT, "relist after recovery")
    assert watcher.errors_total["server_error"] == 3
    assert sum(watcher.errors_total.values()) == 3
    failed = [r for r in api.requests if r.answered == 500]
    recovered = next(r for r in api.requests if r.at > failed[-1].at)
    times = [r.at for r in [*failed, recovered]]
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    # 0.5 s doubling; lower bounds only, since a loaded machine can only make them longer
    assert gaps[0] >= 0.45 and gaps[1] >= 0.95 and gaps[2] >= 1.95, gaps


def test_slow_api_times_out_and_stop_does_not_hang(
    api: KubeApiServer, start_watcher: WatcherFactory
) -> None:
    api.stall(60, times=1)
    # A watch may be silent for its whole duration: keep it short so a stalled one is seen.
    watcher = start_watcher(wait_up=False, timeout=1.0, watch_seconds=2)
    wait_until(lambda: watcher.errors_total["timeout"] >= 1, WAIT, "a timeout")
    wait_until(lambda: watcher.up, WAIT, "recovery after the stall")
    # Now every request hangs: the watch is ended and nothing answers any more.
    api.stall(60, times=1000)
    api.end_watches()
    wait_until(lambda: watcher.errors_total["timeout"] >= 3, WAIT, "timeouts of the relists")
    assert not watcher.up
    started = time.monotonic()
    watcher.stop()
    assert time.monotonic() - started < STOP_WAIT_SECONDS + 1.5


def test_stalled_watch_is_detected(api: KubeApiServer, start_watcher: WatcherFactory) -> None:
    """A watch whose server goes silent past its own duration is given up, then relisted."""
    watcher = start_watcher(timeout=1.0, watch_seconds=1)
    api.stall(60, times=1)
    wait_until(lambda: watcher.errors_total["timeout"] >= 1, WAIT, "the stalled watch")
    wait_until(lambda: watcher.up, WAIT, "recovery")


def test_stop_aborts_an_open_watch(api: KubeApiServer, start_watcher: WatcherFactory) -> None:
    watcher = start_watcher()
    wait_until(lambda: api.open_watches == 1, WAIT, "the watch")
    started = time.monotonic()
    watcher.stop()
    assert time.monotonic() - started < STOP_WAIT_SECONDS
    wait_until(lambda: api.open_watches == 0, WAIT, "the server to see the watch closed")
    assert not watcher.up and no_errors(watcher)
    requests = len(api.requests)
    time.sleep(1.0)
    assert len(api.requests) == requests  # nothing is retried after stop()


def test_connection_refused_backs_off(tmp_path: Path, start_watcher: WatcherFactory) -> None:
    config = write_kubeconfig(tmp_path / "refused", f"http://127.0.0.1:{free_port()}")
    watcher = start_watcher(wait_up=False, config=config)
    wait_until(lambda: watcher.errors_total["connection"] >= 2, WAIT, "connection errors")
    assert not watcher.up and watcher.index().by_uid == {}
