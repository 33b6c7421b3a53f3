"""A Kubernetes API server for the demo and the tests: list and watch over real HTTP, with
fault hooks.

It answers `GET /api/v1/pods`, `/api/v1/nodes`, `/api/v1/resourcequotas`, `/api/v1/events`
(also under `/api/v1/namespaces/<ns>/`, where `pods/<name>` reads one pod) and
`GET /apis/resource.k8s.io/<version>/resourceslices` as kube-apiserver does for the calls
the exporter makes:
- a list (`fieldSelector=spec.nodeName=<node>[,spec.driver=<driver>]`,
  `status.phase!=<phase>,…` or `reason=<reason>`) → a list with `metadata.resourceVersion`,
  in pages of `limit` items with a `continue` token when a limit is given;
- a watch (`watch=true&resourceVersion=N`) → a chunked stream of newline-delimited events
  (ADDED, MODIFIED, DELETED, BOOKMARK, ERROR) from N on, ended after `timeoutSeconds` (with a
  bookmark first when `allowWatchBookmarks=true`), by `end_watches()`, or when the client goes;
  with a field selector, an object entering the selection comes as ADDED and one leaving it
  as DELETED (the watch cache's way: a pod that finishes leaves a `status.phase!=…` watch);
- a watch from a resourceVersion older than the retained history → 410 Gone, as an ERROR event
  in a 200 stream (what the watch cache does) or as an HTTP 410 Status (the other form clients
  meet), chosen by `expire(form)`.

The objects, their history and the fault hooks (`put…`, `delete…`, `fail`, `stall`,
`expire`, `end_watches`) are the Store's (store.py). `slice_versions` names the
resource.k8s.io versions served (none: a cluster without DRA), `kueue_versions` the
kueue.x-k8s.io ones (`GET /apis/kueue.x-k8s.io/<version>/<resource>`, across namespaces;
none by default: a cluster without Kueue).
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from kube_gpu_exporter.demo.kube_api.objects import (
    KINDS,
    NAMESPACED_PATH,
    REASONS,
    selected,
    status_object,
    write_kubeconfig,
)
from kube_gpu_exporter.demo.kube_api.store import Request, Store


class KubeApiServer(Store):
    """The server, on 127.0.0.1 and a free port, serving its Store from its own threads."""

    def __init__(
        self, slice_versions: tuple[str, ...] = ("v1",), kueue_versions: tuple[str, ...] = ()
    ) -> None:
        super().__init__(slice_versions, kueue_versions)
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
        namespace = None
        if namespaced is not None and not (watch and namespaced[3]):
            resource, namespace = namespaced[2], namespaced[1]
        stall, code = api._faults(resource)
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
                self._watch(str(resource), params, namespace)
            elif namespaced is not None and namespaced[3]:
                self._get(str(resource), namespaced[1], namespaced[3])
            else:
                self._list(str(resource), params, namespace)
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
                o for o in self.api._objects[resource].values() if _wanted(o, selector, namespace)
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

    def _watch(self, resource: str, params: Mapping[str, str], namespace: str | None) -> None:
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
            sent = self._initial(resource, params, selector, namespace)
            while not api._closed.is_set() and time.monotonic() < deadline:
                with api._cond:
                    pending = [e for e in api._history if e[0] > sent]
                    if not pending and api._ends == ends and api._expiries == expiries:
                        api._cond.wait(0.2)
                        pending = [e for e in api._history if e[0] > sent]
                    pending = [e for e in pending if e[1] == resource]
                    ended, expired = api._ends != ends, api._expiries != expiries
                for version, _, kind, obj, previous in pending:
                    sent = version
                    event = _selected_event(kind, obj, previous, version, selector, namespace)
                    if event is not None:
                        self._event(*event)
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

    def _initial(
        self, resource: str, params: Mapping[str, str], selector: str, namespace: str | None
    ) -> int:
        """Watch from "" or "0": synthetic ADDED events for the current objects first."""
        version = params.get("resourceVersion", "")
        with self.api._cond:
            if version not in ("", "0"):
                return int(version)
            objects = self.api._objects[resource].values()
            current = [o for o in objects if _wanted(o, selector, namespace)]
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


def _selected_event(
    kind: str,
    obj: dict[str, Any],
    previous: dict[str, Any] | None,
    version: int,
    selector: str,
    namespace: str | None,
) -> tuple[str, dict[str, Any]] | None:
    """A change as a watch with `selector` sees it, as kube-apiserver's watch cache makes
    it (cacher's convertToWatchEvent): an object that enters the selection is ADDED, one
    that leaves it DELETED with its content as last selected at the change's version, one
    never selected is not sent."""
    now = kind != "DELETED" and _wanted(obj, selector, namespace)
    before = previous is not None and _wanted(previous, selector, namespace)
    if now:
        return ("MODIFIED" if before else "ADDED"), obj
    if before:
        assert previous is not None
        gone = json.loads(json.dumps(previous))
        gone["metadata"]["resourceVersion"] = str(version)
        return "DELETED", gone
    return None


def _wanted(obj: Mapping[str, Any], selector: str, namespace: str | None) -> bool:
    """In the namespace asked for (None: every one) and selected by the field selector."""
    return namespace in (None, obj["metadata"].get("namespace", "")) and selected(obj, selector)
