"""A request head, parsed: the request line and header fields of HTTP/1.0 and 1.1 (RFC 9112).

The server reads nothing but heads (no handler takes a body), each complete (up to its blank
line) and at most MAX_HEAD bytes long before it is parsed (connection.py), so the parser is a
function of one bounded `bytes`. The syntax is llhttp's (through httptools: the parser of
Node.js, uvicorn and aiohttp, fuzzed upstream), which refuses what RFC 9112 lets a server
refuse about the bytes themselves: bare LF or CR, whitespace before a colon, folded lines,
control characters, non-ASCII targets, a bad or repeated Content-Length, Content-Length beside
Transfer-Encoding, methods it does not know. Where llhttp accepts what Go's net/http (the
exporters' reference) refuses, this module refuses it too, as `BadRequest` (answered 400): a
request line that is not exactly `method SP target SP HTTP/1.x CRLF` (llhttp skips leading
empty lines and runs of spaces), a version other than 1.0 or 1.1, HTTP/1.1 without exactly one
Host, Transfer-Encoding on HTTP/1.0. Why llhttp: docs/architecture.md, "The request parser".
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Final

import httptools

LENGTH: Final = re.compile(r"[0-9]{1,18}")
VERSIONS: Final = frozenset({"1.0", "1.1"})
# A scraper sends the same head every time: the last HEAD_MEMO heads of up to MEMO_BYTES are
# kept parsed (a few dozen KiB at most), and a repeat costs a dict lookup.
HEAD_MEMO: Final = 64
MEMO_BYTES: Final = 1024
_OWS: Final = b" \t"


class BadRequest(ValueError):
    """A head the server refuses (400); str() says why, for a debug line."""


@dataclass(frozen=True, slots=True)
class RequestHead:
    """What the server uses of a request: `headers` has lower-case names, a repeated field's
    values joined with ", " (RFC 9110 §5.3), and is shared by every request that sent the same
    head (read it, never change it); `keep_alive` whether the connection may serve
    another request after this one; `has_body` whether a body follows (none is read);
    `http10` whether it is HTTP/1.0, whose keep-alive the answer must confirm."""

    method: str
    target: str
    headers: dict[str, str]
    keep_alive: bool
    has_body: bool
    http10: bool = False


class _Collected:
    """llhttp's callbacks: the target and the field lines, as they come."""

    __slots__ = ("complete", "fields", "url")

    def __init__(self) -> None:
        self.url = b""
        self.fields: list[tuple[bytes, bytes]] = []
        self.complete = False

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.fields.append((name, value))

    def on_headers_complete(self) -> None:
        self.complete = True


def parse_head(head: bytes) -> RequestHead:
    """Parse one complete head (ending with its blank line); BadRequest when refused (a
    refusal is not remembered)."""
    return _remembered(head) if len(head) <= MEMO_BYTES else _parse(head)


def _parse(head: bytes) -> RequestHead:
    collected = _Collected()
    parser = httptools.HttpRequestParser(collected)
    try:
        parser.feed_data(head)
    except httptools.HttpParserUpgrade:
        pass  # CONNECT, or an Upgrade field: answered as any request (nothing is switched to)
    except httptools.HttpParserError as exc:
        raise BadRequest(f"{exc}: {head[:80]!r}") from None
    version = parser.get_http_version()
    method: bytes = parser.get_method()
    if not collected.complete or version not in VERSIONS:
        raise BadRequest(f"malformed request line: {head[:80]!r}")
    if not head.startswith(b"%b %b HTTP/%b\r\n" % (method, collected.url, version.encode())):
        raise BadRequest(f"malformed request line: {head[:80]!r}")
    headers: dict[str, str] = {}
    for name, value in collected.fields:
        key = name.decode("ascii").lower()
        text = value.rstrip(_OWS).decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    http11 = version == "1.1"
    if http11 and ("host" not in headers or "," in headers["host"]):
        raise BadRequest("HTTP/1.1 without exactly one Host field")
    return RequestHead(
        method=method.decode("ascii"),
        target=collected.url.decode("latin-1"),
        headers=headers,
        keep_alive=_keep_alive(headers.get("connection", ""), http11),
        has_body=_has_body(headers, http11),
        http10=not http11,
    )


_remembered = functools.lru_cache(maxsize=HEAD_MEMO)(_parse)


def _keep_alive(connection: str, http11: bool) -> bool:
    """HTTP/1.1 keeps the connection unless told `close`; HTTP/1.0 closes unless told
    `keep-alive` (RFC 9112 §9.3)."""
    if not connection:
        return http11
    options = {option.strip().lower() for option in connection.split(",")}
    if "close" in options:
        return False
    return http11 or "keep-alive" in options


def _has_body(headers: dict[str, str], http11: bool) -> bool:
    chunked = "transfer-encoding" in headers
    length = headers.get("content-length")
    if chunked and (length is not None or not http11):
        raise BadRequest("Transfer-Encoding with Content-Length, or on HTTP/1.0")
    if chunked:
        return True
    if length is None:
        return False
    values = {value.strip() for value in length.split(",")}
    if len(values) != 1 or LENGTH.fullmatch(next(iter(values))) is None:
        raise BadRequest(f"bad Content-Length: {length[:40]!r}")
    return int(next(iter(values))) > 0
