"""How a failed read or write of the exporter's own Node is counted (node_health.py's kinds,
docs/metrics.md's node_health_* rows): by HTTP status where the API server answered, by the
transport's error where it did not; never a kind outside the catalog's list."""

from __future__ import annotations

import http.client
import ssl

from kube_gpu_exporter.exporter.catalog.errors import NODE_HEALTH_ERROR_KINDS
from kube_gpu_exporter.exporter.kubernetes.client import ApiError
from kube_gpu_exporter.exporter.serve.node_health import classify


def test_kinds_by_status() -> None:
    found = {code: classify(ApiError(code, "", "")) for code in (403, 404, 409, 410, 429, 500, 422)}
    assert found == {
        403: "forbidden",
        404: "not_found",
        409: "conflict",
        410: "other",  # a watch's Gone: no meaning for a write
        429: "server_error",
        500: "server_error",
        422: "other",
    }


def test_kinds_by_transport() -> None:
    assert classify(ConnectionRefusedError(111, "refused")) == "connection"
    assert classify(http.client.RemoteDisconnected("closed")) == "connection"
    assert classify(http.client.IncompleteRead(b"")) == "connection"
    assert classify(ssl.SSLCertVerificationError("certificate verify failed")) == "connection"
    assert classify(TimeoutError("read timed out")) == "timeout"
    assert classify(ValueError("bad JSON")) == "other"


def test_every_kind_is_the_catalogs() -> None:
    assert set(NODE_HEALTH_ERROR_KINDS) >= {
        classify(e) for e in (ApiError(403, "", ""), ApiError(503, "", ""), OSError("x"))
    }
