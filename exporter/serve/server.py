"""HTTP serving: /metrics from pre-rendered bytes, a landing page, health and readiness.

No handler here touches NVML, the kubelet or the API server; each reads the latest result of
what is served (`Source`: the node's collection loop, or the cluster view's loop), so a scrape
costs the same whatever the GPUs or the cluster are doing.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Protocol

from kube_gpu_exporter.exporter.httpd import (
    RETRY_AFTER_SECONDS,
    App,
    Handler,
    Middleware,
    Refusal,
    Request,
    Response,
    Shares,
)
from kube_gpu_exporter.exporter.serve.landing import page


class Body(Protocol):
    """A result's exposition bodies (render.py's `Rendered` and `FamiliesBody`)."""

    def body(self, accept: str, gzipped: bool) -> tuple[bytes, str]: ...


class Source(Protocol):
    """What the server reads of what it serves: the latest bodies, liveness and readiness,
    and why it is not ready (shown in /readyz's 503)."""

    @property
    def latest(self) -> Body | None: ...

    @property
    def alive(self) -> bool: ...

    @property
    def ready(self) -> bool: ...

    def not_ready_reason(self) -> str: ...

    def landing_section(self) -> str:
        """Its part of the landing page, as HTML (landing.py)."""
        ...


LOOP_KEY = "collection"  # App.state: the Source
PATH_KEY = "telemetry_path"  # App.state: where /metrics is served


PROBE_PATHS = frozenset({"/healthz", "/readyz"})


def concurrency_limit(limit: int, per_client: int = 0) -> Middleware:
    """Bound concurrent requests (exporter-toolkit's --web.max-requests), in all and per client
    address (--web.max-requests-per-client): 503 beyond the first, 429 beyond the second, both
    with Retry-After.

    A slot covers the handler only. /metrics queues pre-rendered bytes that the connection's
    wire hands to the kernel as the client reads (wire.py), so a client that never reads holds
    its connection, not a slot, and no number of them can take the slots a scraper needs. This
    is the innermost middleware: basic auth runs outside it, so bcrypt work and wrong passwords
    never take a slot from a scraper with good credentials. Probes are never refused, so a
    flood cannot make the kubelet restart a healthy exporter.
    """
    shares = Shares(limit, per_client if limit else 0)

    async def middleware(request: Request, handler: Handler) -> Response:
        if request.path in PROBE_PATHS or not limit:
            return await handler(request)
        client = request.client
        refusal = shares.take(client)
        if refusal is Refusal.CLIENT:
            return _retry_later(429, "too many concurrent requests from your address\n")
        if refusal is Refusal.TOTAL:
            return _retry_later(503, "too many concurrent requests\n")
        try:
            return await handler(request)
        finally:
            shares.give_back(client)

    return middleware


def _retry_later(status: int, text: str) -> Response:
    return Response(status, text=text, headers={"Retry-After": str(RETRY_AFTER_SECONDS)})


def accepts_gzip(accept_encoding: str) -> bool:
    """Whether `Accept-Encoding` admits gzip, q-values honoured (RFC 9110 §12.5.3): an explicit
    `gzip` (or `x-gzip`) entry decides, else `*`; q=0 means "not acceptable". A scraper sends
    the same field every time: short ones are remembered."""
    if len(accept_encoding) <= MEMO_CHARS:
        return _gzip_remembered(accept_encoding)
    return _accepts_gzip(accept_encoding)


def _accepts_gzip(accept_encoding: str) -> bool:
    explicit: float | None = None
    wildcard: float | None = None
    for entry in accept_encoding.split(","):
        coding, *params = (part.strip() for part in entry.split(";"))
        quality = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0  # unreadable: not a preference we may assume
        coding = coding.lower()
        if coding in ("gzip", "x-gzip"):
            explicit = quality if explicit is None else max(explicit, quality)
        elif coding == "*":
            wildcard = quality
    chosen = explicit if explicit is not None else wildcard
    return chosen is not None and chosen > 0


MEMO_CHARS = 256  # header values remembered per negotiation: 64 of them, a few KiB at most
_gzip_remembered = functools.lru_cache(maxsize=64)(_accepts_gzip)


def metrics(app: App) -> Handler:
    """The latest rendered snapshot, as the shared bytes object the connection queues views
    of (never copied per client). HEAD gets the headers GET would (Content-Length included)
    and no body."""
    source: Source = app.state[LOOP_KEY]

    async def handler(request: Request) -> Response:
        latest = source.latest
        if latest is None:
            return Response(503, text="no collection has completed yet\n")
        headers = request.headers
        gzipped = accepts_gzip(headers.get("accept-encoding", ""))
        body, content_type = latest.body(headers.get("accept", ""), gzipped)
        # The body depends on Accept-Encoding, so caches must key on it.
        answer = Response(body=body, content_type=content_type, headers=_VARY)
        if gzipped:
            answer.headers["Content-Encoding"] = "gzip"
        return answer

    return handler


_VARY = {"Vary": "Accept-Encoding"}


def healthz(app: App) -> Handler:
    """Liveness: the process serves and its collection loop still runs."""
    source: Source = app.state[LOOP_KEY]

    async def handler(request: Request) -> Response:
        if not source.alive:
            return Response(503, text="collection loop stopped\n")
        return Response(text="ok\n")

    return handler


def readyz(app: App) -> Handler:
    """Readiness: NVML has answered at least once and still does."""
    source: Source = app.state[LOOP_KEY]

    async def handler(request: Request) -> Response:
        if source.ready:
            return Response(text="ready\n")
        return Response(503, text=f"not ready: {source.not_ready_reason()}\n")

    return handler


def landing(app: App) -> Handler:
    """The landing page (landing.py): links, and the section the source writes."""
    source: Source = app.state[LOOP_KEY]
    path: str = app.state[PATH_KEY]

    async def handler(request: Request) -> Response:
        return Response(text=page(source.landing_section(), path), content_type="text/html")

    return handler


def build_app(
    loop: Source,
    telemetry_path: str = "/metrics",
    max_requests: int = 40,
    middlewares: Iterable[Middleware] = (),
    max_requests_per_client: int = 0,
) -> App:
    """The app. `middlewares` (basic auth) run outside the concurrency bound; the web
    config's headers go on every answer the connection writes (connection.py)."""
    limit = concurrency_limit(max_requests, max_requests_per_client)
    app = App(middlewares=[*middlewares, limit])
    app.state[LOOP_KEY] = loop
    app.state[PATH_KEY] = telemetry_path
    app.add_get(telemetry_path, metrics(app))  # HEAD too
    app.add_get("/healthz", healthz(app))
    app.add_get("/readyz", readyz(app))
    if telemetry_path != "/":
        app.add_get("/", landing(app))
    return app


def build_probe_app(loop: Source) -> App:
    """The probes alone, for `--web.probe-listen-address`: plain HTTP, no auth, no bound
    shared with the scrapes (the kubelet presents no client certificate and no password)."""
    app = App()
    app.state[LOOP_KEY] = loop
    app.add_get("/healthz", healthz(app))
    app.add_get("/readyz", readyz(app))
    return app
