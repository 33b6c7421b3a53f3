"""The watches' HTTP connections (exporter/kubernetes/http_pool.py) against a real HTTP/1.1
server on loopback: gzip undone whole and streamed, a connection kept alive only after its body
was read to the end, a blocked watch unblocked from another thread, timeouts classed as the
watches count them, and an HTTP proxy's CONNECT tunnel with its credentials."""

from __future__ import annotations

import contextlib
import gzip
import select
import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from kube_gpu_exporter.exporter.kubernetes.api_errors import classify
from kube_gpu_exporter.exporter.kubernetes.http_pool import Pool, ProxyError

BODY = b'{"kind":"PodList","items":[' + b",".join([b'{"a":1}'] * 2000) + b"]}"


class Server(ThreadingHTTPServer):
    daemon_threads = True
    connections = 0
    # Set when the test ends: a handler that holds its answer back returns then, not after the
    # test, where a write to the client's closed socket would print a traceback into whatever
    # test this worker runs next.
    ended: threading.Event

    def get_request(self) -> tuple[socket.socket, Any]:
        self.connections += 1
        return super().get_request()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # the clients that time out or abort on purpose


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if self.path == "/gzip":
            self._send(gzip.compress(BODY), {"Content-Encoding": "gzip"})
        elif self.path == "/chunked-gzip":
            self.send_response(200)
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            data = gzip.compress(BODY)
            for at in range(0, len(data), 1000):
                piece = data[at : at + 1000]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.write(b"0\r\n\r\n")
        elif self.path == "/silent":  # a watch with no events: headers, then nothing
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.flush()
            self.ended.wait(30)
        elif self.path == "/slow":
            if not self.ended.wait(3):
                self._send(b"{}", {})
        else:
            self._send(BODY, {})

    @property
    def ended(self) -> threading.Event:
        return self.server.ended  # type: ignore[attr-defined, no-any-return]

    def _send(self, data: bytes, headers: dict[str, str]) -> None:
        self.send_response(200)
        for name, value in {"Content-Length": str(len(data)), **headers}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


@contextlib.contextmanager
def server(tls: ssl.SSLContext | None = None) -> Iterator[Server]:
    httpd = Server(("127.0.0.1", 0), Handler)
    httpd.ended = threading.Event()
    if tls is not None:
        httpd.socket = tls.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        httpd.ended.set()
        httpd.shutdown()
        httpd.server_close()


def url(httpd: Server) -> str:
    return f"http://127.0.0.1:{httpd.server_address[1]}"


def get(pool: Pool, path: str, timeout: tuple[float, float] = (5, 5)) -> Any:
    return pool.request("GET", path, headers={"Accept-Encoding": "gzip"}, timeout=timeout)


def test_gzip_is_undone_whole_and_streamed() -> None:
    with server() as httpd:
        pool = Pool(url(httpd), ssl_context=None)
        for path in ("/gzip", "/chunked-gzip"):
            whole = get(pool, path)
            assert whole.data == BODY
            whole.release_conn()
            streamed = get(pool, path)
            assert b"".join(streamed.stream()) == BODY
            streamed.release_conn()
        pool.clear()


def test_a_connection_is_reused_only_after_its_body_was_read_to_the_end() -> None:
    with server() as httpd:
        pool = Pool(url(httpd), ssl_context=None)
        for path in ("/plain", "/plain", "/chunked-gzip", "/gzip"):
            response = get(pool, path)
            assert response.data == BODY
            response.release_conn()
        assert httpd.connections == 1
        partial = get(pool, "/plain")
        assert len(partial.read(10)) == 10
        partial.release_conn()  # half read: closed, never handed to the next request
        again = get(pool, "/plain")
        assert again.data == BODY
        again.release_conn()
        assert httpd.connections == 2
        pool.clear()


