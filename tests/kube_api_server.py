"""A Kubernetes API server for tests: pods list and watch over real HTTP, with fault hooks.

It answers `GET /api/v1/pods` as kube-apiserver does for the calls the exporter makes:
- a list (`fieldSelector=spec.nodeName=<node>`) → a PodList with `metadata.resourceVersion`;
- a watch (`watch=true&resourceVersion=N`) → a chunked stream of newline-delimited events
  (ADDED, MODIFIED, DELETED, BOOKMARK, ERROR) from N on, ended after `timeoutSeconds` (with a
  bookmark first when `allowWatchBookmarks=true`), by `end_watches()`, or when the client goes;
- a watch from a resourceVersion older than the retained history → 410 Gone, as an ERROR event
  in a 200 stream (what the watch cache does) or as an HTTP 410 Status (the other form clients
  meet), chosen by `expire(form)`.

Hooks change pods while watches are open (`put`, `delete`; with `notify=False` the change is
only seen by a relist, as if its event had been compacted away), answer the next requests with
an error status (`fail`), or hold them longer than a client's timeout (`stall`).
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

NODE = "node-a"


@dataclass(frozen=True)
class Request:
    """One request as the server saw it (query values are the last of each name)."""

    at: float
    watch: bool
    params: Mapping[str, str]
    answered: int  # HTTP status


def make_pod(
    name: str,
    namespace: str = "default",
    *,
    node: str = NODE,
    uid: str | None = None,
    phase: str = "Running",
    labels: Mapping[str, str] | None = None,
    owner: tuple[str, str] | None = None,
    containers: Mapping[str, str] | None = None,
    init_containers: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A pod object as the API returns it. `containers` maps name → containerID (with prefix)."""
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid or str(uuid.uuid4()),
        "labels": dict(labels or {}),
    }
    if owner is not None:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "batch/v1" if owner[0] == "Job" else "apps/v1",
                "kind": owner[0],
                "name": owner[1],
                "uid": str(uuid.uuid4()),
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]

    def statuses(entries: Mapping[str, str] | None) -> list[dict[str, Any]]:
        return [
            {"name": n, "containerID": cid, "ready": True, "restartCount": 0}
            for n, cid in (entries or {}).items()
        ]

    return {
        "metadata": metadata,
        "spec": {"nodeName": node, "containers": [{"name": n} for n in containers or {}]},
        "status": {
            "phase": phase,
            "containerStatuses": statuses(containers),
            "initContainerStatuses": statuses(init_containers),
        },
    }


