"""One connection cannot grow the server's memory: while its answer waits (in the kernel, or
behind a password check), nothing more is read from it than one bounded request head, so a
client that sends without reading meets TCP's backpressure, not an ever-growing inbox.

Before the fix the server went on reading into the connection's inbox while an answer was
pending; the head limit was checked only once the answer had gone, and a single client took
the exporter past its DaemonSet memory limit in seconds (plain, TLS, and basic auth without
credentials alike).

Each test pipelines scrapes on a socket with a small receive buffer (the answers fill the
kernel's buffers), then pushes more of them for a few seconds without reading. What the client got
into the server is bounded by the kernel's buffers when the server stops reading; the
exporter's resident memory may grow by a few MiB of buffers, never by what was sent.
"""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
import time
from collections.abc import Callable
from pathlib import Path

import bcrypt
from abuse_clients import rss_bytes, run_tls_exporter, tls_config
from raw_http import GET_METRICS

from support import run_exporter

DEMO = str(Path(__file__).parents[2] / "exporter" / "simulated" / "scenarios" / "demo.yaml")
MIB = 1 << 20
PUSH_SECONDS = 4.0
PUSH_CAP = 512 * MIB  # the most one test sends: far past any kernel buffer
# The kernel's buffers on loopback (the server's receive, the client's send) hold a few MiB
# each at most; the server's own inbox one request head. More than this got in: it was read.
MOST_ACCEPTED = 48 * MIB
MOST_RSS_GROWTH = 48 * MIB
# Pipelined scrapes: each is answered when its turn comes, so the answers pile up in the
# kernel while more requests arrive (junk would end in a 431 once the answers had gone).
PIPELINED = GET_METRICS * ((256 << 10) // len(GET_METRICS))


def push(send: Callable[[bytes], int], fileno: int) -> int:
    """Send pipelined scrapes for PUSH_SECONDS (or up to PUSH_CAP) as fast as the socket
    takes them, reading nothing; the bytes the kernel took."""
    sent = 0
    deadline = time.monotonic() + PUSH_SECONDS
    while sent < PUSH_CAP and (left := deadline - time.monotonic()) > 0:
        _, writable, _ = select.select([], [fileno], [], min(left, 0.2))
        if not writable:
            continue
        try:
            sent += send(PIPELINED)
        except (BlockingIOError, ssl.SSLWantWriteError):
            continue
        except OSError:
            break  # the server cut the connection: it read no more either
    return sent


def never_reader(port: int) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    return sock


def assert_bounded(pid: int, sent: int, before: int) -> None:
    growth = rss_bytes(pid) - before
    print(f"accepted {sent / MIB:.1f} MiB; VmRSS grew {growth / MIB:.1f} MiB")
    assert sent < MOST_ACCEPTED, f"the server took {sent / MIB:.0f} MiB from one connection"
    assert growth < MOST_RSS_GROWTH, f"VmRSS grew {growth / MIB:.0f} MiB"


def test_a_client_that_never_reads_cannot_grow_the_inbox(tmp_path: Path) -> None:
    with run_exporter(["--simulate", DEMO], tmp_path) as exporter:
        before = rss_bytes(exporter.proc.pid)
        with contextlib.closing(never_reader(exporter.port)) as sock:
            sock.sendall(GET_METRICS * 200)  # answers enough to fill every kernel buffer
            sock.setblocking(False)
            sent = push(sock.send, sock.fileno())
            assert_bounded(exporter.proc.pid, sent, before)
        assert exporter.get()[0] == 200


def test_a_pending_password_check_reads_nothing_more(tmp_path: Path) -> None:
    """Basic auth, no credentials sent: the 401s are small, but the server still may not
    read ahead of the request it answers."""
    hashed = bcrypt.hashpw(b"secret", bcrypt.gensalt(rounds=10)).decode()
    config = tmp_path / "web.yml"
    config.write_text(f"basic_auth_users:\n  prometheus: {hashed}\n")
    with run_exporter(["--simulate", DEMO, f"--web.config.file={config}"], tmp_path) as exporter:
        before = rss_bytes(exporter.proc.pid)
        with contextlib.closing(never_reader(exporter.port)) as sock:
            sock.sendall(GET_METRICS * 200)
            sock.setblocking(False)
            sent = push(sock.send, sock.fileno())
            assert_bounded(exporter.proc.pid, sent, before)


def test_a_tls_client_that_never_reads_cannot_grow_the_inbox(
    tmp_path: Path, certificate: tuple[Path, Path]
) -> None:
    config, client = tls_config(tmp_path, certificate)
    with run_tls_exporter(["--simulate", DEMO, config], tmp_path, client) as exporter:
        before = rss_bytes(exporter.proc.pid)
        raw = never_reader(exporter.port)
        with contextlib.closing(client.wrap_socket(raw, server_hostname="127.0.0.1")) as tls:
            tls.sendall(GET_METRICS * 200)
            tls.setblocking(False)
            sent = push(tls.send, tls.fileno())
            assert_bounded(exporter.proc.pid, sent, before)
