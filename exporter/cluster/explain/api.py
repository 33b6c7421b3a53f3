"""`explain`'s one read of the cluster: the nodes, the pods that hold resources, the
namespace's ResourceQuotas and (without `-f`) the pod itself, each listed once; with `-f`,
the manifest's dry-run create, whose refusals admission.py reads.

The same client as the exporter's watches (`kubernetes/client.py`: kubeconfig or in-cluster
config, its auth and TLS), with responses read as JSON and parsed straight into the slim
values. Lists are read as the watches read theirs (`kubernetes/paged_list.py`), in pages of
`PAGE` items, pods with the server filtering out ended ones. Every failure is one InputError
line (exit 2): a kubeconfig that does not load, an API server that does not answer, a
refusal, a pod that does not exist.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

from kube_gpu_exporter.exporter.cluster.objects import ACTIVE_PODS, Node, Pod, Quota
from kube_gpu_exporter.exporter.cluster.parse import parse_node, parse_pod, parse_quota
from kube_gpu_exporter.exporter.cluster.settings import ClusterSettings
from kube_gpu_exporter.exporter.input_errors import InputError
from kube_gpu_exporter.exporter.kubernetes.api_errors import classify, status_code, summary
from kube_gpu_exporter.exporter.kubernetes.client import ApiError, Request, api_client
from kube_gpu_exporter.exporter.kubernetes.decoding import JSON, Event, Page
from kube_gpu_exporter.exporter.kubernetes.kubeconfig_choice import Kubeconfig
from kube_gpu_exporter.exporter.kubernetes.paged_list import PAGE, PagedList, read_body

TIMEOUT: Final = (10.0, 60.0)  # seconds: connect, read
DEFAULT_KUBECONFIG: Final = Path("~/.kube/config")


def default_kubeconfig(path: str | None = None, context: str | None = None) -> Kubeconfig | None:
    """kubectl's choice: `--kubeconfig`'s one file; else $KUBECONFIG's files that exist,
    merged in order (never ~/.kube/config once $KUBECONFIG names a file); else
    ~/.kube/config. None (in-cluster config) when there is no file and no `--context`."""
    if path:
        return Kubeconfig((path,), context)
    listed = [name for name in os.environ.get("KUBECONFIG", "").split(os.pathsep) if name]
    if not listed:
        listed = [str(DEFAULT_KUBECONFIG.expanduser())]
    files = tuple(dict.fromkeys(name for name in listed if os.path.isfile(name)))
    return Kubeconfig(files, context) if files or context else None


def context_namespace(kubeconfig: Kubeconfig | None) -> str:
    """The namespace of the kubeconfig's chosen context (in-cluster: the pod's own), else
    "default", as kubectl picks it when -n is not given."""
    try:
        if kubeconfig is None:
            path = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
            return Path(path).read_text(encoding="utf-8").strip() or "default"
        from kube_gpu_exporter.exporter.kubernetes.kubeconfig import current_context

        return current_context(kubeconfig).namespace
    except Exception:  # an unreadable config fails once, clearly, when the client loads it
        return "default"


@dataclass(frozen=True)
class ClusterRead:
    nodes: tuple[Node, ...]
    pods: tuple[Pod, ...]
    quotas: tuple[Quota, ...]


class ApiReader:
    """Reads the cluster through one API client; every method raises InputError on failure."""

    def __init__(self, kubeconfig: Kubeconfig | None, settings: ClusterSettings) -> None:
        self._client = api_client(kubeconfig)  # KubernetesConfigError is an InputError
        self._settings = settings
        self.host = self._client.host

    def close(self) -> None:
        self._client.close()

    def pod(self, namespace: str, name: str) -> Pod:
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}"
        body = self._get(f"pod {namespace}/{name}", self._client.lister(path))
        pod = parse_pod(body)
        if pod is None:
            raise InputError(f"pod {namespace}/{name}: the API server answered no pod")
        return pod

    def cluster(self, namespace: str) -> ClusterRead:
        lister = self._client.lister
        nodes = [n for n in map(parse_node, self._list("nodes", lister("/api/v1/nodes"))) if n]
        pods = self._list("pods", lister("/api/v1/pods", field_selector=ACTIVE_PODS))
        quotas = self._list(
            f"resourcequotas in {namespace}",
            lister(f"/api/v1/namespaces/{quote(namespace, safe='')}/resourcequotas"),
        )
        return ClusterRead(
            nodes=tuple(nodes),
            pods=tuple(p for p in map(parse_pod, pods) if p is not None),
            quotas=tuple(q for q in (parse_quota(o, self._settings) for o in quotas) if q),
        )

    @property
    def settings(self) -> ClusterSettings:
        return self._settings

    def get(self, what: str, path: str) -> Mapping[str, Any]:
        """The object at `path` (any API group: kueue_api.py reads Kueue's and Jobs)."""
        return self._get(what, self._client.lister(path))

    def items(self, what: str, path: str, **fixed: Any) -> Iterator[Mapping[str, Any]]:
        """Every item of the list at `path`, paged as the cluster's lists are."""
        return self._list(what, self._client.lister(path, **fixed))

    def optional(self, what: str, path: str, absent: frozenset[int]) -> Mapping[str, Any] | None:
        """The object at `path`, None where the server answers one of the `absent` statuses
        (an API not served: 404, or 503 for an aggregated one whose server is down)."""
        try:
            body = json.loads(read_body(self._client.lister(path), {"_request_timeout": TIMEOUT}))
        except Exception as exc:
            if status_code(exc) in absent:
                return None
            raise InputError(self._problem(what, exc)) from None
        return body if isinstance(body, Mapping) else None

    def dry_run_pod(self, namespace: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        """The pod as the API server would admit it (`dryRun=All`: every admission plugin and
        validation runs, nothing is stored). An answer other than 2xx raises the client's
        ApiError as it is (admission.py reads its Status); no answer is an InputError."""
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods"
        params = {"dry_run": "All", "field_validation": "Strict"}  # as kubectl create
        try:
            answer = self._client.post(path, body, params, timeout=TIMEOUT)
        except ApiError:
            raise
        except Exception as exc:
            raise InputError(self._problem(f"dry-run create in {namespace}", exc)) from None
        if not isinstance(answer, Mapping):
            raise InputError(f"the API server at {self.host} answered no pod to a dry run")
        return answer

    def _list(self, what: str, request: Request) -> Iterator[Mapping[str, Any]]:
        """Every item of a paged list, parsed page by page (a page's JSON is let go after)."""
        params = {"limit": PAGE, "_request_timeout": TIMEOUT}
        fetch = functools.partial(read_body, request)
        try:
            yield from PagedList(what, fetch, params, _WholePages(self._not_an_object(what)))
        except InputError:
            raise
        except Exception as exc:
            raise InputError(self._problem(what, exc)) from None

    def _get(self, what: str, request: Request) -> Mapping[str, Any]:
        try:
            body = json.loads(read_body(request, {"_request_timeout": TIMEOUT}))
        except InputError:  # already said for the user
            raise
        except Exception as exc:
            raise InputError(self._problem(what, exc)) from None
        if not isinstance(body, Mapping):
            raise InputError(self._not_an_object(what))
        return body

    def _not_an_object(self, what: str) -> str:
        return f"{what}: the API server at {self.host} answered no JSON object"

    def _problem(self, what: str, exc: BaseException) -> str:
        code = status_code(exc)
        if code == 404:
            return f"{what} not found"
        if code in (401, 403):
            return f"{what}: refused by the API server at {self.host}: {summary(exc)}"
        if code is None and classify(exc) in ("connection", "timeout"):
            return f"cannot reach the API server at {self.host}: {summary(exc)}"
        return f"{what}: the API server at {self.host} answered {summary(exc)}"


class _WholePages:
    """A list page as explain reads it: decoded whole; an answer that is no JSON object is an
    InputError (`refusal`), items that are not objects are skipped, and the list ends at a
    `continue` that is not a non-empty string."""

    def __init__(self, refusal: str) -> None:
        self._refusal = refusal

    def page(self, data: bytes) -> Page:
        body = json.loads(data)
        if not isinstance(body, Mapping):
            raise InputError(self._refusal)
        items = body.get("items")
        objects = [i for i in items if isinstance(i, Mapping)] if isinstance(items, list) else []
        metadata = body.get("metadata")
        following = metadata.get("continue") if isinstance(metadata, Mapping) else None
        return Page(objects, _token(following), "")

    def token(self, data: bytes) -> Any:
        return _token(JSON.token(data))

    def event(self, line: bytes) -> Event:
        raise NotImplementedError("explain lists, it never watches")


def _token(following: Any) -> str | None:
    return following if isinstance(following, str) and following else None
