"""A list-and-watch of one kind of Kubernetes object, kept current in a daemon thread.

The node's pod watch (`pods.py`), the ResourceSlice watch (`resource_slices.py`) and the
cluster view's watches (`cluster/watches.py`) share it. The API client (`client.py`) is
synchronous, so each watch runs in its own thread; readers get the latest published value and
never wait on the API. Responses are read raw (`_preload_content=False`) and decoded straight
into what the parser keeps (`decoding.py`), and owning the HTTP response lets `stop()` abort a
watch at once.

List and watch follow client-go's reflector:
- list with `resourceVersion=0` (served from the API server's watch cache, cheap when every
  node's exporter relists at once after an API server restart) — or, with `page_size` (the
  cluster mode's one process, which lists everything), in consistent pages of that many
  objects, as client-go's pager does (paged_list.py) —, then watch from the list's
  resourceVersion with bookmarks; a watch that ends normally is resumed from the last seen
  resourceVersion, without a relist;
- 410 Gone (expired resourceVersion; an HTTP 410 or an ERROR event with code 410) → relist at
  once, this time a consistent read (no resourceVersion) since the cache may be behind; a second
  410 without progress goes through the backoff;
- `NotServed` from the request (the API server does not serve the resource at all, e.g. DRA on
  an older cluster) → not an error: nothing to watch, checked again after a long wait;
- any other failure → `up` False, backoff from 0.5 s doubling to 30 s (reset once a watch
  opens), relist. The last value is kept meanwhile: stale attribution beats none, and `up`
  tells that it is stale.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar

from kube_gpu_exporter.exporter.catalog.errors import KUBERNETES_ERROR_KINDS
from kube_gpu_exporter.exporter.kubernetes.api_errors import (
    WatchError,
    check_status,
    classify,
    summary,
)
from kube_gpu_exporter.exporter.kubernetes.client import KubernetesConfigError, api_client
from kube_gpu_exporter.exporter.kubernetes.decoding import JSON, Decoder, Event
from kube_gpu_exporter.exporter.kubernetes.kubeconfig_choice import Kubeconfig
from kube_gpu_exporter.exporter.kubernetes.paged_list import PagedList, read_body

log = logging.getLogger(__name__)

BACKOFF_INITIAL_SECONDS = 0.5
BACKOFF_MAX_SECONDS = 30.0
NOT_SERVED_RECHECK_SECONDS = 600.0  # a cluster upgrade may start serving the resource
WATCH_SECONDS = 300  # client-go's reflector uses 5–10 min; the API server closes it after this
STOP_WAIT_SECONDS = 2.0
MAX_EVENT_BYTES = 16 * 1024 * 1024  # an object is at most ~1.5 MiB (etcd's request limit)

T = TypeVar("T")
# An object as the decoder gives it (a mapping with the default JSON decoder) → (key, value);
# value None removes the key (e.g. a pod that ended); None ignores it.
Parse = Callable[[Any], tuple[str, T | None] | None]
Request = Callable[..., Any]  # the client's list call, bound to its selectors
# One event's change applied to the held dict (value None removes the key); the cluster view's
# watches note each change as they apply it (cluster/view_changes.py).
Store = Callable[[dict[str, T], str, T | None], None]


class NotServed(Exception):
    """The API server does not serve the watched resource (404 on every version tried)."""


class ListWatch(Generic[T]):
    """Lists and watches through `request`, calling `publish` with the current objects (by
    key) after the list (a new dict) and after each event (the same dict, changed through
    `store`). See the module docstring for the protocol.

    `timeout` bounds connecting and each read of a list; a watch read may be silent up to its
    server-side duration plus `timeout`. `decoder` turns pages and events into the objects
    `parse` is given (decoding.py; by default json.loads and mappings).
    """

    def __init__(
        self,
        name: str,
        request: Request,
        parse: Parse[T],
        publish: Callable[[Mapping[str, T]], None],
        *,
        timeout: float = 10.0,
        watch_seconds: int = WATCH_SECONDS,
        on_stop: Callable[[], None] | None = None,
        page_size: int | None = None,
        store: Store[T] | None = None,
        decoder: Decoder = JSON,
    ) -> None:
        self.name = name
        self._request = request
        self._parse = parse
        self._publish = publish
        self._store: Store[T] = store or _store
        self._timeout = timeout
        self._watch_seconds = watch_seconds
        self._on_stop = on_stop
        self._page_size = page_size
        self._decoder = decoder
        self._lock = threading.Lock()
        self._up = False
        self._answered = False  # the first list ended: listed, not served or failed
        self._served = True
        self._errors = dict.fromkeys(KUBERNETES_ERROR_KINDS, 0)
        self._response: Any = None
        self._backoff = BACKOFF_INITIAL_SECONDS
        self._events = 0  # watch events applied, to tell a repeated 410 from progress
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"kube-{name}", daemon=True)

    def start(self) -> None:
        if not self._thread.is_alive() and not self._stop.is_set():
            self._thread.start()

    def stop(self) -> None:
        """Ends the watch: an open stream is aborted at once; a stalled list is abandoned to its
        read timeout (the thread is a daemon), so this returns within `STOP_WAIT_SECONDS`."""
        self._stop.set()
        with self._lock:
            response = self._response
        if response is not None:
            _abort(response)
        if self._thread.is_alive():
            self._thread.join(timeout=STOP_WAIT_SECONDS)
        if not self._thread.is_alive() and self._on_stop is not None:
            with contextlib.suppress(Exception):
                self._on_stop()

    @property
    def up(self) -> bool:
        """True once a list succeeded and while the watch goes on (or the resource is not
        served, so there is nothing to miss); False while backing off."""
        return self._up and not self._stop.is_set()

    @property
    def answered(self) -> bool:
        """True once the first list ended, however: the objects published, the resource not
        served, or the list failed (`up` says which). A view that reads several watches
        waits for this, not for `up`, so that one failing watch cannot hold the rest back."""
        return self._answered

    @property
    def served(self) -> bool:
        """False while the API server answers that it does not serve the resource."""
        return self._served

    @property
    def errors_total(self) -> dict[str, int]:
        with self._lock:
            return dict(self._errors)

    def _run(self) -> None:
        consistent = False  # after a 410 the watch cache may be behind: read from etcd
        events_at_last_gone = -1
        while not self._stop.is_set():
            try:
                items, version = self._list(None if consistent else "0")
                consistent = False
                self._served = True
                if not self._up:
                    log.info("%s watch up: %d objects", self.name, len(items))
                # up before the objects are out: a reader that sees them sees it up too
                self._up = self._answered = True
                self._publish(items)
                while not self._stop.is_set():
                    version = self._watch(items, version)
            except NotServed as exc:
                if not self._served:
                    log.debug("%s: still not served", self.name)
                else:
                    wait = NOT_SERVED_RECHECK_SECONDS
                    log.info("%s: %s; checking again in %.0fs", self.name, exc, wait)
                self._served, self._up, self._answered = False, True, True
                self._publish({})
                self._stop.wait(NOT_SERVED_RECHECK_SECONDS)
            except Exception as exc:
                if self._stop.is_set():
                    return
                kind = classify(exc)
                with self._lock:
                    self._errors[kind] += 1
                if kind == "gone":
                    consistent = True
                    repeated = self._events == events_at_last_gone
                    events_at_last_gone = self._events
                    if not repeated:  # a second 410 with nothing seen in between backs off
                        log.info("%s watch expired (410 Gone), relisting", self.name)
                        continue
                self._up, self._answered = False, True
                log.warning(
                    "%s list/watch failed (%s): %s; retrying in %.1fs",
                    self.name,
                    kind,
                    summary(exc),
                    self._backoff,
                )
                self._stop.wait(self._backoff)
                self._backoff = min(self._backoff * 2, BACKOFF_MAX_SECONDS)

    def _list(self, resource_version: str | None) -> tuple[dict[str, T], str]:
        """The objects and the list's resourceVersion. With `page_size`, in pages read from
        etcd (a consistent list: the watch cache's `resourceVersion=0` answers ignore
        `limit`), so that only a page or two of raw JSON is in memory at a time, never the
        whole cluster's pod specs at once (paged_list.py)."""
        params: dict[str, Any] = {"_request_timeout": (self._timeout, self._timeout)}
        if self._page_size is not None:
            params["limit"] = self._page_size
        elif resource_version is not None:
            params["resource_version"] = resource_version
        listed = PagedList(self.name, self._fetch, params, self._decoder, follow=self._paging)
        items: dict[str, T] = {}
        for obj in listed:
            parsed = self._parse(obj)
            if parsed is not None and parsed[1] is not None:
                items[parsed[0]] = parsed[1]
        return items, listed.version

    def _paging(self) -> bool:
        """Whether the list goes on to its next page: paged, and not being stopped."""
        return self._page_size is not None and not self._stop.is_set()

    def _fetch(self, params: Mapping[str, Any]) -> bytes:
        return read_body(self._request, params)

    def _watch(self, items: dict[str, T], version: str) -> str:
        """One watch request, applied to `items` as events arrive; returns the last
        resourceVersion seen, from which the next watch resumes."""
        response = self._request(
            _preload_content=False,
            watch=True,
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=self._watch_seconds,
            _request_timeout=(self._timeout, self._watch_seconds + self._timeout),
        )
        with self._lock:
            self._response = response
        try:
            if self._stop.is_set():
                return version
            check_status(response)
            self._backoff = BACKOFF_INITIAL_SECONDS
            for line in _lines(response):
                version = self._apply(items, self._decoder.event(line), version)
        finally:
            with self._lock:
                self._response = None
            response.close()
            response.release_conn()
        return version

    def _apply(self, items: dict[str, T], event: Event, version: str) -> str:
        kind, obj, new_version = event
        if kind == "ERROR":
            raise WatchError(int(obj.get("code") or 0), str(obj.get("message", "")))
        self._events += 1
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            parsed = self._parse(obj)
            if parsed is None:
                log.debug("%s watch: event %s without identity ignored", self.name, kind)
            else:
                self._store(items, parsed[0], None if kind == "DELETED" else parsed[1])
            self._publish(items)
        return str(new_version) if new_version else version


