"""Fair shares per client address: what one address holds cannot keep another out.

A global limit that every client shares is a lock whoever fills it first holds: 256 idle
connections kept the kubelet's probes and Prometheus out. As nginx does (`limit_conn` per
`$binary_remote_addr`), every limited resource here is counted per client address too, and an
address is refused (429) once it holds its own share, while the others still get theirs.

The global limit stays as a last resort, and still leaves room for an address not yet seen:
when every connection is taken, a newcomer holding fewer than the heaviest address displaces
that address's connection idle the longest (`ConnectionTable.admit`), so whoever holds the
most gives way first. Only when every address holds about as many (thousands of addresses,
one connection each) is a newcomer turned away; the listener still answers its probe then.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from enum import Enum
from typing import Final, Generic, Protocol, TypeVar


class Held(Protocol):
    """A connection as the table sees it."""

    @property
    def last_active(self) -> float: ...


T = TypeVar("T", bound=Held)


class Verdict(Enum):
    ADMIT = "admit"
    CLIENT_FULL = "client_full"  # the address holds its share: its own limit (429)
    FULL = "full"  # every connection taken and nobody to displace (503)


@dataclass(frozen=True)
class Admission(Generic[T]):
    verdict: Verdict
    evicted: T | None = None  # displaced to make room: to be cut by the caller


class ConnectionTable(Generic[T]):
    """Open connections by client address, at most `per_client` each and `total` in all."""

    def __init__(self, total: int, per_client: int) -> None:
        self.total = total
        self.per_client = min(per_client, total)
        self._by_client: dict[str, dict[T, None]] = {}
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def held_by(self, client: str) -> int:
        return len(self._by_client.get(client, ()))

    def admit(self, client: str) -> Admission[T]:
        """Whether `client` may open one more connection; the connection displaced for it when
        every one is taken. The caller then `add`s the new one and cuts the displaced one."""
        held = self.held_by(client)
        if held >= self.per_client:
            return Admission(Verdict.CLIENT_FULL)
        if self._count < self.total:
            return Admission(Verdict.ADMIT)
        heaviest = max(self._by_client, key=lambda address: len(self._by_client[address]))
        # Strictly heavier by two: after the swap the newcomer still holds fewer, so two
        # addresses with equal shares never take turns displacing each other.
        if len(self._by_client[heaviest]) < held + 2:
            return Admission(Verdict.FULL)
        victims = self._by_client[heaviest]
        victim = min(victims, key=lambda connection: connection.last_active)
        self.remove(heaviest, victim)
        return Admission(Verdict.ADMIT, victim)

    def add(self, client: str, connection: T) -> None:
        self._by_client.setdefault(client, {})[connection] = None
        self._count += 1

    def remove(self, client: str, connection: T) -> None:
        """Forget `connection` (once: a displaced one ends later, and is removed again)."""
        held = self._by_client.get(client)
        if held is None or connection not in held:
            return
        del held[connection]
        self._count -= 1
        if not held:
            del self._by_client[client]


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
