"""An HTTP/1.1 server (TLS optional) on asyncio's event loop, for an untrusted network.

The contract, all a caller needs and all it may import (an import-linter contract in
pyproject.toml holds serve/ to it):

- an `App`: routes by exact path (GET and HEAD), `Middleware`s around them; a `Handler` takes
  a `Request` and gives a `Response` (status, headers, a whole body that is never copied);
- `ConnectionLimits`: timeouts (read-header, idle, write), connections in all and per client
  address, headers for every answer, the paths the overflow still answers (the probes);
- a `Listener`: the app on a host and port under those limits, TLS when given an
  `ssl.SSLContext`; `start()`, then `stop(drain_seconds)`; `OVERFLOW` connections beyond
  the cap may ask for the probe paths;
- `Shares` / `Refusal`: counted shares per client address, for a caller's own bounds
  (requests being handled, password checks), and `RETRY_AFTER_SECONDS` for their answers.

The package is a sealed room: it imports the standard library, its own modules and its
request-head parser (httptools: llhttp), nothing else of the exporter's
(tests/unit/test_httpd_sealed.py), so its defects and its fuzz test are its own. Why it
exists rather than aiohttp: docs/architecture.md, "Serving".
"""

from kube_gpu_exporter.exporter.httpd.answer_head import RETRY_AFTER_SECONDS
from kube_gpu_exporter.exporter.httpd.client_shares import Refusal, Shares
from kube_gpu_exporter.exporter.httpd.connection import ConnectionLimits
from kube_gpu_exporter.exporter.httpd.listener import OVERFLOW, Listener
from kube_gpu_exporter.exporter.httpd.web import App, Handler, Middleware, Request, Response

__all__ = [
    "OVERFLOW",
    "RETRY_AFTER_SECONDS",
    "App",
    "ConnectionLimits",
    "Handler",
    "Listener",
    "Middleware",
    "Refusal",
    "Request",
    "Response",
    "Shares",
]
