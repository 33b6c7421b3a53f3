"""The real kube-apiserver as the cluster benches write to it: admin calls over keep-alive TLS,
and the churn's target (bench/cluster_churn.py's `put` / `delete` / `put_node`) done as real
clients do it.

The test server's hooks take a whole object and make it so; the real server splits that into
calls a client must choose between, and there is no kubelet or scheduler here to do its part:

- a new object is a POST (a 409 reads the server's copy and goes on as an update); a pod's
  and a node's status is written through the `status` subresource (the main resource keeps
  the old status on create and update alike);
- a pod bound after its creation goes through the `binding` subresource (a pod's
  `spec.nodeName` cannot be updated), then its status;
- a changed label or spec is a PUT of the object without its resourceVersion (unconditional,
  as pods and nodes allow);
- a pod is deleted with `gracePeriodSeconds=0`: no kubelet would ever confirm a graceful
  deletion, and a pod left with a deletionTimestamp would still be listed.

Only what changed since the target last sent an object is sent again, so each change of the
churn costs the calls a controller would make for it, one to two.
"""

from __future__ import annotations

import http.client
import json
import sys
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import fake
from errors import BenchError

sys.path.insert(0, str(fake.REPO / "tests"))  # control_plane imports the tests' support

from control_plane import ControlPlane

MERGE = "application/merge-patch+json"
JSON = "application/json"
SERVER_SET = ("uid", "resourceVersion", "creationTimestamp")
DELETE_NOW = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
KEPT_DELETES = 64  # the last pods deleted, checked gone at the end


class Api:
    """Admin calls on one keep-alive TLS connection per thread."""

    def __init__(self, plane: ControlPlane) -> None:
        self._host, port = plane.url.removeprefix("https://").rsplit(":", 1)
        self._port = int(port)
        self._token = plane.token
        self._context = plane.ssl_context()
        self._local = threading.local()

    def _conn(self) -> http.client.HTTPSConnection:
        conn: http.client.HTTPSConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = http.client.HTTPSConnection(
                self._host, self._port, context=self._context, timeout=60
            )
            self._local.conn = conn
        return conn

    def request(
        self, method: str, path: str, body: Any = None, content_type: str = JSON
    ) -> tuple[int, Any]:
        """(HTTP status, decoded body): errors returned, not raised."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {self._token}", "Accept": JSON}
        if data is not None:
            headers["Content-Type"] = content_type
        conn = self._conn()
        try:
            conn.request(method, path, data, headers)
            response = conn.getresponse()
            status, raw = response.status, response.read()
        except (OSError, http.client.HTTPException):
            conn.close()
            self._local.conn = None
            raise
        return status, json.loads(raw) if raw else None

    def call(self, method: str, path: str, body: Any = None, content_type: str = JSON) -> Any:
        """`request` that raises BenchError unless the server said 2xx (a namespace that is
        there already excepted)."""
        status, answer = self.request(method, path, body, content_type)
        if status == 409 and method == "POST" and path.endswith("/namespaces"):
            return None
        if not 200 <= status < 300:
            raise BenchError(f"{method} {path} -> {status}: {str(answer)[:300]}")
        return answer


def fresh(obj: dict[str, Any]) -> dict[str, Any]:
    """The object as a client creates it: without the fields the server sets."""
    meta = {k: v for k, v in obj["metadata"].items() if k not in SERVER_SET}
    return {**obj, "metadata": meta}


def _body(obj: dict[str, Any]) -> dict[str, Any]:
    """Metadata and spec as sent: what a PUT of the main resource changes."""
    return {k: v for k, v in fresh(obj).items() if k != "status"}


@dataclass
class _Sent:
    """What the target last sent of one object (JSON text, so later edits of the churn's own
    dicts do not change it); None: not known, sent again."""

    body: str | None
    node: str
    status: str | None


class RealTarget:
    """The churn's target over the real API: `put(pod)`, `delete(namespace, name)`,
    `put_node(node)`, as the test server's hooks are called."""

    def __init__(self, api: Api) -> None:
        self._api = api
        self._sent: dict[str, _Sent] = {}
        self.deleted: deque[str] = deque(maxlen=KEPT_DELETES)
        self.calls = 0
        self.failure = ""  # the first change that failed, and why

    def put(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        with self._kept():
            self._put(f"/api/v1/namespaces/{meta['namespace']}/pods", pod)

    def put_node(self, node: dict[str, Any]) -> None:
        with self._kept():
            self._put("/api/v1/nodes", node)

    def delete(self, namespace: str, name: str) -> None:
        path = f"/api/v1/namespaces/{namespace}/pods/{name}"
        with self._kept():
            self._call("DELETE", path, DELETE_NOW)
        self._sent.pop(path, None)
        self.deleted.append(path)

    @contextmanager
    def _kept(self) -> Iterator[None]:
        """The first failure kept for the bench to raise: the churn's thread ends on it, and
        nothing else would tell that the churn stopped early."""
        try:
            yield
        except Exception as error:
            self.failure = self.failure or f"{type(error).__name__}: {error}"
            raise

    def still_there(self) -> list[str]:
        """The last pods deleted that the server still has (a GET not 404)."""
        return [path for path in self.deleted if self._api.request("GET", path)[0] != 404]

    def _call(self, method: str, path: str, body: Any, content_type: str = JSON) -> Any:
        self.calls += 1
        return self._api.call(method, path, body, content_type)

    def _put(self, base: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        path = f"{base}/{name}"
        body = json.dumps(_body(obj), sort_keys=True)
        node = obj.get("spec", {}).get("nodeName") or ""
        sent = self._sent.get(path) or self._create(base, path, obj, body, node)
        if node and node != sent.node:
            binding = {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": name},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node},
            }
            self._call("POST", f"{path}/binding", binding)
            sent.node = node
            if sent.body is not None:  # the server's spec now has the node: so has ours
                held = json.loads(sent.body)
                held["spec"]["nodeName"] = node
                sent.body = json.dumps(held, sort_keys=True)
        if body != sent.body:
            self._call("PUT", path, _body(obj))
            sent.body = body
        status = json.dumps(obj.get("status"), sort_keys=True)
        if obj.get("status") and status != sent.status:
            self._call("PATCH", f"{path}/status", {"status": obj["status"]}, MERGE)
            sent.status = status
        self._sent[path] = sent

    def _create(self, base: str, path: str, obj: dict[str, Any], body: str, node: str) -> _Sent:
        self.calls += 1
        code, answer = self._api.request("POST", base, _body(obj))
        if code == 409:  # there already: what it holds decides what is sent next
            held = self._api.call("GET", path)
            return _Sent(None, held.get("spec", {}).get("nodeName") or "", None)
        if not 200 <= code < 300:
            raise BenchError(f"POST {base} -> {code}: {str(answer)[:300]}")
        return _Sent(body, node, None)
