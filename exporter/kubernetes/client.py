"""The Kubernetes API client: GET requests (and one POST, `explain -f`'s dry-run create;
PATCHes of its own Node's status and taints, for `serve`'s opt-in node health) over
http_pool.py's kept-alive connections, configured once from a kubeconfig or the in-cluster
environment.

We read four kinds of objects with GET (list, watch, one pod) and parse the JSON ourselves
into slim values, so the `kubernetes` package's generated client (hundreds of model classes,
costly to import: bench/README.md) would only add cost: it is loaded for auth-provider
kubeconfig users alone (plugin_auth.py, an optional extra). A 401 is told to the connection
(`rejected`): an exec plugin's token is fetched again for the next request, as client-go does.

A request is made by a `lister(path, **fixed)`: a callable that takes the keyword arguments
of the generated client's list calls (`watch`, `resource_version`, `allow_watch_bookmarks`,
`timeout_seconds`, `limit`, `_continue`, `field_selector`, `_request_timeout`,
`_preload_content`) and returns the response unread (http_pool.Response), which ListWatch
streams, closes and aborts. A non-2xx answer raises `ApiError` (status, reason, body), as the
generated client's `ApiException` did. Nothing retries: retries are ListWatch's (backoff,
relist), and an HTTP library's would hide errors and repeat stalls.
"""

from __future__ import annotations

import json
import logging
import ssl
from collections.abc import Callable
from typing import Any, Final
from urllib.parse import urlencode, urlsplit

from kube_gpu_exporter.exporter import __version__
from kube_gpu_exporter.exporter.kubernetes.connection import Connection, KubernetesConfigError
from kube_gpu_exporter.exporter.kubernetes.http_pool import Pool, ProxyError, Response, Timeout
from kube_gpu_exporter.exporter.kubernetes.kubeconfig_choice import Kubeconfig

__all__ = ["ApiClient", "ApiError", "KubernetesConfigError", "api_client"]

log = logging.getLogger(__name__)

# The generated client's keyword → the API's query parameter.
QUERY: Final = {
    "field_selector": "fieldSelector",
    "label_selector": "labelSelector",
    "watch": "watch",
    "resource_version": "resourceVersion",
    "allow_watch_bookmarks": "allowWatchBookmarks",
    "timeout_seconds": "timeoutSeconds",
    "limit": "limit",
    "_continue": "continue",
    "dry_run": "dryRun",
    "field_validation": "fieldValidation",
}
DEFAULT_TIMEOUT: Final = (10.0, 60.0)  # seconds: connect, read
MAX_ERROR_BODY: Final = 64 * 1024  # a Status object is a few hundred bytes
POOL_SIZE: Final = 8  # connections kept: `cluster` holds four watches and lists beside them
Request = Callable[..., Any]


class ApiError(Exception):
    """A non-2xx answer: `status` (the HTTP code), `reason` and `body` (the Status JSON),
    the attributes api_errors' `status_code` and `summary` read."""

    def __init__(self, status: int, reason: str, body: str) -> None:
        super().__init__(f"HTTP {status} {reason}".strip())
        self.status = status
        self.reason = reason
        self.body = body


