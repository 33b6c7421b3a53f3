"""`explain`'s one read of the cluster: the nodes, the pods that hold resources, the
namespace's ResourceQuotas and (without `-f`) the pod itself, each listed once.

The same client as the exporter's watches (`kubernetes/client.py`: kubeconfig or in-cluster
config, its auth and TLS), with responses read as raw JSON and parsed straight into the slim
values, so a 50,000-pod cluster is never held as client model objects. Pods are listed with
the server filtering out ended ones, in pages of `PAGE` items. Every failure is one
InputError line (exit 2): a kubeconfig that does not load, an API server that does not
answer, a refusal, a pod that does not exist.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from kube_gpu_exporter.exporter.cluster.objects import Node, Pod, Quota
from kube_gpu_exporter.exporter.cluster.parse import parse_node, parse_pod, parse_quota
from kube_gpu_exporter.exporter.cluster.settings import ClusterSettings
from kube_gpu_exporter.exporter.cluster.watches import ACTIVE_PODS, PAGE
from kube_gpu_exporter.exporter.input_errors import InputError
from kube_gpu_exporter.exporter.kubernetes.client import api_client
from kube_gpu_exporter.exporter.kubernetes.list_watch import classify, status_code, summary

TIMEOUT: Final = (10.0, 60.0)  # seconds: connect, read
DEFAULT_KUBECONFIG: Final = Path("~/.kube/config")


def default_kubeconfig() -> str | None:
    """kubectl's order: $KUBECONFIG (its first file that exists), then ~/.kube/config; None
    (in-cluster config) when neither exists."""
    for candidate in os.environ.get("KUBECONFIG", "").split(os.pathsep):
        if candidate and os.path.isfile(candidate):
            return candidate
    home = DEFAULT_KUBECONFIG.expanduser()
    return str(home) if home.is_file() else None


def context_namespace(kubeconfig: str | None) -> str:
    """The namespace of the kubeconfig's current context (in-cluster: the pod's own), else
    "default", as kubectl picks it when -n is not given."""
    try:
        if kubeconfig is None:
            path = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
            return Path(path).read_text(encoding="utf-8").strip() or "default"
        import kubernetes

        _, current = kubernetes.config.list_kube_config_contexts(config_file=kubeconfig)
        namespace = current.get("context", {}).get("namespace")
        return namespace if isinstance(namespace, str) and namespace else "default"
    except Exception:  # an unreadable config fails once, clearly, when the client loads it
        return "default"


@dataclass(frozen=True)
class ClusterRead:
    nodes: tuple[Node, ...]
    pods: tuple[Pod, ...]
    quotas: tuple[Quota, ...]


class ApiReader:
    """Reads the cluster through one API client; every method raises InputError on failure."""

    def __init__(self, kubeconfig: str | None, settings: ClusterSettings) -> None:
        self._client = api_client(kubeconfig)  # KubernetesConfigError is an InputError
        self._settings = settings
        import kubernetes

        self._core = kubernetes.client.CoreV1Api(self._client)
        self.host = str(getattr(self._client.configuration, "host", "") or "the API server")

    def close(self) -> None:
        self._client.close()

    def pod(self, namespace: str, name: str) -> Pod:
        body = self._call(
            f"pod {namespace}/{name}",
            self._core.read_namespaced_pod,
            name,
            namespace,
        )
        pod = parse_pod(body)
        if pod is None:
            raise InputError(f"pod {namespace}/{name}: the API server answered no pod")
        return pod

    def cluster(self, namespace: str) -> ClusterRead:
        nodes = [n for n in map(parse_node, self._list("nodes", self._core.list_node)) if n]
        pods = self._list(
            "pods", self._core.list_pod_for_all_namespaces, field_selector=ACTIVE_PODS
        )
        quotas = self._list(
            f"resourcequotas in {namespace}",
            self._core.list_namespaced_resource_quota,
            namespace,
        )
        return ClusterRead(
            nodes=tuple(nodes),
            pods=tuple(p for p in map(parse_pod, pods) if p is not None),
            quotas=tuple(q for q in (parse_quota(o, self._settings) for o in quotas) if q),
        )

    def _list(
        self, what: str, call: Callable[..., Any], *args: Any, **params: Any
    ) -> Iterator[Mapping[str, Any]]:
        """Every item of a paged list, parsed page by page (a page's JSON is let go after)."""
        token = ""
        while True:
            page = {"limit": PAGE, **params} | ({"_continue": token} if token else {})
            body = self._call(what, call, *args, **page)
            items = body.get("items")
            yield from (
                (i for i in items if isinstance(i, Mapping)) if isinstance(items, list) else ()
            )
            metadata = body.get("metadata")
            following = metadata.get("continue") if isinstance(metadata, Mapping) else None
            if not isinstance(following, str) or not following:
                return
            token = following

    def _call(self, what: str, call: Callable[..., Any], *args: Any, **params: Any) -> Any:
        try:
            response = call(*args, _preload_content=False, _request_timeout=TIMEOUT, **params)
            try:
                status = getattr(response, "status", 200)
                if not 200 <= status <= 299:
                    raise _HttpError(status, getattr(response, "data", b""))
                body = json.loads(response.data)
            finally:
                response.release_conn()
        except InputError:
            raise
        except Exception as exc:
            raise InputError(self._problem(what, exc)) from None
        if not isinstance(body, Mapping):
            raise InputError(f"{what}: the API server at {self.host} answered no JSON object")
        return body

    def _problem(self, what: str, exc: BaseException) -> str:
        code = exc.code if isinstance(exc, _HttpError) else status_code(exc)
        if code == 404:
            return f"{what} not found"
        if code in (401, 403):
            return f"{what}: refused by the API server at {self.host}: {summary(exc)}"
        if code is None and classify(exc) in ("connection", "timeout"):
            return f"cannot reach the API server at {self.host}: {summary(exc)}"
        return f"{what}: the API server at {self.host} answered {summary(exc)}"


class _HttpError(Exception):
    """A non-2xx answer that the client returned instead of raising (older clients do)."""

    def __init__(self, code: int, body: bytes) -> None:
        message = ""
        try:
            message = str(json.loads(body).get("message") or "")
        except Exception:
            message = ""
        super().__init__(f"HTTP {code}: {message}".strip())
        self.code = code
