"""HTTP/1.1 over a bare socket, for tests that must control exactly what goes on the wire:
pipelining, HEAD on a keep-alive connection, clients that never read or never finish."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass

GET_METRICS = b"GET /metrics HTTP/1.1\r\nHost: exporter\r\n\r\n"


@dataclass(frozen=True)
class RawResponse:
    status: int
    headers: dict[str, str]  # names lower-cased
    body: bytes


def connect(port: int, timeout: float = 10.0, source: str = "127.0.0.1") -> socket.socket:
    """A connection to the exporter on loopback from `source`: another loopback address
    (127.0.0.2, …) looks like another client to the server."""
    sock = socket.create_connection(
        ("127.0.0.1", port), timeout=timeout, source_address=(source, 0)
    )
    sock.settimeout(timeout)
    return sock


def other_addresses(count: int, first: int = 2) -> list[str]:
    """`count` loopback addresses other than 127.0.0.1: one per simulated client host."""
    return [f"127.0.{n // 250}.{n % 250 + 1}" for n in range(first - 1, first - 1 + count)]


def request(method: str, path: str, headers: dict[str, str] | None = None) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: exporter"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


class Reader:
    """Reads responses one after the other off one connection, as a keep-alive client does."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed by the server; unparsed: {self.buffer[:200]!r}")
        self.buffer += chunk

    def response(self, head_request: bool = False) -> RawResponse:
        while b"\r\n\r\n" not in self.buffer:
            self._fill()
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        assert status_line.startswith("HTTP/1."), f"not a status line: {status_line!r}"
        headers = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = 0 if head_request else int(headers.get("content-length", "0"))
        while len(self.buffer) < length:
            self._fill()
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return RawResponse(int(status_line.split()[1]), headers, body)


def closed_by_peer(sock: socket.socket, timeout: float) -> bool:
    """Whether the server closes `sock` within `timeout`, reading (and dropping) whatever it
    sends first."""
    sock.settimeout(0.5)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if not sock.recv(65536):
                return True
        except TimeoutError:
            continue
        except OSError:  # reset
            return True
    return False
