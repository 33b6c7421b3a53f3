"""HTTP serving: /metrics from pre-rendered bytes, a landing page, health and readiness.

No handler here touches NVML or the kubelet; each reads the collection loop's latest result,
so a scrape costs the same whatever the GPUs are doing.
"""

from __future__ import annotations

import html
from collections.abc import Iterable

from aiohttp import web
from aiohttp.typedefs import Middleware

from . import __version__
from .collection import CollectionLoop
from .render import device_labels

LOOP_KEY = web.AppKey("collection", CollectionLoop)


class ScrapeLimiter:
    """Bounds concurrent /metrics responses, including the time spent writing them.

    A slow or stuck client holds its slot until its body is written, so a pile-up answers 503
    quickly instead of growing memory without bound (exporter-toolkit's --web.max-requests).
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_flight = 0


async def metrics(request: web.Request) -> web.StreamResponse:
    limiter: ScrapeLimiter = request.app[LIMITER_KEY]
    if limiter.limit and limiter.in_flight >= limiter.limit:
        return web.Response(status=503, text="too many concurrent scrapes\n")
    latest = request.app[LOOP_KEY].latest
    if latest is None:
        return web.Response(status=503, text="no collection has completed yet\n")
    gzipped = "gzip" in request.headers.get("Accept-Encoding", "")
    body, content_type = latest.body(request.headers.get("Accept", ""), gzipped)
    limiter.in_flight += 1
    try:
        response = web.StreamResponse(headers={"Content-Type": content_type})
        if gzipped:
            response.headers["Content-Encoding"] = "gzip"
        response.content_length = len(body)
        await response.prepare(request)
        await response.write(body)
        await response.write_eof()
        return response
    finally:
        limiter.in_flight -= 1


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
    reason = "NVML has not answered yet" if not loop.ever_succeeded else "NVML is not answering"
    return web.Response(status=503, text=f"not ready: {reason}\n")


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
<h2>Devices on this node</h2>
<table><tr><th>GPU</th><th>UUID</th><th>Model</th><th>MIG profile</th><th>PCI bus</th>
<th>State</th></tr>
{"".join(_rows(loop))}
</table></body></html>
"""
    return web.Response(text=page, content_type="text/html")


LIMITER_KEY = web.AppKey("limiter", ScrapeLimiter)
PATH_KEY = web.AppKey("telemetry_path", str)


def build_app(
    loop: CollectionLoop,
    telemetry_path: str = "/metrics",
    max_requests: int = 40,
    middlewares: Iterable[Middleware] = (),
) -> web.Application:
    app = web.Application(middlewares=list(middlewares))
    app[LOOP_KEY] = loop
    app[LIMITER_KEY] = ScrapeLimiter(max_requests)
    app[PATH_KEY] = telemetry_path
    app.router.add_get(telemetry_path, metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    if telemetry_path != "/":
        app.router.add_get("/", landing)
    return app
