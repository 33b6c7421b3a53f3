"""The bench's reference server (bench/reference.py, bench/reference_server/): Go's net/http
serving the bytes our /metrics served, for wrk's figures to be read against.

It is built with Go here as in the bench; Go is a build requirement of the project (the real
components are built with it), so a machine without it fails these tests rather than skipping
them out of sight."""

from __future__ import annotations

import gzip
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))  # bench's flat imports

import reference
from errors import BenchError
from reference_report import target_line
from wrk import WrkResult

PLAIN = b"# TYPE up gauge\nup 1\n" * 1000
CAPTURED = reference.Captured(
    plain=PLAIN, gzip=gzip.compress(PLAIN), content_type="text/plain; version=0.0.4"
)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """An empty bin cache of the module's own, so the build on demand is part of the test."""
    folder = tmp_path_factory.mktemp("bin-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KGE_BIN_CACHE", str(folder))
        yield folder


@pytest.fixture(scope="module")
def server(cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with reference.serving(CAPTURED, tmp_path_factory.mktemp("work")) as running:
        yield running.metrics_url


def get(url: str, accept_encoding: str | None) -> tuple[bytes, dict[str, str]]:
    headers = {} if accept_encoding is None else {"Accept-Encoding": accept_encoding}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers)) as response:
        return response.read(), dict(response.headers)


def test_plain_unless_gzip_is_asked_for(server: str) -> None:
    for asked in (None, "identity", "gzip;q=0", "br", "*;q=0"):
        body, headers = get(server, asked)
        assert body == CAPTURED.plain, asked
        assert headers["Content-Type"] == CAPTURED.content_type
        assert headers["Content-Length"] == str(len(CAPTURED.plain))
        assert "Content-Encoding" not in headers, asked


def test_the_captured_gzip_bytes_when_gzip_is_accepted(server: str) -> None:
    for asked in ("gzip", "br, GZIP;q=0.5", "x-gzip", "*"):
        body, headers = get(server, asked)
        assert body == CAPTURED.gzip, asked  # the very bytes, not a gzip of its own
        assert headers["Content-Encoding"] == "gzip"
        assert headers["Content-Type"] == CAPTURED.content_type
        assert headers["Vary"] == "Accept-Encoding"


def test_capture_reads_back_what_a_server_sent(server: str) -> None:
    assert reference.capture(server) == CAPTURED


def test_built_once_per_source_and_reused(server: str, cache: Path) -> None:
    built = reference.binary()
    assert built == cache / f"reference-server-{reference.source_hash()}"
    assert sorted(cache.iterdir()) == [built]  # no partial build left beside it
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GO", "/nonexistent/go")  # a rebuild would fail: it is reused
        assert reference.binary() == built


def test_without_go_the_bench_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KGE_BIN_CACHE", str(tmp_path))
    monkeypatch.setenv("GO", str(tmp_path / "no-go-here"))
    with pytest.raises(BenchError, match=r"^go is not installed"):
        reference.binary()
    assert list(tmp_path.iterdir()) == []


def wrk_result(p99_ms: float) -> WrkResult:
    return WrkResult(1.0, p99_ms, 100.0, 1500, 0, 0, 1024)


def test_a_target_the_reference_misses_too_is_said_to_be_the_machines() -> None:
    line = target_line(
        10.0,
        [
            ("plain", wrk_result(90.0), wrk_result(30.0)),
            ("gzip", wrk_result(15.0), wrk_result(5.0)),
        ],
    )
    assert line == (
        "Target p99 < 10 ms, ours beside the reference: plain **missed** by ours and by the "
        "reference too (ours 90.00 ms, the reference 30.00 ms): this machine misses it with "
        "Go's net/http as well; ours is 3.00× the reference's p99; gzip **missed** by ours "
        "alone (ours 15.00 ms, the reference 5.00 ms; ours 3.00× its p99)."
    )
