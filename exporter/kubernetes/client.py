"""The Kubernetes API client: GET requests on urllib3 (and one POST, `explain -f`'s dry-run
create; PATCHes of its own Node's status and taints, for `serve`'s opt-in node health),
configured once from a kubeconfig or the in-cluster environment.

We read four kinds of objects with GET (list, watch, one pod) and parse the JSON ourselves
into slim values, so the `kubernetes` package's generated client (hundreds of model classes,
costly to import: bench/README.md) would only add cost: it is loaded for auth-provider
kubeconfig users alone (plugin_auth.py, an optional extra). urllib3 is the HTTP library that
package used underneath, so connections, timeouts and the raw responses that ListWatch reads
stay as they were. A 401 is told to the connection (`rejected`): an exec plugin's token is
fetched again for the next request, as client-go does.

A request is made by a `lister(path, **fixed)`: a callable that takes the keyword arguments
of the generated client's list calls (`watch`, `resource_version`, `allow_watch_bookmarks`,
`timeout_seconds`, `limit`, `_continue`, `field_selector`, `_request_timeout`,
`_preload_content`) and returns urllib3's response unread, which ListWatch streams, closes
and aborts. A non-2xx answer raises `ApiError` (status, reason, body), as the generated
client's `ApiException` did. urllib3 never retries: retries are ListWatch's (backoff,
relist), and urllib3's would hide errors and repeat stalls.
"""

from __future__ import annotations

import json
import logging
import socket
import ssl
import warnings
from collections.abc import Callable
from typing import Any, Final
from urllib.parse import urlencode, urlsplit

import urllib3

from kube_gpu_exporter.exporter import __version__
from kube_gpu_exporter.exporter.kubernetes.connection import Connection, KubernetesConfigError
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
# client-go's dialer keeps TCP connections alive every 30 s: a watch through an idle load
# balancer or NAT is otherwise dropped without a word, and seen only at its read timeout.
KEEPALIVE: Final = [
    (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1),
    *[
        (socket.IPPROTO_TCP, getattr(socket, name), 30)
        for name in ("TCP_KEEPIDLE", "TCP_KEEPINTVL")
        if hasattr(socket, name)
    ],
]

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
        options: dict[str, Any] = {
            "num_pools": 2,
            "maxsize": POOL_SIZE,
            "retries": False,
            "socket_options": [
                *urllib3.connection.HTTPConnection.default_socket_options,
                *KEEPALIVE,
            ],
        }
        if connection.ssl_context is not None:
            if connection.ssl_context.verify_mode == ssl.CERT_NONE:
                _insecure(connection.source)
            options["ssl_context"] = connection.ssl_context
            if connection.server_hostname:
                options["server_hostname"] = connection.server_hostname
        self._http = _pool_manager(connection, options)
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
        """urllib3's response to GET `path`, unread unless `preload`; ApiError if not 2xx."""
        url = self.host + path
        query = _query(params or {})
        if query:
            url += "?" + query
        headers = self._with_authorization(self._headers)
        response = self._http.request(
            "GET",
            url,
            headers=headers,
            timeout=_timeout(timeout),
            preload_content=preload,
            redirect=False,
        )
        if not 200 <= response.status <= 299:
            self._refused(response, headers)
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
        url = self.host + path
        query = _query(params or {})
        if query:
            url += "?" + query
        headers = self._with_authorization({**self._headers, "Content-Type": content_type})
        response = self._http.request(
            method,
            url,
            body=json.dumps(body).encode(),
            headers=headers,
            timeout=_timeout(timeout),
            preload_content=False,
            redirect=False,
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

    def _refused(self, response: Any, headers: dict[str, str]) -> None:
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
    """One warning in our log, instead of urllib3's on every request of every watch."""
    log.warning(
        "%s: insecure-skip-tls-verify: the API server's certificate is not verified", source
    )
    warnings.filterwarnings("ignore", category=urllib3.exceptions.InsecureRequestWarning)


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


def _timeout(value: Any) -> urllib3.Timeout:
    """The generated client's `_request_timeout`: (connect, read) or one number for both."""
    if value is None:
        value = DEFAULT_TIMEOUT
    if isinstance(value, tuple):
        return urllib3.Timeout(connect=value[0], read=value[1])
    return urllib3.Timeout(connect=value, read=value)


def _raise(response: Any) -> None:
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


def _pool_manager(connection: Connection, options: dict[str, Any]) -> urllib3.PoolManager:
    """A PoolManager, or a ProxyManager when the kubeconfig or the environment (HTTPS_PROXY,
    NO_PROXY, as client-go and the `kubernetes` package read them) names a proxy."""
    proxy = connection.proxy_url or _environment_proxy(connection.server)
    if proxy is None:
        return urllib3.PoolManager(**options)
    scheme = urlsplit(proxy).scheme
    try:
        if scheme.startswith("socks"):
            from urllib3.contrib.socks import SOCKSProxyManager

            return SOCKSProxyManager(proxy, **options)
        return urllib3.ProxyManager(proxy, **options)
    except (ImportError, ValueError, urllib3.exceptions.HTTPError) as exc:
        raise KubernetesConfigError(
            f"{connection.source}: proxy {proxy!r} cannot be used: {' '.join(str(exc).split())}"
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
