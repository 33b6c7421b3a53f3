"""Accepted connections wait outside the connection table until their first bytes come.

Admission may displace the connection of an address that went longest without progress
(client_shares.py), and a newcomer has made none yet: an attacker that keeps reopening
connections on a shared address (NAT, a node's SNAT) displaced a scraper whose request came
a moment after its handshake (a busy node, a slow link) before it could speak. So a
connection joins the table once it has spoken: at once when its first bytes are already
there (the common case), else when they arrive, or after `WAIT_SECONDS` without them.

The kernel's TCP_DEFER_ACCEPT does the same without a bound, and under a flood from 5,000
addresses the connections it held filled its SYN queue: nothing was handed over at all, the
probes included. Here at most `total` connections wait, `per_client` from one address; any
beyond that joins the table at once, as if this step were not there.
"""

from __future__ import annotations

import asyncio
import socket
from collections import Counter
from collections.abc import Callable
from typing import Final

WAIT_SECONDS: Final = 1.0  # longer than any client worth serving takes to send its request

Admit = Callable[[socket.socket, str], None]


class FirstBytes:
    """Hands each accepted socket to `admit` once it has spoken (or waited its time)."""

    def __init__(self, total: int, per_client: int, admit: Admit) -> None:
        self._total = total
        self._per_client = per_client
        self._admit = admit
        self._waiting: dict[socket.socket, tuple[str, asyncio.TimerHandle]] = {}
        self._by_client: Counter[str] = Counter()

    def __len__(self) -> int:
        return len(self._waiting)

    def offer(self, sock: socket.socket, client: str) -> None:
        """Admit `sock` now if it has spoken or no place to wait is free; else once it does."""
        if _spoke(sock) or not self._hold(sock, client):
            self._admit(sock, client)

    def close(self) -> None:
        """Close every connection still waiting (the listener is stopping)."""
        for sock in list(self._waiting):
            self._release(sock)
            sock.close()

    def _hold(self, sock: socket.socket, client: str) -> bool:
        if len(self._waiting) >= self._total or self._by_client[client] >= self._per_client:
            return False
        loop = asyncio.get_running_loop()
        timer = loop.call_later(WAIT_SECONDS, self._ready, sock)
        self._waiting[sock] = (client, timer)
        self._by_client[client] += 1
        loop.add_reader(sock.fileno(), self._ready, sock)  # bytes, or the client's close
        return True

    def _ready(self, sock: socket.socket) -> None:
        client = self._release(sock)
        if client is not None:
            self._admit(sock, client)

    def _release(self, sock: socket.socket) -> str | None:
        held = self._waiting.pop(sock, None)
        if held is None:
            return None
        client, timer = held
        timer.cancel()
        asyncio.get_running_loop().remove_reader(sock.fileno())
        self._by_client[client] -= 1
        if self._by_client[client] <= 0:
            del self._by_client[client]
        return client


def _spoke(sock: socket.socket) -> bool:
    """Whether the client has sent something, or closed (the wire then sees it at once)."""
    try:
        sock.recv(1, socket.MSG_PEEK)
    except BlockingIOError:
        return False
    except OSError:
        return True  # a reset: the wire finds and counts it
    return True