def _store(items: dict[str, T], key: str, value: T | None) -> None:
    if value is None:
        items.pop(key, None)
    else:
        items[key] = value


def node_api_client(node_name: str, kubeconfig: str | Kubeconfig | None, objects: str) -> Any:
    """The API client of a watch that selects one node's `objects` by `spec.nodeName`; an
    empty node name would select every node's, so it is an operator error."""
    if not node_name:
        raise KubernetesConfigError(f"the node name is empty; {objects} cannot be selected")
    return api_client(kubeconfig)


class Watcher:
    """What callers see of a watcher built on one `ListWatch`: start, stop and its health."""

    _watch: ListWatch[Any]

    def start(self) -> None:
        self._watch.start()

    def stop(self) -> None:
        self._watch.stop()

    @property
    def up(self) -> bool:
        return self._watch.up

    @property
    def errors_total(self) -> dict[str, int]:
        return self._watch.errors_total


def _lines(response: Any) -> Iterator[bytes]:
    """The newline-delimited events of a chunked watch response, as they arrive."""
    buffer = b""
    for chunk in response.stream(amt=None, decode_content=True):
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        yield from (line for line in lines if line.strip())
        if len(buffer) > MAX_EVENT_BYTES:
            raise WatchError(0, f"watch event larger than {MAX_EVENT_BYTES} bytes")


def _abort(response: Any) -> None:
    """Unblock a thread reading `response` (http_pool.Response.shutdown)."""
    with contextlib.suppress(Exception):
        response.shutdown()
