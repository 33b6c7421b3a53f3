"""What a web config asks of every response: configured headers and bcrypt basic auth.

They apply what `web_config.load_web_config` validated; `web_config.web_middlewares` builds the
auth middleware, and `server.build_app` places it outside the scrape bound.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from typing import Final

from aiohttp import hdrs, web
from aiohttp.typedefs import Handler

__all__ = ["BasicAuth", "CheckPassword", "headers_hook"]

CheckPassword = Callable[[bytes, bytes], bool]
"""`bcrypt.checkpw`'s signature (password, hashed); injectable so tests can count calls."""

BCRYPT_MAX_PASSWORD: Final = 72  # bcrypt reads no further; Go's bcrypt refuses longer ones
REFUSED_CACHE_SIZE: Final = 1024  # remembered wrong (user, password) pairs
MAX_PENDING_CHECKS: Final = 8  # distinct checks running or queued; beyond them, a quick 503


def headers_hook(
    headers: Mapping[str, str],
) -> Callable[[web.Request, web.StreamResponse], Awaitable[None]]:
    """An `on_response_prepare` hook adding `headers` to every response the app sends: a
    middleware cannot reach a response its handler has already started streaming (/metrics),
    the hook runs inside `prepare` itself. As in exporter-toolkit the configured value is a
    default a handler may override."""

    async def add_headers(request: web.Request, response: web.StreamResponse) -> None:
        for name, value in headers.items():
            response.headers.setdefault(name, value)

    return add_headers


class BasicAuth:
    """HTTP basic auth against bcrypt hashes, which no flood of wrong passwords can turn into a
    lockout of Prometheus.

    bcrypt costs tens of milliseconds by design, so, as exporter-toolkit does, outcomes are
    cached by user and the SHA-256 of the password (compared in constant time): successes per
    user (Prometheus sends the same credentials every scrape), failures in a bounded LRU apart,
    so a flood of distinct guesses evicts only other guesses. Both caches are read before any
    lock, so a cached scraper never waits behind a bcrypt check. Checks run one at a time off
    the event loop (exporter-toolkit's bcryptMtx: a flood costs one core, not all); requests
    with the same credentials share one check; at most MAX_PENDING_CHECKS distinct ones run or
    wait, and beyond them a request gets a quick 503 instead of a place in an unbounded queue.
    This middleware runs outside the scrape bound, so none of this takes a `--web.max-requests`
    slot. Passwords over 72 bytes never match (Go's bcrypt refuses them; ours would compare
    their first 72 bytes).
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
        self._lock = asyncio.Lock()
        # Unknown users are checked against the costliest configured hash so they take as long
        # as known ones (no user enumeration by timing); they can never pass, match or not.
        self._decoy = max(users.values(), key=lambda hashed: int(hashed[4:6]))

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Passes requests for public paths and those with good credentials; 401s the rest."""
        if request.path in self._public_paths:
            return await handler(request)
        credentials = _parse_basic_auth(request.headers.get(hdrs.AUTHORIZATION, ""))
        verdict = await self._authenticate(*credentials) if credentials else False
        if verdict:
            return await handler(request)
        if verdict is None:
            return web.Response(status=503, text="too many password checks in progress\n")
        return web.Response(
            status=401, text="Unauthorized\n", headers={hdrs.WWW_AUTHENTICATE: "Basic"}
        )

    async def _authenticate(self, user: str, password: bytes) -> bool | None:
        """True or False; None when too many checks are already waiting."""
        if len(password) > BCRYPT_MAX_PASSWORD:
            return False
        digest = hashlib.sha256(password).digest()
        cached = self._cached(user, digest)
        if cached is not None:
            return cached
        key = (user, digest)
        running = self._checking.get(key)
        if running is not None:  # the same credentials are being checked: share that check
            return await asyncio.shield(running)
        if len(self._checking) >= MAX_PENDING_CHECKS:
            return None
        loop = asyncio.get_running_loop()
        verdict: asyncio.Future[bool | None] = loop.create_future()
        self._checking[key] = verdict
        try:
            async with self._lock:
                hashed = self._users.get(user)
                matched = await loop.run_in_executor(
                    None, self._check, password, hashed or self._decoy
                )
            matched = matched and hashed is not None
            self._remember(user, digest, matched)
            verdict.set_result(matched)
            return matched
        finally:
            if not verdict.done():  # cancelled: those sharing it may ask again
                verdict.set_result(None)
            del self._checking[key]

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
