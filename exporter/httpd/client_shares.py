"""Fair shares per client address, and a connection for every newcomer.

A global limit that every client shares is a lock whoever fills it first holds: 256 idle
connections kept the kubelet's probes and Prometheus out. As nginx does (`limit_conn` per
`$binary_remote_addr`), connections are counted per client address too.

What no count can do is tell a scraper from an attacker that holds one connection on each of
thousands of addresses, or that shares the scraper's address (NAT, a node's SNAT). So a full
table never turns a newcomer away while some connection can give way: an open connection that
is not having a request handled is cheap to drop (Prometheus and the kubelet reconnect), and
the one that went longest without progress (a whole request read, or an answer taken whole by
the kernel) goes first. Where to take it from, in order (`ConnectionTable.admit`):

1. an address at its own share (`per_client`) makes room among its own connections: a shared
   address is never refused because of what the others on it hold;
2. with every connection taken, the address holding the most gives way first, if it holds at
   least two more than the newcomer's (two addresses with equal shares never take turns);
3. else the connection idle longest anywhere.

Only when every connection has a request in the app (password checks, bounded by their own
shares) is a newcomer turned away; the listener still answers its probe then. An attacker
reconnecting as fast as it can thus cycles through the table, and a scraper's new connection,
the newest of all, is served within its first round trip.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Final, Generic, TypeVar

T = TypeVar("T", bound=Hashable)


class Verdict(Enum):
    ADMIT = "admit"
    CLIENT_FULL = "client_full"  # the address holds its share, each with a request in hand (429)
    FULL = "full"  # every connection has a request in hand: nobody to displace (503)


@dataclass(frozen=True)
class Admission(Generic[T]):
    verdict: Verdict
    evicted: T | None = None  # displaced to make room: to be cut by the caller


class ConnectionTable(Generic[T]):
    """Open connections by client address, at most `per_client` each and `total` in all, each
    address's and the whole table's kept in the order of their last progress (`touch`).
    `busy(connection)` says whether a request of it is being handled: such a one stays."""

    def __init__(self, total: int, per_client: int, busy: Callable[[T], bool]) -> None:
        self.total = total
        self.per_client = min(per_client, total)
        self._busy = busy
        self._by_client: dict[str, dict[T, None]] = {}
        self._order: dict[T, str] = {}  # every connection → its address, least recent first

    def __len__(self) -> int:
        return len(self._order)

    def held_by(self, client: str) -> int:
        return len(self._by_client.get(client, ()))

    def admit(self, client: str) -> Admission[T]:
        """Whether `client` may open one more connection, and the connection displaced for it.
        The caller then `add`s the new one and cuts the displaced one (removed here already)."""
        held = self.held_by(client)
        if held >= self.per_client:
            return self._displace(self._by_client[client], Verdict.CLIENT_FULL)
        if len(self._order) < self.total:
            return Admission(Verdict.ADMIT)
        heaviest = max(self._by_client, key=lambda address: len(self._by_client[address]))
        if len(self._by_client[heaviest]) >= held + 2:
            admission = self._displace(self._by_client[heaviest], Verdict.FULL)
            if admission.evicted is not None:
                return admission
        return self._displace(self._order, Verdict.FULL)

    def add(self, client: str, connection: T) -> None:
        self._by_client.setdefault(client, {})[connection] = None
        self._order[connection] = client

    def touch(self, connection: T) -> None:
        """`connection` made progress: it goes last in the order of eviction."""
        client = self._order.pop(connection, None)
        if client is None:
            return
        self._order[connection] = client
        held = self._by_client[client]
        del held[connection]
        held[connection] = None

    def remove(self, client: str, connection: T) -> None:
        """Forget `connection` (once: a displaced one ends later, and is removed again)."""
        held = self._by_client.get(client)
        if held is None or connection not in held:
            return
        del held[connection]
        del self._order[connection]
        if not held:
            del self._by_client[client]

    def _displace(self, candidates: Iterable[T], otherwise: Verdict) -> Admission[T]:
        """The least recent of `candidates` without a request in hand, removed; else
        `otherwise`. Busy ones are few (bounded by the request slots), so the walk is short."""
        for connection in candidates:
            if not self._busy(connection):
                self.remove(self._order[connection], connection)
                return Admission(Verdict.ADMIT, connection)
        return Admission(otherwise)


class Refusal(Enum):
    CLIENT = "client"  # the address holds its share
    TOTAL = "total"  # every one is taken


class Shares:
    """A count of things held (request slots), at most `per_client` per address and `total`
    in all; 0 means no limit."""

    def __init__(self, total: int, per_client: int) -> None:
        self.total = total
        self.per_client = per_client
        self._held: Counter[str] = Counter()
        self._count = 0

    def take(self, client: str) -> Refusal | None:
        """Take one for `client`; None when taken, else why not."""
        if self.per_client and self._held[client] >= self.per_client:
            return Refusal.CLIENT
        if self.total and self._count >= self.total:
            return Refusal.TOTAL
        self._held[client] += 1
        self._count += 1
        return None

    def held(self, client: str) -> int:
        return self._held[client]

    def give_back(self, client: str) -> None:
        self._held[client] -= 1
        self._count -= 1
        if self._held[client] <= 0:
            del self._held[client]


UNKNOWN_CLIENT: Final = "unknown"  # a peer address the transport does not tell


def client_address(peername: object) -> str:
    """The address part of a transport's peername ((host, port, ...) for IPv4 and IPv6)."""
    if isinstance(peername, tuple) and peername and isinstance(peername[0], str):
        return peername[0]
    return UNKNOWN_CLIENT
