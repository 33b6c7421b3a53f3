"""Connections an untrusted network may open and leave: each is timed out or refused.

The exporter runs as a real process with short timeouts; the clients are bare sockets, so the
test controls exactly what goes on the wire. Outcomes are asserted (closed, refused, answered),
never durations: each wait is far longer than the timeout it observes.
"""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path

from raw_http import GET_METRICS, Reader, closed_by_peer, connect, request

from support import run_exporter, wait_until

DEMO = str(Path(__file__).parents[2] / "exporter" / "simulated" / "scenarios" / "demo.yaml")
RESET_ON_CLOSE = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends a reset
GRACE = 20.0  # seconds to wait for an outcome that a 1 s timeout brings about


def test_slowloris_clients_are_closed_after_the_read_header_timeout(tmp_path: Path) -> None:
    args = ["--simulate", DEMO, "--web.read-header-timeout=1s", "--web.idle-timeout=10m"]
    with run_exporter(args, tmp_path) as exporter:
        silent = [connect(exporter.port) for _ in range(5)]  # never send a byte
        trickling = [connect(exporter.port) for _ in range(5)]
        for sock in trickling:
            sock.sendall(b"GET /metrics HTTP/1.1\r\nX-Slow: ")
        # A keep-alive client that starts a second request and never finishes it.
        second = connect(exporter.port)
        second.sendall(GET_METRICS)
        assert Reader(second).response().status == 200
        second.sendall(b"GET /metrics HTTP/1.1\r\n")
        deadline = time.monotonic() + GRACE
        closed: set[int] = set()
        while time.monotonic() < deadline and len(closed) < len(trickling):
            for i, sock in enumerate(trickling):
                try:
                    sock.send(b"a")  # one byte at a time, well within any idle timeout
                except OSError:
                    closed.add(i)
            time.sleep(0.2)
        assert len(closed) == len(trickling), "trickling clients were not closed"
        for sock in [*silent, second]:
            assert closed_by_peer(sock, GRACE)
        # The exporter still serves.
        assert exporter.get()[0] == 200


def test_idle_keep_alive_connections_are_closed_after_the_idle_timeout(tmp_path: Path) -> None:
    args = ["--simulate", DEMO, "--web.idle-timeout=1s"]
    with run_exporter(args, tmp_path) as exporter:
        idle = [connect(exporter.port) for _ in range(5)]
        for sock in idle:
            sock.sendall(GET_METRICS)
            assert Reader(sock).response().status == 200
        for sock in idle:
            assert closed_by_peer(sock, GRACE)


def test_connections_over_the_cap_displace_the_one_idle_longest(tmp_path: Path) -> None:
    """One address alone fills the cap of 4: its next connection displaces its own connection
    idle the longest, and so does a new address's, whatever the count of addresses (no
    newcomer is refused while an open connection has no request in hand)."""
    args = ["--simulate", DEMO, "--web.max-connections=4", "--web.read-header-timeout=10m"]
    with run_exporter(args, tmp_path) as exporter:
        # Four connections served and kept open (retried while the exporter may still count
        # the readiness poll's connection, closed a moment ago).
        held = [wait_until(lambda: served(exporter.port), what="a connection") for _ in range(4)]
        extra = served(exporter.port)
        assert extra is not None, "the address's newcomer was refused"
        assert closed_by_peer(held[0], GRACE)
        other = served(exporter.port, source="127.0.0.2")
        assert other is not None, "a new address was refused while one address held the cap"
        assert closed_by_peer(held[1], GRACE)
        for sock in [*held, extra, other]:
            sock.close()
        # Once they are gone, new connections are served again.
        wait_until(lambda: exporter.get()[0] == 200, what="a connection under the cap")


def served(port: int, source: str = "127.0.0.1") -> socket.socket | None:
    """A connection that got a 200 and stays open; None if it was refused."""
    sock = connect(port, source=source)
    sock.sendall(GET_METRICS)
    try:
        if Reader(sock).response().status == 200:
            return sock
    except OSError:
        pass
    sock.close()
    return None


def test_client_disconnects_and_garbage_log_no_traceback(tmp_path: Path) -> None:
    """At the default log level: no error line, no traceback, whatever the clients do."""
    with run_exporter(["--simulate", DEMO], tmp_path) as exporter:
        for _ in range(10):
            # Many pipelined scrapes, then a reset before reading any answer.
            sock = connect(exporter.port)
            sock.sendall(GET_METRICS * 50)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, RESET_ON_CLOSE)
            sock.close()
            # A scrape closed (FIN) before the answer came.
            sock = connect(exporter.port)
            sock.sendall(GET_METRICS)
            sock.close()
        for garbage in (
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 64,  # TLS to plain HTTP
            b"GET /metrics HTTP/1.1\r\nBad header line\r\n\r\n",
            b"BREW /coffee HTCPCP/1.0\r\n\r\n",
            b"GET /metrics HTTP/1.1\r\n" + b"X: " + b"a" * 20_000 + b"\r\n\r\n",
            request("GET", "/metrics") + b"\x00\x01garbage\r\n\r\n",
        ):
            sock = connect(exporter.port)
            sock.sendall(garbage)
            closed_by_peer(sock, GRACE)
            sock.close()
        assert exporter.get()[0] == 200
        time.sleep(0.5)  # let the last disconnects be handled and logged
        log = exporter.log()
        assert "Traceback" not in log, log
        assert "level=error" not in log, log
