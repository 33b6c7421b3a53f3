"""A front for the test API server that answers the first paged pod list from JSON encoded
before the process starts, and relays every other request to the server as it is.

The test server filters every stored pod for each page it serves and encodes the page then
(about 1 s a page of 500 out of 50,000 on the bench machine, 100 pages for the list), so
against it the time to the first complete metrics would be mostly its own. Behind this
front the pages are the same bytes (the objects as stored, with the resourceVersions the
server gave them, in its JSON encoding), joined at once: what is left is the process's own
time, and the server's cost per page is measured apart. Watches and the node and quota lists
go through to the server; once `serving` is cleared (the bench does so at the first complete
metrics, before any change) pod lists do too, so a relist under churn sees current objects.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from kube_gpu_exporter.demo.kube_api import PODS_PATH

HOP_HEADERS = {"connection", "transfer-encoding", "content-length", "keep-alive"}


class ListFront:
    """Listens on 127.0.0.1 (a free port) in front of `upstream` (host, port)."""

    def __init__(self, upstream: tuple[str, int], pods: Sequence[bytes], version: int) -> None:
        self.upstream = upstream
        self.pods = pods
        self.version = version
        self.serving = True
        self.page_times: list[float] = []  # time.monotonic() of each page served
        front = self

        class Handler(_Handler):
            owner = front

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def __enter__(self) -> ListFront:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def page(self, limit: int, start: int) -> bytes:
        """One page as the server words it: `continue` is the next offset, if any."""
        self.page_times.append(time.monotonic())
        end = start + limit
        metadata = {"resourceVersion": str(self.version)}
        if end < len(self.pods):
            metadata["continue"] = str(end)
        head = json.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": metadata})
        return head[:-1].encode() + b', "items": [' + b", ".join(self.pods[start:end]) + b"]}"


class _Handler(BaseHTTPRequestHandler):
    owner: ListFront
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        params = {k: v[-1] for k, v in parse_qs(url.query).items()}
        listing = url.path == PODS_PATH and params.get("watch") not in ("true", "1")
        try:
            if self.owner.serving and listing and params.get("limit"):
                self._send(200, "application/json", self._page(params))
            else:
                self._relay()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _page(self, params: dict[str, str]) -> bytes:
        return self.owner.page(int(params["limit"]), int(params.get("continue") or 0))

    def _send(self, code: int, content_type: str, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _relay(self) -> None:
        """The request to the server; its answer back, a watch's chunks as they come."""
        upstream = http.client.HTTPConnection(*self.owner.upstream)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_HEADERS}
            upstream.request("GET", self.path, headers=headers)
            response = upstream.getresponse()
            if not response.chunked:
                content_type = response.getheader("Content-Type", "application/json")
                self._send(response.status, content_type, response.read())
                return
            self.send_response(response.status)
            for name, value in response.getheaders():
                if name.lower() not in HOP_HEADERS:
                    self.send_header(name, value)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            while data := response.read1(1 << 16):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        finally:
            upstream.close()
