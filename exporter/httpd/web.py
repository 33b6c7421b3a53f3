"""What a handler takes and gives, and the app that routes a request to one.

The server answers five paths, GET and HEAD only, so an app is a dict from path to handler
with middlewares around it, in the shape aiohttp's have ((request, handler) → response): the
connection (connection.py) parses the request and writes the response, and everything between
is here. A HEAD request meets GET's handler: the connection sends the headers and leaves the
body out. Unknown paths get 404 and other methods 405, inside the middlewares (so basic auth
guards them too), as aiohttp's router did.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

TEXT: Final = "text/plain; charset=utf-8"
ALLOWED: Final = "GET,HEAD"


class Transport(Protocol):
    """What a handler may ask of the connection's transport (wire.py's Wire)."""

    def get_extra_info(self, name: str, default: Any = None) -> Any: ...


@dataclass(frozen=True, slots=True)
class Request:
    """One parsed request. `headers` has lower-case names (a repeated header's values joined
    with ", "); `client` is the peer's address, as the shares count it."""

    method: str
    path: str
    headers: Mapping[str, str]
    client: str
    transport: Transport


class Response:
    """Status, headers and the whole body (a `bytes` that may be shared: it is never copied).
    `text` is sent as UTF-8 with `content_type` (text/plain by default)."""

    __slots__ = ("body", "headers", "status")

    def __init__(
        self,
        status: int = 200,
        *,
        text: str | None = None,
        body: bytes = b"",
        content_type: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.status = status
        self.headers: dict[str, str] = {}
        if text is not None:
            body = text.encode()
            content_type = f"{content_type}; charset=utf-8" if content_type else TEXT
        if content_type is not None:
            self.headers["Content-Type"] = content_type
        if headers:
            self.headers.update(headers)
        self.body = body


Handler = Callable[[Request], Awaitable[Response]]
Middleware = Callable[[Request, Handler], Awaitable[Response]]


class App:
    """Routes by exact path; middlewares run outermost first, around the route's handler
    (or the 404 / 405) — as aiohttp's app did. `state` holds what handlers read."""

    def __init__(self, middlewares: Iterable[Middleware] = ()) -> None:
        self._routes: dict[str, Handler] = {}
        self.state: dict[str, Any] = {}
        handler: Handler = self._route
        for middleware in reversed(list(middlewares)):
            handler = _wrap(middleware, handler)
        self._handle = handler

    def add_get(self, path: str, handler: Handler) -> None:
        """GET (and HEAD) of `path`."""
        self._routes[path] = handler

    def resolve(self, path: str) -> Handler | None:
        return self._routes.get(path)

    def handle(self, request: Request) -> Awaitable[Response]:
        return self._handle(request)

    async def _route(self, request: Request) -> Response:
        handler = self._routes.get(request.path)
        if handler is None:
            return Response(404, text="404: Not Found")
        if request.method not in ("GET", "HEAD"):
            return Response(405, text="405: Method Not Allowed", headers={"Allow": ALLOWED})
        return await handler(request)


def _wrap(middleware: Middleware, inner: Handler) -> Handler:
    def handler(request: Request) -> Awaitable[Response]:
        return middleware(request, inner)

    return handler
