"""A Kubernetes API server for the demo and the tests: list and watch over real HTTP, with
fault hooks.

It answers `GET /api/v1/pods`, `/api/v1/nodes`, `/api/v1/resourcequotas` (also under
`/api/v1/namespaces/<ns>/`, where `pods/<name>` reads one pod) and
`GET /apis/resource.k8s.io/<version>/resourceslices` as kube-apiserver does for the calls
the exporter makes:
- a list (`fieldSelector=spec.nodeName=<node>[,spec.driver=<driver>]`, or
  `status.phase!=<phase>,…`) → a list with `metadata.resourceVersion`, in pages of `limit`
  items with a `continue` token when a limit is given;
- a watch (`watch=true&resourceVersion=N`) → a chunked stream of newline-delimited events
  (ADDED, MODIFIED, DELETED, BOOKMARK, ERROR) from N on, ended after `timeoutSeconds` (with a
  bookmark first when `allowWatchBookmarks=true`), by `end_watches()`, or when the client goes;
- a watch from a resourceVersion older than the retained history → 410 Gone, as an ERROR event
  in a 200 stream (what the watch cache does) or as an HTTP 410 Status (the other form clients
  meet), chosen by `expire(form)`.

Hooks change objects while watches are open (`put`, `delete`, `put_slice`, `delete_slice`,
`put_node`, `delete_node`, `put_quota`, `delete_quota`; with
`notify=False` the change is only seen by a relist, as if its event had been compacted away),
answer the next pod requests with an error status (`fail`), or hold the next requests longer
than a client's timeout (`stall`). `slice_versions` names the resource.k8s.io versions served
(none: a cluster without DRA).
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

from kube_gpu_exporter.demo.kube_api.objects import (
    KINDS,
    NAMESPACED_PATH,
    NODES,
    NODES_PATH,
    PODS,
    PODS_PATH,
    QUOTAS,
    QUOTAS_PATH,
    REASONS,
    SLICES,
    SLICES_PATH,
    selected,
    status_object,
    write_kubeconfig,
)


@dataclass(frozen=True)
class Request:
    """One request as the server saw it (query values are the last of each name)."""

    at: float
    path: str
    watch: bool
    params: Mapping[str, str]
    answered: int  # HTTP status


class KubeApiServer:
    """The server, on 127.0.0.1 and a free port, serving from its own threads."""

    def __init__(self, slice_versions: tuple[str, ...] = ("v1",)) -> None:
        self._paths = {PODS_PATH: PODS, NODES_PATH: NODES, QUOTAS_PATH: QUOTAS} | {
            SLICES_PATH.format(version=v): SLICES for v in slice_versions
        }
        self._cond = threading.Condition()
        self._closed = threading.Event()
        self._version = 100
        self._oldest = 0  # watches from an older resourceVersion get 410
        self._gone_form: Literal["event", "http"] = "event"
        self._objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = {r: {} for r in KINDS}
        self._history: list[tuple[int, str, str, dict[str, Any]]] = []  # version, resource, …
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
        return self._put(PODS, pod, notify)

    def delete(self, namespace: str, name: str, notify: bool = True) -> None:
        self._delete(PODS, (namespace, name), notify)

    def put_slice(self, resource_slice: dict[str, Any], notify: bool = True) -> int:
        return self._put(SLICES, resource_slice, notify)

    def delete_slice(self, name: str, notify: bool = True) -> None:
        self._delete(SLICES, ("", name), notify)

    def put_node(self, node: dict[str, Any], notify: bool = True) -> int:
        return self._put(NODES, node, notify)

    def delete_node(self, name: str, notify: bool = True) -> None:
        self._delete(NODES, ("", name), notify)

    def put_quota(self, quota: dict[str, Any], notify: bool = True) -> int:
        return self._put(QUOTAS, quota, notify)

    def delete_quota(self, namespace: str, name: str, notify: bool = True) -> None:
        self._delete(QUOTAS, (namespace, name), notify)

    def _put(self, resource: str, obj: dict[str, Any], notify: bool) -> int:
        meta = obj["metadata"]
        key = (meta.get("namespace", ""), meta["name"])
        with self._cond:
            objects = self._objects[resource]
            kind = "MODIFIED" if key in objects else "ADDED"
            self._version += 1
            stored = json.loads(json.dumps(obj))
            stored["metadata"]["resourceVersion"] = str(self._version)
            objects[key] = stored
            if notify:
                self._history.append((self._version, resource, kind, stored))
            self._cond.notify_all()
            return self._version

    def _delete(self, resource: str, key: tuple[str, str], notify: bool) -> None:
        with self._cond:
            obj = self._objects[resource].pop(key)
            self._version += 1
            gone = json.loads(json.dumps(obj))
            gone["metadata"]["resourceVersion"] = str(self._version)
            if notify:
                self._history.append((self._version, resource, "DELETED", gone))
            self._cond.notify_all()

    # --- faults ----------------------------------------------------------------------------

    def fail(self, code: int, times: int = 1) -> None:
        """Answer the next `times` pod requests (list or watch) with a Status of `code`."""
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

    def lists(self, path: str = PODS_PATH) -> list[Request]:
        return [r for r in self.requests if not r.watch and r.path == path]

    def watches(self, path: str = PODS_PATH) -> list[Request]:
        return [r for r in self.requests if r.watch and r.path == path]

    @property
    def open_watches(self) -> int:
        with self._cond:
            return self._open_watches

    @property
    def version(self) -> int:
        with self._cond:
            return self._version


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
        resource = api._paths.get(url.path)
        namespaced = NAMESPACED_PATH.fullmatch(url.path)
        if namespaced is not None and not watch:
            resource = namespaced[2]
        with api._cond:
            stall = api._stall.pop(0) if api._stall else 0.0
            code = api._fail.pop(0) if api._fail and resource == PODS else 0
        if stall:
            api._closed.wait(stall)
        if resource is None:
            code = 404
        answered = code or 200
        if not code and watch and self._too_old(params):
            answered = 410 if api._gone_form == "http" else 200
        with api._cond:
            api._requests.append(Request(time.monotonic(), url.path, watch, params, answered))
        try:
            if code:
                self._status(code, f"injected {code}" if code != 404 else "not found")
            elif answered == 410:
                self._status(410, f"too old resource version: {params.get('resourceVersion')}")
            elif watch:
                self._watch(str(resource), params)
            elif namespaced is not None and namespaced[3]:
                self._get(str(resource), namespaced[1], namespaced[3])
            else:
                self._list(str(resource), params, namespaced[1] if namespaced else None)
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

    def _list(self, resource: str, params: Mapping[str, str], namespace: str | None) -> None:
        selector = params.get("fieldSelector", "")
        with self.api._cond:
            items = [
                o
                for (ns, _), o in self.api._objects[resource].items()
                if selected(o, selector) and namespace in (None, ns)
            ]
            version = self.api._version
        metadata = {"resourceVersion": str(version)}
        limit, start = int(params.get("limit") or 0), int(params.get("continue") or 0)
        if limit:
            items, rest = items[start : start + limit], items[start + limit :]
            if rest:
                metadata["continue"] = str(start + limit)
        self._send_json(
            200,
            {
                "kind": KINDS[resource] + "List",
                "apiVersion": "v1",
                "metadata": metadata,
                "items": items,
            },
        )

    def _get(self, resource: str, namespace: str, name: str) -> None:
        with self.api._cond:
            obj = self.api._objects[resource].get((namespace, name))
        if obj is None:
            self._status(404, f'{resource} "{name}" not found')
        else:
            self._send_json(200, obj)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _event(self, kind: str, obj: Mapping[str, Any]) -> None:
        self._chunk(json.dumps({"type": kind, "object": obj}).encode() + b"\n")

    def _watch(self, resource: str, params: Mapping[str, str]) -> None:
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
            sent = self._initial(resource, params, selector)
            while not api._closed.is_set() and time.monotonic() < deadline:
                with api._cond:
                    pending = [e for e in api._history if e[0] > sent]
                    if not pending and api._ends == ends and api._expiries == expiries:
                        api._cond.wait(0.2)
                        pending = [e for e in api._history if e[0] > sent]
                    pending = [e for e in pending if e[1] == resource]
                    ended, expired = api._ends != ends, api._expiries != expiries
                for version, _, kind, obj in pending:
                    sent = version
                    if selected(obj, selector):
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
                self._event("BOOKMARK", {"kind": KINDS[resource], "metadata": current})
            self._chunk(b"")  # the terminating zero-length chunk
        finally:
            with api._cond:
                api._open_watches -= 1

    def _initial(self, resource: str, params: Mapping[str, str], selector: str) -> int:
        """Watch from "" or "0": synthetic ADDED events for the current objects first."""
        version = params.get("resourceVersion", "")
        with self.api._cond:
            if version not in ("", "0"):
                return int(version)
            objects = self.api._objects[resource].values()
            current = [o for o in objects if selected(o, selector)]
            now = self.api._version
        for obj in current:
            self._event("ADDED", obj)
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