def test_shutdown_from_another_thread_unblocks_a_silent_watch() -> None:
    with server() as httpd:
        pool = Pool(url(httpd), ssl_context=None)
        response = get(pool, "/silent", timeout=(5, 60))
        ended = threading.Event()

        def read() -> None:
            with contextlib.suppress(Exception):
                for _ in response.stream():
                    pass
            ended.set()

        threading.Thread(target=read, daemon=True).start()
        assert not ended.wait(0.5)
        response.shutdown()
        assert ended.wait(5), "the reader stayed blocked after shutdown()"
        response.close()
        response.release_conn()


def test_timeouts_are_counted_as_timeouts_and_refusals_as_connection() -> None:
    with server() as httpd:
        pool = Pool(url(httpd), ssl_context=None)
        with pytest.raises(Exception) as slow:
            get(pool, "/slow", timeout=(5, 0.5))
        assert classify(slow.value) == "timeout"
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    with pytest.raises(Exception) as refused:
        get(Pool(f"http://127.0.0.1:{port}", ssl_context=None), "/")
    assert classify(refused.value) == "connection"


@contextlib.contextmanager
def connect_proxy(seen: list[str]) -> Iterator[int]:
    """An HTTP proxy that takes CONNECT (recording its request head) and pipes bytes."""
    listener = socket.create_server(("127.0.0.1", 0))

    def pipe(a: socket.socket, b: socket.socket) -> None:
        with a, b:
            while True:
                ready, _, _ = select.select([a, b], [], [], 10)
                if not ready:
                    return
                for source in ready:
                    data = source.recv(65536)
                    if not data:
                        return
                    (b if source is a else a).sendall(data)

    def serve() -> None:
        with contextlib.suppress(OSError):
            while True:
                client, _ = listener.accept()
                head = b""
                while b"\r\n\r\n" not in head:
                    head += client.recv(4096)
                seen.append(head.decode())
                target = head.split()[1].decode().rsplit(":", 1)
                upstream = socket.create_connection((target[0], int(target[1])))
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                threading.Thread(target=pipe, args=(client, upstream), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()


def test_an_https_server_through_an_http_proxy_tunnel(tls_server_url: Any) -> None:
    seen: list[str] = []
    server_url, context = tls_server_url
    with connect_proxy(seen) as port:
        pool = Pool(server_url, ssl_context=context, proxy=f"http://u%40x:p%3As@127.0.0.1:{port}")
        response = get(pool, "/plain")
        assert response.data == BODY
        response.release_conn()
        pool.clear()
    (head,) = seen
    address = f"127.0.0.1:{server_url.rsplit(':', 1)[1]}"
    assert head.startswith(f"CONNECT {address} HTTP/1.")
    assert f"Host: {address}" in head
    assert "Proxy-Authorization: Basic dUB4OnA6cw==" in head  # u@x:p:s


def test_proxies_it_cannot_use_are_refused_in_a_line() -> None:
    for proxy, words in [
        ("https://p:3128", "https scheme"),
        ("ftp://p", "ftp scheme"),
        ("http://", "no proxy host"),
    ]:
        with pytest.raises(ProxyError, match=words):
            Pool("https://api:6443", ssl_context=None, proxy=proxy)


@pytest.fixture
def tls_server_url(tmp_path: Any) -> Iterator[tuple[str, Any]]:
    """The same handler over TLS, with a self-signed certificate for 127.0.0.1."""
    openssl = shutil.which("openssl")
    assert openssl, "the openssl CLI is missing (Debian's openssl package)"
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1"]
    name = ["-subj", "/CN=t", "-addext", "subjectAltName=IP:127.0.0.1"]
    command = [openssl, "req", "-x509", *ec, *name, "-keyout", "k.pem", "-out", "c.pem"]
    subprocess.run(command, cwd=tmp_path, check=True, capture_output=True)
    serving = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    serving.load_cert_chain(tmp_path / "c.pem", tmp_path / "k.pem")
    client = ssl.create_default_context(cafile=str(tmp_path / "c.pem"))
    with server(serving) as httpd:
        yield f"https://127.0.0.1:{httpd.server_address[1]}", client
