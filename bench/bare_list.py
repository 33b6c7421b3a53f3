"""The bare paged list of what `kube-gpu-exporter cluster` lists, against the same server.

The floor under the cluster view's time to its first complete metrics: the same lists (nodes,
pods with the view's field selector, ResourceQuotas), pages of the same size (`PAGE`), the
same headers as the view's client (`Accept: application/json`, `Accept-Encoding: gzip`), on one
keep-alive TLS connection, each page's body read and gunzipped, and nothing else: its
`continue` token is read from the list's metadata, which the API server writes before the
items, so no page is decoded. The lists run one after another, as a reader with one
connection must; the view runs its three at once on the same two cores.
"""

from __future__ import annotations

import http.client
import re
import ssl
import time
import urllib.parse
import zlib
from dataclasses import dataclass

from errors import BenchError

from kube_gpu_exporter.exporter.cluster.objects import ACTIVE_PODS
from kube_gpu_exporter.exporter.kubernetes.paged_list import PAGE

LISTS: tuple[tuple[str, str, dict[str, str]], ...] = (
    ("nodes", "/api/v1/nodes", {}),
    ("pods", "/api/v1/pods", {"fieldSelector": ACTIVE_PODS}),
    ("resourcequotas", "/api/v1/resourcequotas", {}),
)
HEADERS = {"Accept": "application/json", "Accept-Encoding": "gzip"}
# The list's metadata comes first: `"continue":"…"` within the first few hundred bytes.
CONTINUE = re.compile(rb'"continue":"([^"]*)"')
HEAD = 4096


@dataclass(frozen=True)
class Listed:
    """One resource's bare list: pages, bytes on the wire and unzipped, and seconds."""

    resource: str
    pages: int
    wire_bytes: int
    json_bytes: int
    seconds: float


def _page(conn: http.client.HTTPSConnection, url: str, token: str) -> tuple[bytes, int]:
    conn.request("GET", url, headers={**HEADERS, "Authorization": f"Bearer {token}"})
    response = conn.getresponse()
    raw = response.read()
    if response.status != 200:
        raise BenchError(f"bare list {url}: HTTP {response.status}: {raw[:200]!r}")
    if response.getheader("Content-Encoding") == "gzip":
        return zlib.decompress(raw, 16 + zlib.MAX_WBITS), len(raw)
    return raw, len(raw)


def list_all(
    conn: http.client.HTTPSConnection, token: str, path: str, query: dict[str, str]
) -> Listed:
    pages = wire = size = 0
    began = time.perf_counter()
    after = ""
    while True:
        params = {**query, "limit": str(PAGE), **({"continue": after} if after else {})}
        body, on_wire = _page(conn, f"{path}?{urllib.parse.urlencode(params)}", token)
        pages, wire, size = pages + 1, wire + on_wire, size + len(body)
        found = CONTINUE.search(body[:HEAD])
        after = found.group(1).decode() if found else ""
        if not after:
            return Listed(path.rsplit("/", 1)[1], pages, wire, size, time.perf_counter() - began)


def bare_lists(url: str, token: str, context: ssl.SSLContext) -> list[Listed]:
    """Every list the view makes, one after another, on one new keep-alive TLS connection."""
    host, port = url.removeprefix("https://").rsplit(":", 1)
    conn = http.client.HTTPSConnection(host, int(port), context=context, timeout=120)
    try:
        return [list_all(conn, token, path, query) for _, path, query in LISTS]
    except (OSError, http.client.HTTPException) as exc:
        raise BenchError(f"bare list on {url}: {exc}") from None
    finally:
        conn.close()
