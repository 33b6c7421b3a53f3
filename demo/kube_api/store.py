"""What the demo's API server answers from: the objects per resource, the history of their
changes that watches replay, the resourceVersion counter, the queued faults and the log of
requests, behind one condition that the HTTP handler's threads wait on.

Hooks change objects while watches are open (`put`, `delete`, `put_slice`, `delete_slice`,
`put_node`, `delete_node`, `put_quota`, `delete_quota`, `put_event`, `delete_event`,
`put_kueue`, `delete_kueue`; with
`notify=False` the change is only seen by a relist, as if its event had been compacted away),
answer the next requests of a resource with an error status (`fail`), or hold the next
requests longer than a client's timeout (`stall`).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from kube_gpu_exporter.demo.kube_api.objects import (
    EVENTS,
    EVENTS_PATH,
    KINDS,
    KUEUE_KINDS,
    KUEUE_PATH,
    NODES,
    NODES_PATH,
    PODS,
    PODS_PATH,
    QUOTAS,
    QUOTAS_PATH,
    SLICES,
    SLICES_PATH,
)


@dataclass(frozen=True)
class Request:
    """One request as the server saw it (query values are the last of each name)."""

    at: float
    path: str
    watch: bool
    params: Mapping[str, str]
    answered: int  # HTTP status


class Store:
    """The server's state; `KubeApiServer` (server.py) serves it over HTTP."""

    def __init__(
        self, slice_versions: tuple[str, ...] = ("v1",), kueue_versions: tuple[str, ...] = ()
    ) -> None:
        self._paths = {
            PODS_PATH: PODS,
            NODES_PATH: NODES,
            QUOTAS_PATH: QUOTAS,
            EVENTS_PATH: EVENTS,
        } | {SLICES_PATH.format(version=v): SLICES for v in slice_versions}
        self._paths |= {
            KUEUE_PATH.format(version=v, resource=r): r for v in kueue_versions for r in KUEUE_KINDS
        }
        self._cond = threading.Condition()
        self._closed = threading.Event()
        self._version = 100
        self._oldest = 0  # watches from an older resourceVersion get 410
        self._gone_form: Literal["event", "http"] = "event"
        self._objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = {r: {} for r in KINDS}
        # version, resource, type, the object now, the object before (None when added)
        self._history: list[tuple[int, str, str, dict[str, Any], dict[str, Any] | None]] = []
        self._ends = 0  # bumped by end_watches()
        self._expiries = 0  # bumped by expire()
        self._fail: dict[str, list[int]] = {r: [] for r in KINDS}
        self._stall: list[tuple[float, str | None]] = []  # seconds, resource (None: any)
        self._requests: list[Request] = []
        self._open_watches = 0

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

    def put_event(self, event: dict[str, Any], notify: bool = True) -> int:
        """Record or update an event (a repeat raises its `count`: MODIFIED)."""
        return self._put(EVENTS, event, notify)

    def delete_event(self, namespace: str, name: str, notify: bool = True) -> None:
        """An event's TTL ran out."""
        self._delete(EVENTS, (namespace, name), notify)

    def put_kueue(self, resource: str, obj: dict[str, Any], notify: bool = True) -> int:
        """Create or replace one of Kueue's objects (`resource`: workloads, clusterqueues…)."""
        return self._put(resource, obj, notify)

    def delete_kueue(self, resource: str, namespace: str, name: str, notify: bool = True) -> None:
        self._delete(resource, (namespace, name), notify)

    def _put(self, resource: str, obj: dict[str, Any], notify: bool) -> int:
        meta = obj["metadata"]
        key = (meta.get("namespace", ""), meta["name"])
        with self._cond:
            objects = self._objects[resource]
            previous = objects.get(key)
            kind = "ADDED" if previous is None else "MODIFIED"
            self._version += 1
            stored = json.loads(json.dumps(obj))
            stored["metadata"]["resourceVersion"] = str(self._version)
            objects[key] = stored
            if notify:
                self._history.append((self._version, resource, kind, stored, previous))
            self._cond.notify_all()
            return self._version

    def _delete(self, resource: str, key: tuple[str, str], notify: bool) -> None:
        with self._cond:
            obj = self._objects[resource].pop(key)
            self._version += 1
            gone = json.loads(json.dumps(obj))
            gone["metadata"]["resourceVersion"] = str(self._version)
            if notify:
                self._history.append((self._version, resource, "DELETED", gone, obj))
            self._cond.notify_all()

    # --- faults ----------------------------------------------------------------------------

    def fail(self, code: int, times: int = 1, resource: str = PODS) -> None:
        """Answer the next `times` requests (list or watch) of `resource` with a Status of
        `code`."""
        with self._cond:
            self._fail[resource].extend([code] * times)

    def stall(self, seconds: float, times: int = 1, resource: str | None = None) -> None:
        """Hold the next `times` requests (of `resource`, or of any) `seconds` before
        answering (or until close)."""
        with self._cond:
            self._stall.extend([(seconds, resource)] * times)

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

    def _faults(self, resource: str | None) -> tuple[float, int]:
        """The stall and the error status (0: none) queued for a request of `resource`."""
        with self._cond:
            stall = next((s for s in self._stall if s[1] in (None, resource)), None)
            if stall is not None:
                self._stall.remove(stall)
            failures = self._fail.get(resource or "", [])
            return (stall[0] if stall else 0.0), (failures.pop(0) if failures else 0)

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
