"""The request-head parser: what it takes from a head, and what it refuses (400)."""

from __future__ import annotations

import pytest

from kube_gpu_exporter.exporter.httpd.request_head import BadRequest, parse_head

PROMETHEUS = (
    b"GET /metrics?x=1 HTTP/1.1\r\n"
    b"Host: 10.0.0.7:19400\r\n"
    b"User-Agent: Prometheus/3.16.0\r\n"
    b"Accept: application/openmetrics-text;version=1.0.0;q=0.6,text/plain;version=0.0.4;q=0.3\r\n"
    b"Accept-Encoding: gzip\r\n"
    b"X-Prometheus-Scrape-Timeout-Seconds: 10\r\n"
    b"\r\n"
)


def test_a_scrape() -> None:
    head = parse_head(PROMETHEUS)
    assert (head.method, head.target) == ("GET", "/metrics?x=1")
    assert head.headers["accept-encoding"] == "gzip"
    assert head.headers["host"] == "10.0.0.7:19400"
    assert head.keep_alive and not head.has_body


def test_repeated_fields_are_joined_and_whitespace_around_values_dropped() -> None:
    head = parse_head(
        b"GET / HTTP/1.1\r\nHost: x\r\nAccept-Encoding:  br \r\naccept-encoding:\tgzip\t\r\n"
        b"X-Empty:\r\n\r\n"
    )
    assert head.headers["accept-encoding"] == "br, gzip"
    assert head.headers["x-empty"] == ""


@pytest.mark.parametrize(
    ("version", "connection", "keep_alive"),
    [
        ("1.1", None, True),
        ("1.1", "close", False),
        ("1.1", "Keep-Alive, Close", False),
        ("1.0", None, False),
        ("1.0", "keep-alive", True),
    ],
)
def test_keep_alive(version: str, connection: str | None, keep_alive: bool) -> None:
    lines = [f"GET / HTTP/{version}", "Host: x"]
    if connection is not None:
        lines.append(f"Connection: {connection}")
    assert parse_head(("\r\n".join(lines) + "\r\n\r\n").encode()).keep_alive is keep_alive


@pytest.mark.parametrize(
    ("fields", "has_body"),
    [
        ("Content-Length: 0", False),
        ("Content-Length: 5", True),
        ("Transfer-Encoding: chunked", True),
    ],
)
def test_a_body_is_announced(fields: str, has_body: bool) -> None:
    head = parse_head(f"POST / HTTP/1.1\r\nHost: x\r\n{fields}\r\n\r\n".encode())
    assert head.has_body is has_body


@pytest.mark.parametrize(
    "head",
    [
        b"GET / HTTP/1.1\r\n\r\n",  # no Host
        b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
        b"GET / HTTP/2.0\r\nHost: x\r\n\r\n",
        b"GET  / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET / HTTP/1.1\nHost: x\r\n\r\n",
        b"BREW /coffee HTCPCP/1.0\r\n\r\n",
        b"\x00\x01garbage\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost : x\r\n\r\n",  # whitespace before the colon
        b"GET / HTTP/1.1\r\nHost: x\r\nBad header line\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n  folded\r\n\r\n",  # obs-fold
        b"GET / HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 6\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: ²\r\n\r\n".encode("latin-1"),
        # Where llhttp lenient, Go (and so we) not:
        b"\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n",  # an empty line first
        b"GET /\r\n\r\n",  # HTTP/0.9
        b"GET / HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
    ],
)
def test_refused(head: bytes) -> None:
    with pytest.raises(BadRequest):
        parse_head(head)


@pytest.mark.parametrize(
    "head",
    [
        b"get / HTTP/1.1\r\nHost: x\r\n\r\n",  # a method llhttp does not know
        b"FOO / HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET /\u00e9 HTTP/1.1\r\nHost: x\r\n\r\n".encode("latin-1"),  # not ASCII
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1, 1\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity\r\n\r\n",
    ],
)
def test_refused_by_llhttp_where_the_regular_expressions_accepted(head: bytes) -> None:
    """llhttp's verdicts, kept (docs/architecture.md, "The request parser")."""
    with pytest.raises(BadRequest):
        parse_head(head)


def test_upgrade_and_connect_are_answered_as_requests() -> None:
    """llhttp stops at an upgrade; nothing is switched to, the head is a request like any."""
    upgrade = parse_head(b"GET /metrics HTTP/1.1\r\nHost: x\r\nUpgrade: h2c\r\n\r\n")
    assert (upgrade.method, upgrade.target, upgrade.keep_alive) == ("GET", "/metrics", True)
    connect = parse_head(b"CONNECT x:1 HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (connect.method, connect.target) == ("CONNECT", "x:1")


def test_trailing_whitespace_is_not_part_of_a_value() -> None:
    head = parse_head(b"GET / HTTP/1.1\r\nHost: x \t\r\nX-A:  a b\t\r\n\r\n")
    assert head.headers == {"host": "x", "x-a": "a b"}


def test_a_repeated_head_is_parsed_once_and_a_refusal_every_time() -> None:
    """A scraper's head is remembered; a long head and a refused one are parsed each time."""
    head = b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n"
    assert parse_head(head) is parse_head(bytes(head))
    long = b"GET / HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 2000 + b"\r\n\r\n"
    assert parse_head(long) is not parse_head(long)
    assert parse_head(long).headers["x-pad"] == "a" * 2000
    bad = b"GET  / HTTP/1.1\r\nHost: x\r\n\r\n"
    for _ in range(2):
        with pytest.raises(BadRequest):
            parse_head(bad)
