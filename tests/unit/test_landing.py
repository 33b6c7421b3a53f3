"""The landing page shows the section its source writes, whichever source it serves."""

from __future__ import annotations

import asyncio

from kube_gpu_exporter.exporter.httpd import Request
from kube_gpu_exporter.exporter.serve.landing import CLUSTER_SECTION, device_section
from kube_gpu_exporter.exporter.serve.server import build_app


class Source:
    """A source that writes its own section; nothing else about it is known to the page."""

    latest = None
    alive = True
    ready = False

    def __init__(self, section: str) -> None:
        self.section = section

    def not_ready_reason(self) -> str:
        return "never"

    def landing_section(self) -> str:
        return self.section


def _page(source: Source, telemetry_path: str = "/metrics") -> str:
    app = build_app(source, telemetry_path)
    request = Request("GET", "/", {}, "127.0.0.1", transport=None)  # type: ignore[arg-type]
    response = asyncio.run(app.handle(request))
    assert response.status == 200
    assert response.headers["Content-Type"] == "text/html; charset=utf-8"
    return response.body.decode()


def test_the_page_holds_the_sources_section_and_the_links() -> None:
    page = _page(Source("<p id=mine>a section of its own</p>"), "/gpu-metrics")
    assert "<p id=mine>a section of its own</p>" in page
    assert '<a href="/gpu-metrics">Metrics</a>' in page


def test_the_two_sections_the_commands_write() -> None:
    assert "Cluster view" in _page(Source(CLUSTER_SECTION))
    devices = device_section(None)
    assert "Devices on this node" in devices
    assert "no collection has completed yet" in devices
