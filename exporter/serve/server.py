"""HTTP serving: /metrics from pre-rendered bytes, a landing page, health and readiness.

No handler here touches NVML, the kubelet or the API server; each reads the latest result of
what is served (`Source`: the node's collection loop, or the cluster view's loop), so a scrape
costs the same whatever the GPUs or the cluster are doing.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping
from typing import Protocol

from aiohttp import hdrs, web
from aiohttp.http_writer import StreamWriter
from aiohttp.typedefs import Handler, Middleware

from kube_gpu_exporter.exporter import __version__
from kube_gpu_exporter.exporter.exposition.families import device_labels
from kube_gpu_exporter.exporter.serve.client_shares import Refusal, Shares, client_address
from kube_gpu_exporter.exporter.serve.collection import CollectionLoop
from kube_gpu_exporter.exporter.serve.connection import RETRY_AFTER_SECONDS
from kube_gpu_exporter.exporter.serve.middleware import headers_hook


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


LOOP_KEY: web.AppKey[Source] = web.AppKey("collection")


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

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in PROBE_PATHS or not limit:
            return await handler(request)
        client = client_address(request.transport and request.transport.get_extra_info("peername"))
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


def _retry_later(status: int, text: str) -> web.Response:
    return web.Response(
        status=status, text=text, headers={hdrs.RETRY_AFTER: str(RETRY_AFTER_SECONDS)}
    )


def accepts_gzip(accept_encoding: str) -> bool:
    """Whether `Accept-Encoding` admits gzip, q-values honoured (RFC 9110 §12.5.3): an explicit
    `gzip` (or `x-gzip`) entry decides, else `*`; q=0 means "not acceptable"."""
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


async def metrics(request: web.Request) -> web.StreamResponse:
    """The latest rendered snapshot, queued on the connection's wire without a copy. HEAD
    gets the headers GET would (Content-Length included) and no body."""
    latest = request.app[LOOP_KEY].latest
    if latest is None:
        return web.Response(status=503, text="no collection has completed yet\n")
    gzipped = accepts_gzip(request.headers.get(hdrs.ACCEPT_ENCODING, ""))
    body, content_type = latest.body(request.headers.get(hdrs.ACCEPT, ""), gzipped)
    # The body depends on Accept-Encoding, so caches must key on it.
    headers = {hdrs.CONTENT_TYPE: content_type, hdrs.VARY: hdrs.ACCEPT_ENCODING}
    if gzipped:
        headers[hdrs.CONTENT_ENCODING] = "gzip"
    response = web.Response(body=body, headers=headers)
    writer = await response.prepare(request)
    # The head on its own: aiohttp would otherwise join it and the body into one new bytes
    # object (it does on Python < 3.12.9), a copy per response that a client not reading
    # would pin; this way the wire queues a view of the rendered body (wire.py).
    if isinstance(writer, StreamWriter):
        writer.send_headers()
    await response.write_eof()  # aiohttp's Response leaves the body out for HEAD
    return response


async def healthz(request: web.Request) -> web.Response:
    """Liveness: the process serves and its collection loop still runs."""
    if not request.app[LOOP_KEY].alive:
        return web.Response(status=503, text="collection loop stopped\n")
    return web.Response(text="ok\n")


async def readyz(request: web.Request) -> web.Response:
    """Readiness: NVML has answered at least once and still does."""
    loop = request.app[LOOP_KEY]
    if loop.ready:
        return web.Response(text="ready\n")
    return web.Response(status=503, text=f"not ready: {loop.not_ready_reason()}\n")


def _rows(loop: CollectionLoop) -> Iterable[str]:
    if loop.latest is None:
        yield "<tr><td colspan=6>no collection has completed yet</td></tr>"
        return
    for device in loop.latest.snapshot.node.devices:
        ident = device.identity
        cells = (
            device_labels(ident)["gpu"],
            ident.uuid,
            ident.model,
            ident.mig_profile or "—",
            ident.pci_bus_id,
            "up" if device.up else "DOWN",
        )
        yield "<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in cells) + "</tr>"


async def landing(request: web.Request) -> web.Response:
    loop = request.app[LOOP_KEY]
    path = html.escape(request.app[PATH_KEY])
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>kube-gpu-exporter</title>
<style>body{{font-family:sans-serif;margin:2em}}td,th{{padding:.2em .8em;text-align:left}}</style>
</head><body>
<h1>kube-gpu-exporter {html.escape(__version__)}</h1>
<p><a href="{path}">Metrics</a> · <a href="/healthz">Health</a> · <a href="/readyz">Ready</a></p>
{_section(loop)}</body></html>
"""
    return web.Response(text=page, content_type="text/html")


def _section(loop: Source) -> str:
    """The node's devices; the cluster view (no devices of its own) says what it serves."""
    if not isinstance(loop, CollectionLoop):
        return "<h2>Cluster view</h2>\n<p>GPU capacity and why GPU pods wait, cluster-wide.</p>\n"
    return f"""<h2>Devices on this node</h2>
<table><tr><th>GPU</th><th>UUID</th><th>Model</th><th>MIG profile</th><th>PCI bus</th>
<th>State</th></tr>
{"".join(_rows(loop))}
</table>"""


PATH_KEY = web.AppKey("telemetry_path", str)


def build_app(
    loop: Source,
    telemetry_path: str = "/metrics",
    max_requests: int = 40,
    middlewares: Iterable[Middleware] = (),
    headers: Mapping[str, str] | None = None,
    max_requests_per_client: int = 0,
) -> web.Application:
    """The app. `middlewares` (basic auth) run outside the concurrency bound; `headers` (the
    web config's) go on every response the app prepares, /metrics' streamed one and the
    middlewares' 401 and 503 included, and none has a Server header."""
    limit = concurrency_limit(max_requests, max_requests_per_client)
    app = web.Application(middlewares=[*middlewares, limit])
    app.on_response_prepare.append(headers_hook(headers or {}))
    app[LOOP_KEY] = loop
    app[PATH_KEY] = telemetry_path
    app.router.add_get(telemetry_path, metrics)  # HEAD too
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    if telemetry_path != "/":
        app.router.add_get("/", landing)
    return app
