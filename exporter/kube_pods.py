"""The pods of this node, kept current by a list-and-watch on the Kubernetes API.

Attribution on shared GPUs goes PID → cgroup (`cgroups.py`) → container id / pod uid; this
module turns those into (namespace, pod, container) and adds the pod's phase, labels and owner.

The API is optional in the product (`--kubernetes.enabled`), so `kubernetes` is imported only
when a `PodWatcher` is built. Its client is synchronous, so the watch runs in its own daemon
thread; readers get an immutable `PodIndex` swapped in by one assignment and never wait on
the API. The client's config loading, auth and TLS are used as they are, but the responses are
read as raw JSON (`_preload_content=False`): deserialising into the client's model classes costs
much CPU for nothing we need, and owning the HTTP response lets `stop()` abort a watch at once.

List and watch follow client-go's reflector:
- list with `resourceVersion=0` (served from the API server's watch cache, cheap when every
  node's exporter relists at once after an API server restart), then watch from the list's
  resourceVersion with bookmarks; a watch that ends normally is resumed from the last seen
  resourceVersion, without a relist;
- 410 Gone (expired resourceVersion; an HTTP 410 or an ERROR event with code 410) → relist at
  once, this time a consistent read (no resourceVersion) since the cache may be behind; a second
  410 without progress goes through the backoff;
- any other failure → `up` False, backoff from 0.5 s doubling to 30 s (reset once a watch
  opens), relist. The last index is kept meanwhile: stale attribution beats none, and `up`
  tells that it is stale.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from .errors import InputError

log = logging.getLogger(__name__)

BACKOFF_INITIAL_SECONDS = 0.5
BACKOFF_MAX_SECONDS = 30.0
WATCH_SECONDS = 300  # client-go's reflector uses 5–10 min; the API server closes it after this
STOP_WAIT_SECONDS = 2.0
MAX_EVENT_BYTES = 16 * 1024 * 1024  # a pod object is at most ~1.5 MiB (etcd's request limit)
ERROR_KINDS = ("gone", "server_error", "timeout", "connection", "other")
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
RUNTIME_PREFIX_SEPARATOR = "://"  # containerd://<id>, cri-o://<id>, docker://<id>

_EMPTY: Mapping[str, Any] = MappingProxyType({})


class KubernetesConfigError(InputError):
    """The API cannot be configured (no in-cluster env, bad kubeconfig); a one-line message."""


@dataclass(frozen=True)
class PodInfo:
    """What attribution needs of a pod. `containers` maps bare container id → container name.

    `owner_kind`/`owner_name` name the workload: a ReplicaSet made by a Deployment is reported
    as that Deployment. A Job stays a Job, also when a CronJob made it (its name then ends in
    the schedule's timestamp): resolving the CronJob would need a read of the Job, and the Job
    is the unit that runs and finishes.
    """

    uid: str
    namespace: str
    name: str
    phase: str
    labels: Mapping[str, str] = field(hash=False)
    owner_kind: str
    owner_name: str
    containers: Mapping[str, str] = field(hash=False)


@dataclass(frozen=True, eq=False)
class PodIndex:
    """An immutable snapshot of the node's active pods, with the three lookups attribution uses.

    Pods in phase Succeeded or Failed are never included: a completed pod holds no GPU, and
    attributing to it is a known defect of other exporters.
    """

    by_uid: Mapping[str, PodInfo]
    by_name: Mapping[tuple[str, str], PodInfo]
    by_container_id: Mapping[str, PodInfo]

    @classmethod
    def build(cls, pods: Iterable[PodInfo]) -> PodIndex:
        active = [pod for pod in pods if pod.phase not in TERMINAL_PHASES]
        return cls(
            by_uid=MappingProxyType({pod.uid: pod for pod in active}),
            by_name=MappingProxyType({(pod.namespace, pod.name): pod for pod in active}),
            by_container_id=MappingProxyType(
                {cid: pod for pod in active for cid in pod.containers}
            ),
        )

    def lookup(self, pod_uid: str | None, container_id: str | None) -> tuple[PodInfo, str] | None:
        """(pod, container name) of a process's cgroup reference; the name is "" if unknown.

        The container id is tried first (it also finds static pods, whose cgroup uid is not the
        mirror pod's uid); the pod uid covers a container whose status the kubelet has not
        posted yet, and conmon.
        """
        if container_id:
            pod = self.by_container_id.get(container_id)
            if pod is not None:
                return pod, pod.containers[container_id]
        if pod_uid:
            pod = self.by_uid.get(pod_uid)
            if pod is not None:
                return pod, ""
        return None


EMPTY_INDEX = PodIndex.build(())


def parse_pod(obj: Mapping[str, Any]) -> PodInfo | None:
    """A pod object (the API's JSON) as a PodInfo; None if it lacks a uid, namespace or name."""
    metadata = _mapping(obj.get("metadata"))
    status = _mapping(obj.get("status"))
    uid, namespace, name = (metadata.get(k) for k in ("uid", "namespace", "name"))
    if not (isinstance(uid, str) and isinstance(namespace, str) and isinstance(name, str)):
        return None
    labels = {str(k): str(v) for k, v in _mapping(metadata.get("labels")).items() if v is not None}
    owner_kind, owner_name = _owner(metadata.get("ownerReferences"), labels)
    phase = status.get("phase")
    return PodInfo(
        uid=uid,
        namespace=namespace,
        name=name,
        phase=phase if isinstance(phase, str) and phase else "Pending",
        labels=MappingProxyType(labels),
        owner_kind=owner_kind,
        owner_name=owner_name,
        containers=MappingProxyType(_container_ids(status)),
    )


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else _EMPTY


def _owner(references: Any, labels: Mapping[str, str]) -> tuple[str, str]:
    """The controlling owner's (kind, name); a Deployment's ReplicaSet names the Deployment."""
    refs = [_mapping(r) for r in references] if isinstance(references, list) else []
    controller = next((r for r in refs if r.get("controller") is True), None)
    if controller is None:
        return "", ""
    kind, name = str(controller.get("kind", "")), str(controller.get("name", ""))
    template_hash = labels.get("pod-template-hash")
    if kind == "ReplicaSet" and template_hash and name.endswith("-" + template_hash):
        return "Deployment", name[: -len(template_hash) - 1]
    return kind, name


def _container_ids(status: Mapping[str, Any]) -> dict[str, str]:
    ids: dict[str, str] = {}
    for key in ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses"):
        statuses = status.get(key)
        for entry in statuses if isinstance(statuses, list) else []:
            item = _mapping(entry)
            raw_id, name = item.get("containerID"), item.get("name")
            if isinstance(raw_id, str) and raw_id and isinstance(name, str):
                ids[raw_id.rpartition(RUNTIME_PREFIX_SEPARATOR)[2]] = name
    return ids


class _WatchError(Exception):
    """An ERROR event in the watch stream (a Status object), or a broken stream."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


class PodWatcher:
    """Lists and watches the pods of `node_name` in a daemon thread; see the module docstring.

    `kubeconfig` None means in-cluster config (service account token and CA). `timeout` bounds
    connecting and each read of a list; a watch read may be silent up to its server-side
    duration plus `timeout`.
    """

    def __init__(
        self,
        node_name: str,
        kubeconfig: str | None,
        timeout: float = 10.0,
        *,
        watch_seconds: int = WATCH_SECONDS,
    ) -> None:
        if not node_name:
            raise KubernetesConfigError("the node name is empty; pods cannot be selected")
        self._api = _core_api(kubeconfig)
        self._selector = f"spec.nodeName={node_name}"
        self._timeout = timeout
        self._watch_seconds = watch_seconds
        self._index = EMPTY_INDEX
        self._lock = threading.Lock()
        self._up = False
        self._errors = dict.fromkeys(ERROR_KINDS, 0)
        self._response: Any = None
        self._backoff = BACKOFF_INITIAL_SECONDS
        self._events = 0  # watch events applied, to tell a repeated 410 from progress
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kube-pods", daemon=True)

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
        if not self._thread.is_alive():
            with contextlib.suppress(Exception):
                self._api.api_client.close()

    def index(self) -> PodIndex:
        return self._index

    @property
    def up(self) -> bool:
        """True once a list succeeded and while the watch goes on; False while backing off."""
        return self._up and not self._stop.is_set()

    @property
    def errors_total(self) -> dict[str, int]:
        with self._lock:
            return dict(self._errors)

    def _run(self) -> None:
        consistent = False  # after a 410 the watch cache may be behind: read from etcd
        events_at_last_gone = -1
        while not self._stop.is_set():
            try:
                pods, version = self._list(None if consistent else "0")
                consistent = False
                self._index = PodIndex.build(pods.values())
                if not self._up:
                    log.info("pod watch up: %d active pods on %s", len(pods), self._selector)
                self._up = True
                while not self._stop.is_set():
                    version = self._watch(pods, version)
            except Exception as exc:
                if self._stop.is_set():
                    return
                kind = _classify(exc)
                with self._lock:
                    self._errors[kind] += 1
                if kind == "gone":
                    consistent = True
                    repeated = self._events == events_at_last_gone
                    events_at_last_gone = self._events
                    if not repeated:  # a second 410 with nothing seen in between backs off
                        log.info("pod watch expired (410 Gone), relisting")
                        continue
                self._up = False
                log.warning(
                    "pod list/watch failed (%s): %s; retrying in %.1fs", kind, exc, self._backoff
                )
                self._stop.wait(self._backoff)
                self._backoff = min(self._backoff * 2, BACKOFF_MAX_SECONDS)

    def _list(self, resource_version: str | None) -> tuple[dict[str, PodInfo], str]:
        params: dict[str, Any] = {"_request_timeout": (self._timeout, self._timeout)}
        if resource_version is not None:
            params["resource_version"] = resource_version
        response = self._request(**params)
        try:
            _check_status(response)
            body = json.loads(response.data)
        except BaseException:
            response.close()  # never hand a half-read connection back to the pool
            raise
        finally:
            response.release_conn()
        pods = {}
        for item in body.get("items") or []:
            pod = parse_pod(_mapping(item))
            if pod is not None and pod.phase not in TERMINAL_PHASES:
                pods[pod.uid] = pod
        return pods, str(_mapping(body.get("metadata")).get("resourceVersion", ""))

    def _watch(self, pods: dict[str, PodInfo], version: str) -> str:
        """One watch request, applied to `pods` as events arrive; returns the last
        resourceVersion seen, from which the next watch resumes."""
        response = self._request(
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
            _check_status(response)
            self._backoff = BACKOFF_INITIAL_SECONDS
            for line in _lines(response):
                version = self._apply(pods, json.loads(line), version)
        finally:
            with self._lock:
                self._response = None
            response.close()
            response.release_conn()
        return version

    def _apply(self, pods: dict[str, PodInfo], event: Mapping[str, Any], version: str) -> str:
        kind, obj = event.get("type"), _mapping(event.get("object"))
        if kind == "ERROR":
            raise _WatchError(int(obj.get("code") or 0), str(obj.get("message", "")))
        self._events += 1
        new_version = _mapping(obj.get("metadata")).get("resourceVersion")
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            pod = parse_pod(obj)
            if pod is None:
                log.debug("pod watch: event %s without uid/namespace/name ignored", kind)
            elif kind == "DELETED" or pod.phase in TERMINAL_PHASES:
                pods.pop(pod.uid, None)
            else:
                pods[pod.uid] = pod
            self._index = PodIndex.build(pods.values())
        return str(new_version) if new_version else version

    def _request(self, **params: Any) -> Any:
        return self._api.list_pod_for_all_namespaces(
            field_selector=self._selector, _preload_content=False, **params
        )


def _core_api(kubeconfig: str | None) -> Any:
    """A CoreV1Api configured from the kubeconfig file or the in-cluster environment."""
    try:
        import kubernetes
    except ImportError as exc:
        raise KubernetesConfigError(f"the kubernetes package is not installed: {exc}") from exc
    configuration = kubernetes.client.Configuration()
    source = "in-cluster config" if kubeconfig is None else f"kubeconfig {kubeconfig}"
    try:
        if kubeconfig is None:
            kubernetes.config.load_incluster_config(client_configuration=configuration)
        else:
            if not os.path.isfile(kubeconfig):
                raise KubernetesConfigError(f"{source}: no such file")
            kubernetes.config.load_kube_config(
                config_file=kubeconfig, client_configuration=configuration, persist_config=False
            )
    except KubernetesConfigError:
        raise
    except Exception as exc:  # ConfigException, YAML, unicode, type and OS errors alike
        message = " ".join(str(exc).split())[:300] or type(exc).__name__
        raise KubernetesConfigError(f"{source}: {message}") from exc
    # Retries are ours (backoff, relist); urllib3's would hide errors and repeat stalls.
    configuration.retries = False
    return kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(configuration))


def _check_status(response: Any) -> None:
    """Older clients return non-2xx raw responses without raising; treat them as errors."""
    status = getattr(response, "status", 200)
    if not 200 <= status <= 299:
        raise _WatchError(status, getattr(response, "reason", "") or "")


def _lines(response: Any) -> Iterator[bytes]:
    """The newline-delimited events of a chunked watch response, as they arrive."""
    buffer = b""
    for chunk in response.stream(amt=None, decode_content=True):
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        yield from (line for line in lines if line.strip())
        if len(buffer) > MAX_EVENT_BYTES:
            raise _WatchError(0, f"watch event larger than {MAX_EVENT_BYTES} bytes")


def _abort(response: Any) -> None:
    """Unblock a thread reading `response` (urllib3 ≥ 2.3 has shutdown(); else the socket)."""
    with contextlib.suppress(Exception):
        response.shutdown()
        return
    sock = getattr(getattr(response, "connection", None), "sock", None)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def _classify(exc: BaseException) -> str:
    """The `errors_total` kind of a list/watch failure."""
    import urllib3.exceptions as u3

    code = getattr(exc, "status", None) if not isinstance(exc, _WatchError) else exc.code
    if isinstance(code, int) and code:
        if code == 410:
            return "gone"
        return "server_error" if code >= 500 or code == 429 else "other"
    if isinstance(exc, u3.MaxRetryError) and exc.reason is not None:
        return _classify(exc.reason)
    if isinstance(exc, u3.NewConnectionError | u3.ProtocolError | ConnectionError):
        return "connection"
    if isinstance(exc, u3.TimeoutError | TimeoutError):
        return "timeout"
    if isinstance(exc, u3.HTTPError | OSError) or getattr(exc, "status", None) == 0:
        return "connection"
    return "other"
