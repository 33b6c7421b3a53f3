"""The landing page at `/`: links to what is served, and a section its source gives.

The node's collection loop shows its devices, the cluster view says what it serves; each
source writes its own section (`Source.landing_section` in server.py), so the page never asks
which kind of source it has.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import TYPE_CHECKING, Final

from kube_gpu_exporter.exporter import __version__
from kube_gpu_exporter.exporter.exposition.families import device_labels

if TYPE_CHECKING:
    from kube_gpu_exporter.exporter.exposition.render import Rendered

CLUSTER_SECTION: Final = (
    "<h2>Cluster view</h2>\n<p>GPU capacity and why GPU pods wait, cluster-wide.</p>\n"
)


def page(section: str, telemetry_path: str) -> str:
    """The whole page around `section` (HTML its source wrote)."""
    path = html.escape(telemetry_path)
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>kube-gpu-exporter</title>
<style>body{{font-family:sans-serif;margin:2em}}td,th{{padding:.2em .8em;text-align:left}}</style>
</head><body>
<h1>kube-gpu-exporter {html.escape(__version__)}</h1>
<p><a href="{path}">Metrics</a> · <a href="/healthz">Health</a> · <a href="/readyz">Ready</a></p>
{section}</body></html>
"""


def device_section(latest: Rendered | None) -> str:
    """The node's devices, from the latest rendered snapshot."""
    return f"""<h2>Devices on this node</h2>
<table><tr><th>GPU</th><th>UUID</th><th>Model</th><th>MIG profile</th><th>PCI bus</th>
<th>State</th></tr>
{"".join(_rows(latest))}
</table>"""


def _rows(latest: Rendered | None) -> Iterable[str]:
    if latest is None:
        yield "<tr><td colspan=6>no collection has completed yet</td></tr>"
        return
    for device in latest.snapshot.node.devices:
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
