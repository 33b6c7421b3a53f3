"""The aiohttp middlewares a web config asks for: configured headers and bcrypt basic auth.

They apply what `web_config.load_web_config` validated; `web_config.web_middlewares` picks the
ones a config needs and orders them.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
from collections.abc import Callable, Mapping
from typing import Final

from aiohttp import hdrs, web
from aiohttp.typedefs import Handler, Middleware

__all__ = ["BasicAuth", "CheckPassword", "headers_middleware"]

CheckPassword = Callable[[bytes, bytes], bool]
"""`bcrypt.checkpw`'s signature (password, hashed); injectable so tests can count calls."""

_BCRYPT_MAX_PASSWORD: Final = 72  # bcrypt only reads this many bytes; Go truncates silently


def headers_middleware(headers: Mapping[str, str]) -> Middleware:
    """Adds `headers` to every response, errors included, unless the handler set them."""

    @web.middleware
    async def add_headers(request: web.Request, handler: Handler) -> web.StreamResponse:
        # As in exporter-toolkit the configured value is a default a handler may override.
        try:
            response = await handler(request)
        except web.HTTPException as exc:  # raised 404s and the like are responses too
            for name, value in headers.items():
                exc.headers.setdefault(name, value)
            raise
        if not response.prepared:  # a streamed response has already sent its headers
            for name, value in headers.items():
                response.headers.setdefault(name, value)
        return response

    return add_headers


class BasicAuth:
    """HTTP basic auth against bcrypt hashes without blocking the event loop.

    bcrypt costs tens of milliseconds by design, and Prometheus sends the same credentials every
    scrape, so (as exporter-toolkit does) a verified password is cached: by user, as the SHA-256
    of the password, compared in constant time. Only successes are cached, so the cache is
    bounded by the number of users and wrong guesses always pay for bcrypt.
    """

    def __init__(
        self, users: Mapping[str, bytes], checkpw: CheckPassword, public_paths: frozenset[str]
    ) -> None:
        self._users = users
        self._checkpw = checkpw
        self._public_paths = public_paths
        self._verified: dict[str, bytes] = {}
        # One check at a time, like exporter-toolkit's bcryptMtx: a flood of bad passwords then
        # costs one core and one executor thread instead of starving the shared executor.
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
        if credentials is not None and await self._authenticate(*credentials):
            return await handler(request)
        return web.Response(
            status=401, text="Unauthorized\n", headers={hdrs.WWW_AUTHENTICATE: "Basic"}
        )

    async def _authenticate(self, user: str, password: bytes) -> bool:
        digest = hashlib.sha256(password).digest()
        if self._is_cached(user, digest):
            return True
        async with self._lock:
            if self._is_cached(user, digest):  # a concurrent request just verified it
                return True
            hashed = self._users.get(user)
            loop = asyncio.get_running_loop()
            matched = await loop.run_in_executor(
                None, self._check, password[:_BCRYPT_MAX_PASSWORD], hashed or self._decoy
            )
            if matched and hashed is not None:
                self._verified[user] = digest
                return True
        return False

    def _check(self, password: bytes, hashed: bytes) -> bool:
        try:
            return self._checkpw(password, hashed)
        except ValueError:  # hashes are validated at load; a checker may still refuse input
            return False

    def _is_cached(self, user: str, digest: bytes) -> bool:
        known = self._verified.get(user)
        return known is not None and hmac.compare_digest(known, digest)


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
