"""What a web config asks of every request: bcrypt basic auth.

It applies what `web_config.load_web_config` validated; `web_config.web_middlewares` builds the
middleware, and `server.build_app` places it outside the scrape bound. (The configured headers
go on every answer where answers are written: connection.py.)
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import hmac
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Final

from kube_gpu_exporter.exporter.httpd import (
    RETRY_AFTER_SECONDS,
    Handler,
    Refusal,
    Request,
    Response,
    Shares,
)

__all__ = ["BasicAuth", "CheckPassword"]

CheckPassword = Callable[[bytes, bytes], bool]
"""`bcrypt.checkpw`'s signature (password, hashed); injectable so tests can count calls."""

BCRYPT_MAX_PASSWORD: Final = 72  # bcrypt reads no further; Go's bcrypt refuses longer ones
REFUSED_CACHE_SIZE: Final = 1024  # remembered wrong (user, password) pairs
# Distinct checks running or queued: from suspect addresses in all (then a quick 503), from
# any one address (then 429), and, as a last resort, from addresses that are not suspects.
MAX_PENDING_CHECKS: Final = 8
MAX_PENDING_PER_CLIENT: Final = 2
MAX_PENDING_TRUSTED: Final = 64
SUSPECTS: Final = 4096  # addresses remembered for their last failed check
GAVE_WAY: Final = 8192  # addresses remembered with the credentials whose check gave way


