"""An Alertmanager webhook receiver in the test process: keeps every notification it is sent,
so end-to-end tests can say which alerts reached people and which were held back."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Webhook:
    """Alertmanager's webhook receiver: keeps every notification it is sent."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.notifications: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with hook._lock:
                    hook.notifications.append(json.loads(body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer((host, 0), Handler)
        self.url = f"http://{host}:{self._server.server_address[1]}/alerts"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def alerts(self, status: str) -> set[tuple[str, str, str, str]]:
        """(alertname, namespace, pod, uuid) of every alert delivered with `status`; a
        workload's alert (GPUAllocatedIdle) has its workload for the pod and no uuid."""
        with self._lock:
            delivered = [a for n in self.notifications for a in n["alerts"]]
        return {key(a["labels"]) for a in delivered if a["status"] == status}

    def receiving(self, config: dict[str, Any]) -> dict[str, Any]:
        """An Alertmanager `config` whose every receiver posts here instead (with resolved
        alerts), and whose root route waits a second instead of its real intervals, so a
        test sees what a routing example with its real receivers would have sent."""
        receivers = [
            {"name": r["name"], "webhook_configs": [{"url": self.url, "send_resolved": True}]}
            for r in config["receivers"]
        ]
        route = {**config["route"], "group_wait": "1s", "group_interval": "1s"}
        return {**config, "route": route, "receivers": receivers}

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def key(labels: dict[str, str]) -> tuple[str, str, str, str]:
    """(alertname, namespace, pod or workload, uuid) of an alert's labels, "" where absent."""
    pod = labels.get("pod") or labels.get("workload", "")
    return (labels["alertname"], labels.get("namespace", ""), pod, labels.get("uuid", ""))
