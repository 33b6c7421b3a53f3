"""A paged list asks for its next page before it decodes the one it has (page_prefetch.py):
the API server encodes page N+1 while this process decodes page N, instead of each waiting
for the other. Real HTTP against the test API server, the cluster's own pod decoder."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from cluster_objects import make_gpu_pod
from kube_gpu_exporter.demo.kube_api import KubeApiServer
from kube_gpu_exporter.exporter.cluster import DEFAULT_SETTINGS
from kube_gpu_exporter.exporter.cluster.decode import decoders
from kube_gpu_exporter.exporter.cluster.objects import ACTIVE_PODS
from kube_gpu_exporter.exporter.kubernetes.client import api_client
from kube_gpu_exporter.exporter.kubernetes.decoding import Page
from kube_gpu_exporter.exporter.kubernetes.list_watch import ListWatch
from support import wait_until


class Watching:
    """The order of things: each page request, each page decoded."""

    def __init__(self, request: Any) -> None:
        self._request = request
        self.asked: list[str] = []
        self.second_asked = threading.Event()

    def request(self, **params: Any) -> Any:
        if not params.get("watch"):
            self.asked.append(params.get("_continue") or "")
            if len(self.asked) == 2:
                self.second_asked.set()
        return self._request(**params)


class SlowFirstPage:
    """The pod decoder, except that decoding the first page waits (10 s at most) for the
    second page to be asked for: it is, at once, when the list asks ahead."""

    def __init__(self, watching: Watching) -> None:
        self._inner = decoders(DEFAULT_SETTINGS)["pods"]
        self._watching = watching
        self.pages = 0
        self.asked_ahead: list[bool] = []

    def page(self, data: bytes) -> Page:
        self.pages += 1
        if self.pages == 1:
            self.asked_ahead.append(self._watching.second_asked.wait(10))
        return self._inner.page(data)

    def token(self, data: bytes) -> Any:
        return self._inner.token(data)

    def event(self, line: bytes) -> Any:
        return self._inner.event(line)


def test_the_next_page_is_asked_for_before_this_one_is_decoded(tmp_path: Path) -> None:
    with KubeApiServer() as api:
        for n in range(7):
            api.put(make_gpu_pod(f"train-{n}", 1, node="gpu-a"))
        client = api_client(str(api.write_kubeconfig(tmp_path / "kubeconfig")))
        watching = Watching(client.lister("/api/v1/pods", field_selector=ACTIVE_PODS))
        decoder = SlowFirstPage(watching)
        held: list[dict[str, Any]] = []

        def parse(obj: Any) -> tuple[str, Any]:
            return f"{obj.namespace}/{obj.name}", obj

        watch = ListWatch(
            "pods", watching.request, parse, held.append, page_size=3, decoder=decoder
        )
        watch.start()
        try:
            wait_until(lambda: held, what="the first list")
            assert decoder.asked_ahead == [True]
            assert len(held[-1]) == 7  # every page, each once, in the list
            assert len(watching.asked) == 3 and len(set(watching.asked)) == 3
        finally:
            watch.stop()
            client.close()


class PagesOfOne:
    """A list of `pages` pages of one pod each, answered in memory, noting the thread that
    asked for each page; the watch after it waits until it is aborted."""

    def __init__(self, pages: int) -> None:
        self.pages = pages
        self.asked_by: dict[str, threading.Thread] = {}

    def request(self, **params: Any) -> Any:
        if params.get("watch"):
            return Answer(b"")
        at = int(params.get("_continue") or 0)
        self.asked_by[str(at)] = threading.current_thread()
        following = str(at + 1) if at + 1 < self.pages else ""
        page = {
            "metadata": {"resourceVersion": "7", "continue": following},
            "items": [{"metadata": {"name": f"pod-{at}"}}],
        }
        return Answer(json.dumps(page).encode())


class Answer:
    """Enough of http_pool's Response for ListWatch: a body, or a watch that never speaks."""

    status = 200

    def __init__(self, data: bytes) -> None:
        self.data = data
        self._aborted = threading.Event()

    def stream(self, amt: Any = None, decode_content: bool = True) -> Any:
        self._aborted.wait(10)
        yield from ()

    def shutdown(self) -> None:
        self._aborted.set()

    def close(self) -> None:
        self._aborted.set()

    def release_conn(self) -> None:
        pass


def test_a_list_of_ten_pages_fetches_ahead_in_one_thread() -> None:
    answers = PagesOfOne(10)
    held: list[Any] = []

    def parse(obj: Any) -> tuple[str, Any]:
        return obj["metadata"]["name"], obj

    watch = ListWatch("pods", answers.request, parse, held.append, page_size=1)
    watch.start()
    try:
        wait_until(lambda: held, what="the list")
        assert len(held[0]) == 10 and len(answers.asked_by) == 10
        ahead = {t for t in answers.asked_by.values() if t.name.endswith("-next-page")}
        assert len(ahead) == 1  # pages 2 to 10, each asked for ahead by the list's one worker
        assert answers.asked_by["0"] not in ahead
    finally:
        watch.stop()