class BasicAuth:
    """HTTP basic auth against bcrypt hashes, which no flood of wrong passwords can turn into a
    lockout of Prometheus, whichever addresses it comes from.

    bcrypt costs tens of milliseconds by design, so, as exporter-toolkit does, outcomes are
    cached by user and the SHA-256 of the password (compared in constant time): successes per
    user (Prometheus sends the same credentials every scrape), failures in a bounded LRU apart,
    so a flood of distinct guesses evicts only other guesses. Both caches are read before any
    queue, so a cached scraper never waits behind a bcrypt check. Checks run one at a time off
    the event loop (exporter-toolkit's bcryptMtx: a flood costs one core, not all); requests
    with the same credentials share one check.

    Failures cost the failing address, not the others (`CheckTurns`): an address whose last
    check failed, or which has one under way, is a suspect, and its checks wait behind those of
    every address that is not, and take turns with the other suspects' by address. Among
    addresses not yet suspect (each new flooding address is one, once), the newest check goes
    first and the oldest gives way when MAX_PENDING_TRUSTED wait (503): Prometheus' first
    scrape after a restart is not queued behind every address that flooded before it. And
    credentials asked for again while their check waits, or after it gave way (Prometheus'
    next scrape, an HA pair), go before all others: a flood of distinct guesses never
    repeats one, and an address whose check gave way that asks something else waits with
    the suspects. Pending
    checks are shared per address (MAX_PENDING_PER_CLIENT, then 429) and, for suspects, in
    all (MAX_PENDING_CHECKS, then 503), both with Retry-After, instead of an unbounded queue.
    This middleware runs outside the scrape bound, so none of this takes a
    `--web.max-requests` slot. Passwords over 72 bytes never match (Go's bcrypt refuses
    them; ours would compare their first 72 bytes).
    """

    def __init__(
        self, users: Mapping[str, bytes], checkpw: CheckPassword, public_paths: frozenset[str]
    ) -> None:
        self._users = users
        self._checkpw = checkpw
        self._public_paths = public_paths
        self._verified: dict[str, bytes] = {}
        self._refused: OrderedDict[tuple[str, bytes], None] = OrderedDict()
        self._checking: dict[tuple[str, bytes], asyncio.Future[bool | None]] = {}
        self._suspects: OrderedDict[str, None] = OrderedDict()  # addresses, last check failed
        # address → the credentials whose check gave way to newer ones (503): asked again,
        # they go first; another password from there waits with the suspects'.
        self._gave_way: OrderedDict[str, tuple[str, bytes]] = OrderedDict()
        self._per_client = Shares(0, MAX_PENDING_PER_CLIENT)
        self._suspect_checks = Shares(MAX_PENDING_CHECKS, 0)
        self._turns = CheckTurns(MAX_PENDING_TRUSTED)
        # Unknown users are checked against the costliest configured hash so they take as long
        # as known ones (no user enumeration by timing); they can never pass, match or not.
        self._decoy = max(users.values(), key=lambda hashed: int(hashed[4:6]))

    async def middleware(self, request: Request, handler: Handler) -> Response:
        """Passes requests for public paths and those with good credentials; 401s the rest."""
        if request.path in self._public_paths:
            return await handler(request)
        credentials = _parse_basic_auth(request.headers.get("authorization", ""))
        client = request.client
        verdict = await self._authenticate(client, *credentials) if credentials else False
        if verdict is True:
            return await handler(request)
        if verdict is Refusal.CLIENT:
            return _retry_later(429, "too many password checks from your address\n")
        if verdict is Refusal.TOTAL or verdict is None:
            return _retry_later(503, "too many password checks in progress\n")
        return Response(401, text="Unauthorized\n", headers={"WWW-Authenticate": "Basic"})

    async def _authenticate(self, client: str, user: str, password: bytes) -> bool | Refusal | None:
        """True or False; a Refusal when too many checks are already waiting; None when the
        shared check was cancelled."""
        if len(password) > BCRYPT_MAX_PASSWORD:
            return False
        digest = hashlib.sha256(password).digest()
        cached = self._cached(user, digest)
        if cached is not None:
            return cached
        key = (user, digest)
        running = self._checking.get(key)
        if running is not None:  # the same credentials are being checked: share that check
            self._turns.repeat(key)
            return await asyncio.shield(running)
        # Asked again after its check gave way: first in line (Prometheus' next scrape). A
        # suspect: its last check failed, it has one under way (a new address gets one check
        # ahead of the suspects, not one per connection it opens), or it asked something
        # else after its check gave way (a flood of new passwords is not asked twice).
        before = self._gave_way.pop(client, None)
        again = before == key
        suspect = not again and (
            before is not None or client in self._suspects or self._per_client.held(client) > 0
        )
        refusal = self._per_client.take(client)
        if refusal is not None:
            return refusal
        if suspect and (refusal := self._suspect_checks.take(client)) is not None:
            self._per_client.give_back(client)
            return refusal
        loop = asyncio.get_running_loop()
        verdict: asyncio.Future[bool | None] = loop.create_future()
        self._checking[key] = verdict
        try:
            async with self._turns.turn(client, key, suspect, again):
                hashed = self._users.get(user)
                matched = await loop.run_in_executor(
                    None, self._check, password, hashed or self._decoy
                )
            matched = matched and hashed is not None
            self._remember(user, digest, matched)
            self._judge(client, matched)
            verdict.set_result(matched)
            return matched
        except GaveWay:
            self._gave_way[client] = key
            while len(self._gave_way) > GAVE_WAY:
                self._gave_way.popitem(last=False)
            return Refusal.TOTAL
        finally:
            if not verdict.done():  # cancelled or gave way: those sharing it may ask again
                verdict.set_result(None)
            del self._checking[key]
            self._per_client.give_back(client)
            if suspect:
                self._suspect_checks.give_back(client)

    def _judge(self, client: str, matched: bool) -> None:
        """A failed check makes its address a suspect (remembered for SUSPECTS addresses), a
        successful one clears it."""
        if matched:
            self._suspects.pop(client, None)
            return
        self._suspects[client] = None
        self._suspects.move_to_end(client)
        while len(self._suspects) > SUSPECTS:
            self._suspects.popitem(last=False)

    def _check(self, password: bytes, hashed: bytes) -> bool:
        try:
            return self._checkpw(password, hashed)
        except ValueError:  # hashes are validated at load; a checker may still refuse input
            return False

    def _cached(self, user: str, digest: bytes) -> bool | None:
        known = self._verified.get(user)
        if known is not None and hmac.compare_digest(known, digest):
            return True
        key = (user, digest)
        if key in self._refused:
            self._refused.move_to_end(key)
            return False
        return None

    def _remember(self, user: str, digest: bytes, matched: bool) -> None:
        if matched:
            self._verified[user] = digest
            return
        self._refused[(user, digest)] = None
        while len(self._refused) > REFUSED_CACHE_SIZE:
            self._refused.popitem(last=False)


