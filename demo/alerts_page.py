"""A read-only page of the alerts Alertmanager holds, for a browser pointed at the demo.

Debian's `prometheus-alertmanager` ships without its web UI (its `/` says to use amtool), so
the demo serves its own: one table, read from Alertmanager's v2 API on every request and
refreshed by the browser every few seconds. It changes nothing in Alertmanager.
"""

from __future__ import annotations

import html
import json
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

REFRESH_SECONDS = 5
COLUMNS = ("state", "alert", "pod", "GPU", "severity", "since", "summary")


class AlertsPage:
    """Serves the page on (host, port) from a daemon thread until `close()`."""

    def __init__(self, host: str, port: int, alertmanager_url: str) -> None:
        page = self

        class Handler(_Handler):
            source = page

        self.alertmanager_url = alertmanager_url
        self._httpd = ThreadingHTTPServer((host, port), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def render(self) -> str:
        url = f"{self.alertmanager_url}/api/v2/alerts"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                alerts: list[dict[str, Any]] = json.load(response)
        except (OSError, ValueError) as exc:
            return _page(f"<p>Alertmanager does not answer: {html.escape(str(exc))}</p>")
        if not alerts:
            return _page("<p>No alerts yet: the first fire about 75 seconds into the story.</p>")
        alerts.sort(key=lambda a: (a["labels"].get("alertname", ""), a.get("startsAt", "")))
        head = "".join(f"<th>{c}</th>" for c in COLUMNS)
        rows = "".join(_row(a) for a in alerts)
        return _page(f"<table><tr>{head}</tr>{rows}</table>")


def _row(alert: dict[str, Any]) -> str:
    labels, annotations = alert["labels"], alert.get("annotations", {})
    pod = "/".join(p for p in (labels.get("namespace"), labels.get("pod")) if p)
    state = alert.get("status", {}).get("state", "")
    since = alert.get("startsAt", "")[11:19]  # hh:mm:ss of the RFC 3339 time, UTC
    cells = (
        state,
        labels.get("alertname", ""),
        pod,
        labels.get("gpu", ""),
        labels.get("severity", ""),
        since,
        annotations.get("summary", ""),
    )
    return "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>"


def _page(body: str) -> str:
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<meta http-equiv='refresh' content='{REFRESH_SECONDS}'>"
        "<title>kube-gpu-exporter demo: alerts</title><style>"
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}</style></head><body>"
        "<h1>Alerts in Alertmanager</h1>"
        f"<p>Read from its API every {REFRESH_SECONDS} s; suppressed alerts are silenced by an "
        f"inhibit rule (their cause fires too).</p>{body}</body></html>"
    )


class _Handler(BaseHTTPRequestHandler):
    source: AlertsPage

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if self.path.split("?")[0] != "/":
            self.send_error(404)
            return
        data = self.source.render().encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