def write_kubeconfig(path: Path, server: str) -> Path:
    """A kubeconfig for `server` without auth (JSON is valid YAML)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": {"server": server}}],
        "users": [{"name": "test", "user": {}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
        "current-context": "test",
    }
    path.write_text(json.dumps(config))
    return path


def status_object(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


REASONS = {410: "Expired", 500: "InternalError", 503: "ServiceUnavailable", 429: "TooManyRequests"}


class KubeApiServer:
    """The server, on 127.0.0.1 and a free port, serving from its own threads."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._closed = threading.Event()
        self._version = 100
        self._oldest = 0  # watches from an older resourceVersion get 410
        self._gone_form: Literal["event", "http"] = "event"
        self._pods: dict[tuple[str, str], dict[str, Any]] = {}
        self._history: list[tuple[int, str, dict[str, Any]]] = []
        self._ends = 0  # bumped by end_watches()
        self._expiries = 0  # bumped by expire()
        self._fail: list[int] = []
        self._stall: list[float] = []
        self._requests: list[Request] = []
        self._open_watches = 0
        server = self

        class Handler(_Handler):
            api = server

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.port = int(self._httpd.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def __enter__(self) -> KubeApiServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._closed.set()
        with self._cond:
            self._cond.notify_all()
        self._httpd.shutdown()
        self._httpd.server_close()

    def write_kubeconfig(self, path: Path) -> Path:
        return write_kubeconfig(path, self.url)

    # --- objects ---------------------------------------------------------------------------

    def put(self, pod: dict[str, Any], notify: bool = True) -> int:
        """Create or replace a pod (ADDED or MODIFIED); returns its new resourceVersion."""
        meta = pod["metadata"]
        key = (meta["namespace"], meta["name"])
        with self._cond:
            kind = "MODIFIED" if key in self._pods else "ADDED"
            self._version += 1
            stored = json.loads(json.dumps(pod))
            stored["metadata"]["resourceVersion"] = str(self._version)
            self._pods[key] = stored
            if notify:
                self._history.append((self._version, kind, stored))
            self._cond.notify_all()
            return self._version

    def delete(self, namespace: str, name: str, notify: bool = True) -> None:
        with self._cond:
            pod = self._pods.pop((namespace, name))
            self._version += 1
            gone = json.loads(json.dumps(pod))
            gone["metadata"]["resourceVersion"] = str(self._version)
            if notify:
                self._history.append((self._version, "DELETED", gone))
            self._cond.notify_all()

    # --- faults ----------------------------------------------------------------------------

    def fail(self, code: int, times: int = 1) -> None:
        """Answer the next `times` requests (list or watch) with a Status of `code`."""
        with self._cond:
            self._fail.extend([code] * times)

    def stall(self, seconds: float, times: int = 1) -> None:
        """Hold the next `times` requests `seconds` before answering (or until close)."""
        with self._cond:
            self._stall.extend([seconds] * times)

    def expire(self, form: Literal["event", "http"]) -> None:
        """Compact the history: every resourceVersion handed out so far is now too old.

        Open watches end (in the "event" form after an ERROR 410 event); a watch from an old
        resourceVersion is answered 410 in the given form. A relist gets a current one.
        """
        with self._cond:
            self._gone_form = form
            self._version += 1
            self._oldest = self._version
            self._history.clear()
            self._expiries += 1
            self._cond.notify_all()

    def end_watches(self) -> None:
        """End the open watches as their timeoutSeconds would (bookmark first if asked for)."""
        with self._cond:
            self._ends += 1
            self._cond.notify_all()

    # --- observation -----------------------------------------------------------------------

    @property
    def requests(self) -> list[Request]:
        with self._cond:
            return list(self._requests)

    def lists(self) -> list[Request]:
        return [r for r in self.requests if not r.watch]

    def watches(self) -> list[Request]:
        return [r for r in self.requests if r.watch]

    @property
    def open_watches(self) -> int:
        with self._cond:
            return self._open_watches

    @property
    def version(self) -> int:
        with self._cond:
            return self._version


def _selected(pod: Mapping[str, Any], selector: str) -> bool:
    """Only `spec.nodeName=<node>` is supported, which is all the exporter sends."""
    if not selector:
        return True
    field, _, value = selector.partition("=")
    if field != "spec.nodeName":
        raise ValueError(f"unsupported field selector {selector!r}")
    return bool(pod.get("spec", {}).get("nodeName") == value)


class _Handler(BaseHTTPRequestHandler):
    api: KubeApiServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        api = self.api
        url = urlsplit(self.path)
        params = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        watch = params.get("watch") in ("true", "1")
        with api._cond:
            stall = api._stall.pop(0) if api._stall else 0.0
            code = api._fail.pop(0) if api._fail and url.path == "/api/v1/pods" else 0
        if stall:
            api._closed.wait(stall)
        if url.path != "/api/v1/pods":
            code = 404
        answered = code or 200
        if not code and watch and self._too_old(params):
            answered = 410 if api._gone_form == "http" else 200
        with api._cond:
            api._requests.append(Request(time.monotonic(), watch, params, answered))
        try:
            if code:
                self._status(code, f"injected {code}" if code != 404 else "not found")
            elif answered == 410:
                self._status(410, f"too old resource version: {params.get('resourceVersion')}")
            elif watch:
                self._watch(params)
            else:
                self._list(params)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _too_old(self, params: Mapping[str, str]) -> bool:
        version = params.get("resourceVersion", "")
        with self.api._cond:
            return version not in ("", "0") and int(version) < self.api._oldest

    def _send_json(self, code: int, body: Mapping[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _status(self, code: int, message: str) -> None:
        self._send_json(code, status_object(code, REASONS.get(code, "Unknown"), message))

    def _list(self, params: Mapping[str, str]) -> None:
        selector = params.get("fieldSelector", "")
        with self.api._cond:
            items = [p for p in self.api._pods.values() if _selected(p, selector)]
            version = self.api._version
        self._send_json(
            200,
            {
                "kind": "PodList",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": str(version)},
                "items": items,
            },
        )

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _event(self, kind: str, obj: Mapping[str, Any]) -> None:
        self._chunk(json.dumps({"type": kind, "object": obj}).encode() + b"\n")

    def _watch(self, params: Mapping[str, str]) -> None:
        api = self.api
        selector = params.get("fieldSelector", "")
        bookmarks = params.get("allowWatchBookmarks") == "true"
        deadline = time.monotonic() + float(params.get("timeoutSeconds") or 1800)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        with api._cond:
            api._open_watches += 1
            ends, expiries = api._ends, api._expiries
        try:
            if self._too_old(params):  # the "event" form of 410
                self._gone(params)
                return
            sent = self._initial(params, selector)
            while not api._closed.is_set() and time.monotonic() < deadline:
                with api._cond:
                    pending = [e for e in api._history if e[0] > sent]
                    if not pending and api._ends == ends and api._expiries == expiries:
                        api._cond.wait(0.2)
                        pending = [e for e in api._history if e[0] > sent]
                    ended, expired = api._ends != ends, api._expiries != expiries
                for version, kind, obj in pending:
                    sent = version
                    if _selected(obj, selector):
                        self._event(kind, obj)
                if expired:  # no bookmark: the client must come back with its old version
                    if api._gone_form == "event":
                        self._gone(params)
                    else:
                        self._chunk(b"")
                    return
                if ended or self._client_gone():
                    break
            if bookmarks and not api._closed.is_set() and not self._client_gone():
                current = {"resourceVersion": str(api.version)}
                self._event("BOOKMARK", {"kind": "Pod", "metadata": current})
            self._chunk(b"")  # the terminating zero-length chunk
        finally:
            with api._cond:
                api._open_watches -= 1

    def _initial(self, params: Mapping[str, str], selector: str) -> int:
        """Watch from "" or "0": synthetic ADDED events for the current pods first."""
        version = params.get("resourceVersion", "")
        with self.api._cond:
            if version not in ("", "0"):
                return int(version)
            current = [p for p in self.api._pods.values() if _selected(p, selector)]
            now = self.api._version
        for pod in current:
            self._event("ADDED", pod)
        return now

    def _gone(self, params: Mapping[str, str]) -> None:
        message = f"too old resource version: {params.get('resourceVersion')}"
        self._event("ERROR", status_object(410, "Expired", message))
        self._chunk(b"")

    def _client_gone(self) -> bool:
        """Whether the client closed the connection (a readable socket with nothing to read)."""
        conn: socket.socket = self.connection
        try:
            readable, _, _ = select.select([conn], [], [], 0)
            return bool(readable) and conn.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True