class GaveWay(Exception):
    """A waiting check of an address not yet suspect made room for a newer one (503)."""


MADE_ROOM: Final = object()  # what the waiter of a check that gave way is told


class CheckTurns:
    """Whose bcrypt check runs next, one at a time: credentials asked for again while they
    waited, in order; then those of addresses that are not suspects, newest first (at most
    `trusted` wait: the oldest gives way); then the suspects', one address after another."""

    def __init__(self, trusted: int) -> None:
        self._busy = False
        self._most_trusted = trusted
        self._repeated: deque[asyncio.Future[object]] = deque()
        self._trusted: deque[asyncio.Future[object]] = deque()  # oldest on the left
        self._suspects: OrderedDict[str, deque[asyncio.Future[object]]] = OrderedDict()
        self._by_key: dict[object, asyncio.Future[object]] = {}

    @contextlib.asynccontextmanager
    async def turn(
        self, client: str, key: object, suspect: bool, again: bool = False
    ) -> AsyncIterator[None]:
        """Wait for the turn of the check of `key` (GaveWay if it made room), run it, pass on;
        `again`: asked again, it goes with the repeated ones."""
        await self._wait(client, key, suspect, again)
        try:
            yield
        finally:
            self._next()

    def repeat(self, key: object) -> None:
        """The credentials of `key` were asked for again: their waiting check goes first."""
        waiter = self._by_key.get(key)
        if waiter is None or waiter.done() or waiter in self._repeated:
            return
        if waiter in self._trusted:
            self._trusted.remove(waiter)
        else:
            for client, queue in list(self._suspects.items()):
                if waiter in queue:
                    queue.remove(waiter)
                    if not queue:
                        del self._suspects[client]
                    break
        self._repeated.append(waiter)

    async def _wait(self, client: str, key: object, suspect: bool, again: bool) -> None:
        if not self._busy:
            self._busy = True
            return
        waiter: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        if again:
            self._repeated.append(waiter)
        elif suspect:
            self._suspects.setdefault(client, deque()).append(waiter)
        else:
            self._trusted.append(waiter)
            if len(self._trusted) > self._most_trusted:
                # a result, not an exception: a future holding a raised exception holds its
                # traceback, whose frames hold the future (a cycle per check that gave way)
                self._trusted.popleft().set_result(MADE_ROOM)
        self._by_key[key] = waiter
        try:
            if await waiter is MADE_ROOM:
                raise GaveWay
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._next()  # our turn came as we were cancelled: pass it on
            else:
                self._forget(client, waiter)
            raise
        finally:
            if self._by_key.get(key) is waiter:
                del self._by_key[key]

    def _forget(self, client: str, waiter: asyncio.Future[object]) -> None:
        for queue in (self._repeated, self._trusted):
            if waiter in queue:
                queue.remove(waiter)
                return
        waiting = self._suspects.get(client)
        if waiting is not None and waiter in waiting:
            waiting.remove(waiter)
            if not waiting:
                del self._suspects[client]

    def _next(self) -> None:
        for queue, take in ((self._repeated, deque.popleft), (self._trusted, deque.pop)):
            while queue:
                waiter = take(queue)
                if not waiter.done():
                    waiter.set_result(None)
                    return
        while self._suspects:
            client, queue = next(iter(self._suspects.items()))
            waiter = queue.popleft()
            del self._suspects[client]
            if queue:
                self._suspects[client] = queue  # the back of the line, behind the others
            if not waiter.done():
                waiter.set_result(None)
                return
        self._busy = False


def _retry_later(status: int, text: str) -> Response:
    return Response(status, text=text, headers={"Retry-After": str(RETRY_AFTER_SECONDS)})


def _parse_basic_auth(header: str) -> tuple[str, bytes] | None:
    """(user, password bytes) from an Authorization header, like Go's Request.BasicAuth."""
    scheme, _, encoded = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True)
        user, sep, password = decoded.partition(b":")
        return (user.decode("utf-8"), password) if sep else None
    except (binascii.Error, ValueError):  # bad base64, non-ASCII input, non-UTF-8 user
        return None
