"""What a connection to the API server is, however it was configured: the server's URL, the
TLS context, the Authorization header and the context's namespace.

A kubeconfig (kubeconfig.py, with exec_auth.py for exec plugin users), the pod's service
account (in_cluster.py) or, for auth-provider users, the `kubernetes` package's loader
(plugin_auth.py) each make one; the client (client.py) only reads it. Everything is checked
while it is made, so that a bad path, certificate or field is one `KubernetesConfigError`
line at start-up (exit 2), never a failure of the first request.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass

from kube_gpu_exporter.exporter.input_errors import InputError

# The value of the Authorization header at the moment of a request, or None for none: read
# per request, so that a token file that rotates is followed (tokens.py).
Authorization = Callable[[], str | None]
# Told the Authorization header a request was answered 401 with (an exec plugin's token is
# fetched again then: exec_auth.py).
Rejected = Callable[[str | None], None]


class KubernetesConfigError(InputError):
    """The API cannot be configured (no in-cluster env, bad kubeconfig); a one-line message."""


@dataclass(frozen=True)
class Connection:
    """`server` is `https://host:port` (or `http://`), with a path prefix if the kubeconfig
    names one and no trailing slash; `ssl_context` is None for plain HTTP. `server_hostname`
    (a kubeconfig's tls-server-name) is the name sent in SNI and checked against the serving
    certificate instead of the URL's host. `source` names the configuration in messages.
    `rejected`, if set, is called with the Authorization header of each request answered
    401."""

    server: str
    source: str
    ssl_context: ssl.SSLContext | None = None
    server_hostname: str | None = None
    authorization: Authorization | None = None
    proxy_url: str | None = None
    namespace: str = "default"
    rejected: Rejected | None = None


def server_url(server: str, source: str) -> str:
    """The server's URL, checked: http(s), a host, no query; without its trailing slash."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(server.strip())
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number
    except ValueError as exc:
        raise KubernetesConfigError(f"{source}: server {server!r} is not a URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise KubernetesConfigError(
            f"{source}: server {server!r} is not an http:// or https:// URL with a host"
        )
    if parts.query or parts.fragment:
        raise KubernetesConfigError(f"{source}: server {server!r} has a query or fragment")
    return server.strip().rstrip("/")
