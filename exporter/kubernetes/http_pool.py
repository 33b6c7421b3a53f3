"""Kept-alive HTTP/1.1 connections to one API server on the standard library's http.client,
and the response the watches stream.

`serve` runs its pod watch in every DaemonSet pod, so what the client imports is paid on every
GPU node: http.client is loaded by asyncio's and the exporter's own code anyway, urllib3 adds
its own modules and importlib.metadata (bench/README.md, "Lean as deployed"). What the
watches need of an HTTP library is small: a pool of idle connections, connect and read
timeouts, TLS with a context and a verified name of our choosing, TCP keepalive as
client-go's dialer sets it, gzip, a proxy (HTTP CONNECT, or SOCKS through PySocks where
installed), and a streamed body that another thread can abort. Nothing here retries:
retries are ListWatch's (backoff, relist).
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import importlib
import socket
import ssl
import threading
import zlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final
from urllib.parse import unquote, urlsplit

CHUNK: Final = 64 * 1024
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
Timeout = tuple[float, float]  # seconds: connect, read
Dial = Callable[..., socket.socket]


class ProxyError(ValueError):
    """A proxy URL this client cannot use (the message says why)."""


class Pool:
    """Up to `maxsize` idle connections to `server` (`https://host:port`), reused newest
    first; each request takes one (or opens one) and gives it back once its body is read."""

    def __init__(
        self,
        server: str,
        *,
        ssl_context: ssl.SSLContext | None,
        server_hostname: str | None = None,
        proxy: str | None = None,
        maxsize: int = 8,
    ) -> None:
        parts = urlsplit(server)
        self.tls = parts.scheme == "https"
        self.host = parts.hostname or "localhost"
        self.port = parts.port or (443 if self.tls else 80)
        self.proxy = proxy
        self._context = ssl_context if self.tls else None
        if self.tls and self._context is None:
            self._context = ssl.create_default_context()
        self._name = server_hostname or self.host
        self._origin = f"{parts.scheme}://{parts.netloc}"
        self._dial, self._tunnel, self._absolute = _route(proxy, self.tls)
        self._maxsize = maxsize
        self._idle: list[_Connection] = []
        self._lock = threading.Lock()

    def request(
        self,
        method: str,
        target: str,
        *,
        headers: Mapping[str, str],
        timeout: Timeout,
        body: bytes | None = None,
    ) -> Response:
        """Send `method target` (a path and query); the response with its body unread."""
        connection = self._take()
        connection.timeouts = timeout
        if connection.sock is not None:
            connection.sock.settimeout(timeout[1])
        url = self._origin + target if self._absolute else target
        try:
            connection.request(method, url, body=body, headers=dict(headers))
            sock = connection.sock
            raw = connection.getresponse()
        except BaseException:
            connection.close()
            raise
        return Response(raw, connection, sock, self)

    def clear(self) -> None:
        """Close every idle connection (those in use close when their response is done)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()

    def give_back(self, connection: _Connection) -> None:
        with self._lock:
            if len(self._idle) < self._maxsize:
                self._idle.append(connection)
                return
        connection.close()

    def _take(self) -> _Connection:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        target = self._tunnel or (self.host, self.port)
        connection = _Connection(
            target[0], target[1], self._context, self._name, self._dial, tunnel=bool(self._tunnel)
        )
        if self._tunnel:
            # Host as HTTP/1.1 proxies expect it (Python 3.11 sends CONNECT without one).
            host = f"[{self.host}]" if ":" in self.host else self.host
            headers = {**self._tunnel[2], "Host": f"{host}:{self.port}"}
            connection.set_tunnel(self.host, self.port, headers=headers)
        return connection


