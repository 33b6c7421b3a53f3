"""A connection that has ended leaves nothing for the cyclic collector: reference counting
frees its wire, its connection and their TLS state at once. Before, the wire and the
connection referred to each other, so a burst's connections outlived it in the collector's
old generation until a full collection, and rounds of TLS bursts ratcheted memory up.

The Listener runs in this process with the collector off, plain and over TLS; after each
client has gone, no Wire or Connection object is left.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from kube_gpu_exporter.exporter.httpd import App, ConnectionLimits, Listener, Request, Response
from kube_gpu_exporter.exporter.httpd.connection import Connection
from kube_gpu_exporter.exporter.httpd.wire import Wire

CLIENTS = 20


async def _ok(request: Request) -> Response:
    return Response(text="ok\n")


@contextmanager
def collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def alive() -> int:
    return sum(isinstance(thing, Wire | Connection) for thing in gc.get_objects())


async def _round(context: ssl.SSLContext | None, client: ssl.SSLContext | None) -> int:
    app = App()
    app.add_get("/healthz", _ok)
    listener = Listener(app, "127.0.0.1", 0, ConnectionLimits(), ssl_context=context)
    await listener.start()
    port = listener.addresses[0][1]
    loop = asyncio.get_running_loop()

    def one() -> bytes:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            sock = client.wrap_socket(raw, server_hostname="127.0.0.1") if client else raw
            with sock:
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                answer = b""
                while chunk := sock.recv(4096):
                    answer += chunk
                return answer

    answers = await asyncio.gather(*(loop.run_in_executor(None, one) for _ in range(CLIENTS)))
    assert all(answer.startswith(b"HTTP/1.1 200") for answer in answers)
    for _ in range(100):  # the server's side of the closes
        if listener.open_connections == 0:
            break
        await asyncio.sleep(0.02)
    left = alive()
    await listener.stop(0.1)
    return left


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_an_ended_connection_leaves_no_cycle(tls: bool, certificate: tuple[Path, Path]) -> None:
    context = client = None
    if tls:
        cert, key = certificate
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        client = ssl.create_default_context(cafile=str(cert))
    with collector_off():
        left = asyncio.run(_round(context, client))
    assert left == 0, f"{left} wires and connections left for the cyclic collector"