class ApiClient:
    """GET requests to one API server, over a small pool of kept-alive connections."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.host = connection.server
        self._headers = {
            "Accept": "application/json",
            "Accept-Encoding": "gzip",  # as client-go: the API server compresses large lists
            "User-Agent": f"kube-gpu-exporter/{__version__}",
        }
        context = connection.ssl_context
        if context is not None and context.verify_mode == ssl.CERT_NONE:
            _insecure(connection.source)
        self._http = _pool(connection)
        self._authorization = connection.authorization

    def lister(self, path: str, **fixed: Any) -> Request:
        """The Request of `path` (e.g. `/api/v1/pods`) with `fixed` parameters bound."""

        def request(
            *, _preload_content: bool = False, _request_timeout: Any = None, **params: Any
        ) -> Any:
            return self.get(
                path, {**fixed, **params}, timeout=_request_timeout, preload=_preload_content
            )

        return request

    def get(
        self,
        path: str,
        params: dict[str, Any] | None = None,
        *,
        timeout: Any = None,
        preload: bool = False,
    ) -> Any:
        """The response to GET `path`, unread unless `preload`; ApiError if not 2xx."""
        headers = self._with_authorization(self._headers)
        response = self._http.request(
            "GET", _target(path, params), headers=headers, timeout=_timeout(timeout)
        )
        if not 200 <= response.status <= 299:
            self._refused(response, headers)
        if preload:
            try:
                response.data  # noqa: B018 (read whole, then the connection goes back)
            finally:
                response.release_conn()
        return response

    def post(
        self, path: str, body: Any, params: dict[str, Any] | None = None, *, timeout: Any = None
    ) -> Any:
        """The JSON the API server answers to POST `body` (as JSON) to `path`; ApiError if not
        2xx. Only `explain -f` posts, with `dry_run="All"`: the API server admits and
        validates the object and stores nothing."""
        return self._send("POST", path, body, "application/json", params, timeout)

    def patch(self, path: str, body: Any, content_type: str, *, timeout: Any = None) -> Any:
        """The object the API server answers to PATCH `body` of `content_type` (a strategic
        merge or JSON merge patch) to `path`; ApiError if not 2xx. Only `serve`'s opt-in node
        health patches (node_status.py): its Node's GPU condition and taint."""
        return self._send("PATCH", path, body, content_type, None, timeout)

    def _send(
        self,
        method: str,
        path: str,
        body: Any,
        content_type: str,
        params: dict[str, Any] | None,
        timeout: Any,
    ) -> Any:
        headers = self._with_authorization({**self._headers, "Content-Type": content_type})
        response = self._http.request(
            method,
            _target(path, params),
            body=json.dumps(body).encode(),
            headers=headers,
            timeout=_timeout(timeout),
        )
        if not 200 <= response.status <= 299:
            self._refused(response, headers)
        try:
            return json.loads(response.data)
        finally:
            response.release_conn()

    def close(self) -> None:
        self._http.clear()

    def _with_authorization(self, headers: dict[str, str]) -> dict[str, str]:
        if self._authorization is not None:
            value = self._authorization()
            if value:
                return {**headers, "Authorization": value}
        return headers

    def _refused(self, response: Response, headers: dict[str, str]) -> None:
        """Raise ApiError for a non-2xx answer, first telling the connection of a 401."""
        if response.status == 401 and self.connection.rejected is not None:
            self.connection.rejected(headers.get("Authorization"))
        _raise(response)


def api_client(kubeconfig: str | Kubeconfig | None) -> ApiClient:
    """The client of the kubeconfig's chosen context (a path: that one file's current context),
    or in-cluster config if None."""
    if kubeconfig is None:
        from kube_gpu_exporter.exporter.kubernetes.in_cluster import load_in_cluster

        return ApiClient(load_in_cluster())
    from kube_gpu_exporter.exporter.kubernetes.kubeconfig import load_kubeconfig

    return ApiClient(load_kubeconfig(kubeconfig))


def _insecure(source: str) -> None:
    """One warning in our log, once, rather than one per request of every watch."""
    log.warning(
        "%s: insecure-skip-tls-verify: the API server's certificate is not verified", source
    )


def _target(path: str, params: dict[str, Any] | None) -> str:
    query = _query(params or {})
    return f"{path}?{query}" if query else path


def _query(params: dict[str, Any]) -> str:
    pairs = []
    for key, value in params.items():
        if value is None:
            continue
        name = QUERY.get(key)
        if name is None:
            raise TypeError(f"unknown list parameter {key!r}")
        pairs.append((name, ("true" if value else "false") if isinstance(value, bool) else value))
    return urlencode(pairs)


def _timeout(value: Any) -> Timeout:
    """The generated client's `_request_timeout`: (connect, read) or one number for both."""
    if value is None:
        return DEFAULT_TIMEOUT
    if isinstance(value, tuple):
        return (float(value[0]), float(value[1]))
    return (float(value), float(value))


def _raise(response: Response) -> None:
    """Read (a bounded part of) the error's body, give the connection up, raise ApiError."""
    try:
        body = response.read(MAX_ERROR_BODY, decode_content=True) or b""
    except Exception:  # the body is a courtesy; the status says what happened
        body = b""
    finally:
        response.close()  # a body not read to its end must not go back to the pool
        response.release_conn()
    text = body.decode("utf-8", errors="replace") if isinstance(body, bytes) else ""
    raise ApiError(response.status, response.reason or "", text)


def _pool(connection: Connection) -> Pool:
    """The server's pool, through the proxy the kubeconfig or the environment (HTTPS_PROXY,
    NO_PROXY, as client-go and the `kubernetes` package read them) names, if any."""
    proxy = connection.proxy_url or _environment_proxy(connection.server)
    try:
        return Pool(
            connection.server,
            ssl_context=connection.ssl_context,
            server_hostname=connection.server_hostname,
            proxy=proxy,
            maxsize=POOL_SIZE,
        )
    except ProxyError as exc:
        raise KubernetesConfigError(
            f"{connection.source}: proxy {proxy!r} cannot be used: {exc}"
        ) from None


def _environment_proxy(server: str) -> str | None:
    import urllib.request  # only here: it loads email and friends

    proxies = urllib.request.getproxies_environment()
    if not proxies:
        return None
    host = urlsplit(server).netloc
    if urllib.request.proxy_bypass(host):  # NO_PROXY (the environment is read: proxies set)
        return None
    return proxies.get(urlsplit(server).scheme) or proxies.get("all")