class Response:
    """One answer: `status`, `reason`, `headers`; its body read whole (`data`), in part
    (`read`) or as it arrives (`stream`), gzip undone. `release_conn` gives the connection
    back when the body was read to its end, else closes it; `close` and `shutdown` (from
    another thread, to unblock a reader) never give it back."""

    def __init__(
        self, raw: http.client.HTTPResponse, connection: Any, sock: Any, pool: Pool
    ) -> None:
        self._raw = raw
        self._connection: _Connection | None = connection
        self._sock = sock
        self._pool = pool
        self.status = raw.status
        self.reason = raw.reason
        self.headers = raw.headers
        gzip = (raw.getheader("Content-Encoding") or "").strip().lower() == "gzip"
        self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS) if gzip else None
        self._data: bytes | None = None
        self._reusable = True

    @property
    def data(self) -> bytes:
        """The whole body (read once)."""
        if self._data is None:
            self._data = b"".join(self.stream())
        return self._data

    def read(self, amt: int | None = None, decode_content: bool = True) -> bytes:
        """At most `amt` bytes of the body as sent (decoded unless told not to)."""
        raw = self._raw.read(amt)
        if self._inflate is None or not decode_content:
            return raw
        return self._inflate.decompress(raw) + (b"" if raw else self._inflate.flush())

    def stream(self, amt: int | None = None, decode_content: bool = True) -> Iterator[bytes]:
        """The body's bytes as they arrive: a chunk of a chunked watch as soon as it is here."""
        while True:
            raw = self._raw.read1(amt or CHUNK)
            if not raw:
                if self._inflate is not None and decode_content:
                    tail = self._inflate.flush()
                    if tail:
                        yield tail
                return
            if self._inflate is not None and decode_content:
                raw = self._inflate.decompress(raw)
                if not raw:
                    continue
            yield raw

    def close(self) -> None:
        """Drop the response and its connection (a body not read to its end)."""
        self._reusable = False
        self._raw.close()
        if self._connection is not None:
            self._connection.close()

    def release_conn(self) -> None:
        """Give the connection back to the pool if its body was read to the end."""
        connection, self._connection = self._connection, None
        if connection is None:
            return
        # A body with a length read to its end leaves the response open (read1 stops at 0).
        complete = self._raw.isclosed() or self._raw.length == 0
        self._raw.close()
        if self._reusable and complete and connection.sock is not None:
            self._pool.give_back(connection)
        else:
            connection.close()

    def shutdown(self) -> None:
        """Unblock a thread reading this response (from another thread)."""
        self._reusable = False
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)


class _Connection(http.client.HTTPConnection):
    """A connection that dials with our socket options and timeouts, then TLS with the name
    the certificate is checked against (kubeconfig's `tls-server-name` or the URL's host)."""

    timeouts: Timeout = (10.0, 60.0)

    def __init__(
        self,
        host: str,
        port: int,
        context: ssl.SSLContext | None,
        name: str,
        dial: Dial,
        *,
        tunnel: bool,
    ) -> None:
        super().__init__(host, port)
        self._tls_context = context
        self._tls_name = name
        self._create_connection = dial
        self._tunnelled = tunnel

    def connect(self) -> None:
        self.timeout = self.timeouts[0]
        super().connect()  # TCP (TCP_NODELAY), then the proxy's CONNECT where there is one
        assert self.sock is not None
        for option in KEEPALIVE:
            with contextlib.suppress(OSError):
                self.sock.setsockopt(*option)
        if self._tls_context is not None:
            self.sock = self._tls_context.wrap_socket(self.sock, server_hostname=self._tls_name)
        self.sock.settimeout(self.timeouts[1])


def _route(
    proxy: str | None, tls: bool
) -> tuple[Dial, tuple[str, int, dict[str, str]] | None, bool]:
    """How to reach the server through `proxy`: the dialer, the HTTP proxy a CONNECT tunnel
    goes through (an https server), and whether requests carry the absolute URL (an http
    server through an HTTP proxy)."""
    if proxy is None:
        return socket.create_connection, None, False
    parts = urlsplit(proxy)
    scheme = parts.scheme.lower()
    if not parts.hostname:
        raise ProxyError("no proxy host")
    if scheme.startswith("socks"):
        return _socks_dial(scheme, parts), None, False
    if scheme != "http":
        raise ProxyError(f"{scheme or 'no'} scheme: http and socks5 proxies are supported")
    headers = {}
    if parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        headers["Proxy-Authorization"] = "Basic " + base64.b64encode(pair).decode()
    address = (parts.hostname, parts.port or 80, headers)
    if tls:
        return socket.create_connection, address, False
    # A plain-HTTP server: every request goes to the proxy, naming the server in its URL.
    return lambda _address, *rest: socket.create_connection(address[:2], *rest), None, True


def _socks_dial(scheme: str, parts: Any) -> Dial:
    """A dialer through a SOCKS proxy (PySocks, the `socks` extra); socks5h resolves names at
    the proxy, as curl and client-go read the scheme."""
    try:
        socks = importlib.import_module("socks")
    except ImportError:
        raise ProxyError("SOCKS proxies need PySocks (pip install PySocks)") from None
    kinds = {"socks4": socks.SOCKS4, "socks4a": socks.SOCKS4, "socks5": socks.SOCKS5,
             "socks5h": socks.SOCKS5}  # fmt: skip
    if scheme not in kinds:
        raise ProxyError(f"{scheme} scheme: socks4, socks4a, socks5 and socks5h are supported")
    options = {
        "proxy_type": kinds[scheme],
        "proxy_addr": parts.hostname,
        "proxy_port": parts.port or 1080,
        "proxy_rdns": scheme in ("socks4a", "socks5h"),
        "proxy_username": unquote(parts.username) if parts.username else None,
        "proxy_password": unquote(parts.password) if parts.password else None,
    }

    def dial(address: tuple[str, int], timeout: Any = None, source: Any = None) -> socket.socket:
        connection: socket.socket = socks.create_connection(address, timeout, source, **options)
        return connection

    return dial
