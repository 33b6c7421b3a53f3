"""A field-selected watch as the real kube-apiserver sends it, and our test server likewise.

The cluster view watches pods with `status.phase!=Succeeded,status.phase!=Failed`. When a
watched pod finishes it leaves the selection, and the real server's watch cache says so with
a DELETED event carrying the object as it was last selected (at the new resourceVersion);
one that enters the selection comes as ADDED. Our test server dropped such an event, so a
finished pod stayed in every view built on it, in tests and benches, as if still running —
while the exporter was only ever tested against that. The same scenario runs here against
both servers and must give the same events.
"""

from __future__ import annotations

import json
import ssl
import threading
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from control_plane import run_control_plane

from cluster_objects import make_gpu_pod
from kube_gpu_exporter.demo.kube_api import KubeApiServer
from kube_gpu_exporter.exporter.cluster.objects import ACTIVE_PODS

Event = tuple[str, str, str]  # type, pod name, its phase in the event
EXPECTED: list[Event] = [
    ("ADDED", "done", "Pending"),
    ("MODIFIED", "done", "Running"),
    ("DELETED", "done", "Running"),  # left the selection: the object as last selected
]


class Watch:
    """A raw watch of pods from `version` with the cluster view's selector, read in a
    thread until `count` events came."""

    def __init__(self, request: urllib.request.Request, context: ssl.SSLContext | None) -> None:
        self.events: list[Event] = []
        self.versions: list[int] = []
        self._request, self._context = request, context
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        with urllib.request.urlopen(self._request, context=self._context, timeout=60) as stream:
            for line in stream:
                event = json.loads(line)
                obj = event["object"]
                phase = obj.get("status", {}).get("phase", "")
                self.events.append((event["type"], obj["metadata"]["name"], phase))
                self.versions.append(int(obj["metadata"]["resourceVersion"]))
                if len(self.events) >= len(EXPECTED):
                    return

    def wait(self) -> list[Event]:
        self._thread.join(60)
        return self.events


def watch_path(version: str) -> str:
    query = urllib.parse.urlencode(
        {"watch": "true", "fieldSelector": ACTIVE_PODS, "resourceVersion": version}
    )
    return f"/api/v1/namespaces/team/pods?{query}"


def scenario(put_status: Callable[[str], object]) -> None:
    """The pod, created Pending, turns Running, then Succeeded (it leaves the selection)."""
    for phase in ("Running", "Succeeded"):
        put_status(phase)


def test_the_test_server_sends_deleted_when_a_pod_leaves_the_selection() -> None:
    with KubeApiServer() as api:
        pod = make_gpu_pod("done", 1, "team", node="gpu-a", phase="Pending")
        api.put(make_gpu_pod("other", 1, "team", node="gpu-a"))
        version = str(api.version)
        watch = Watch(urllib.request.Request(api.url + watch_path(version)), None)
        api.put(pod)

        def put_status(phase: str) -> int:
            changed = make_gpu_pod("done", 1, "team", node="gpu-a", phase=phase)
            return api.put(changed)

        scenario(put_status)
        assert watch.wait() == EXPECTED
        assert watch.versions[-1] == api.version  # at the change's version, not the old one


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with run_control_plane(tmp_path_factory.mktemp("control-plane")) as running:
        running.ok("POST", "/api/v1/namespaces", {"metadata": {"name": "team"}})
        yield running


@pytest.mark.k8s
def test_the_real_server_sends_the_same(plane: Any) -> None:
    pod = make_gpu_pod("done", 1, "team", node="gpu-a", phase="Pending")
    body = json.loads(json.dumps(pod))
    for key in ("uid", "creationTimestamp", "resourceVersion"):
        body["metadata"].pop(key, None)
    body.pop("status", None)
    listed = plane.ok("GET", "/api/v1/namespaces/team/pods")
    request = urllib.request.Request(plane.url + watch_path(listed["metadata"]["resourceVersion"]))
    request.add_header("Authorization", f"Bearer {plane.token}")
    watch = Watch(request, plane.ssl_context())
    plane.ok("POST", "/api/v1/namespaces/team/pods", body)  # created Pending: status dropped

    def put_status(phase: str) -> int:
        patched = plane.ok(
            "PATCH",
            "/api/v1/namespaces/team/pods/done/status",
            {"status": {"phase": phase}},
            content_type="application/merge-patch+json",
        )
        return int(patched["metadata"]["resourceVersion"])

    scenario(put_status)
    assert watch.wait() == EXPECTED
