"""A request head, parsed: the request line and header fields of HTTP/1.0 and 1.1 (RFC 9112).

The server reads nothing but heads (no handler takes a body), each complete (up to its blank
line) and at most MAX_HEAD bytes long before it is parsed (connection.py), so the parser is a
function of one bounded `bytes`: two compiled patterns check the whole head in one pass each
(the request line; every field line, then the blank line), and nothing is accepted that RFC
9112 lets a server refuse. Refused, as `BadRequest` (answered 400): a malformed request line
or field line (whitespace before the colon, a control character, a line folded onto the one
before), a version other than HTTP/1.0 or 1.1, HTTP/1.1 without exactly one Host, a
Content-Length that is not one number, Transfer-Encoding on HTTP/1.0 or with a Content-Length
(the request-smuggling pair). Why not h11 (python-hyper's parser): docs/architecture.md,
"Why our own request parser".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

_TOKEN: Final = rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_VALUE: Final = rb"(?:[!-~\x80-\xff]+(?:[ \t]+[!-~\x80-\xff]+)*)?"
REQUEST_LINE: Final = re.compile(rb"(" + _TOKEN + rb") ([!-~\x80-\xff]+) HTTP/1\.([01])\r\n")
FIELD: Final = re.compile(rb"(" + _TOKEN + rb"):[ \t]*(" + _VALUE + rb")[ \t]*\r\n")
FIELDS: Final = re.compile(rb"(?:" + _TOKEN + rb":[ \t]*" + _VALUE + rb"[ \t]*\r\n)*\r\n")
LENGTH: Final = re.compile(r"[0-9]{1,18}")


class BadRequest(ValueError):
    """A head the server refuses (400); str() says why, for a debug line."""


@dataclass(frozen=True, slots=True)
class RequestHead:
    """What the server uses of a request: `headers` has lower-case names, a repeated field's
    values joined with ", " (RFC 9110 §5.3); `keep_alive` whether the connection may serve
    another request after this one; `has_body` whether a body follows (none is read);
    `http10` whether it is HTTP/1.0, whose keep-alive the answer must confirm."""

    method: str
    target: str
    headers: dict[str, str]
    keep_alive: bool
    has_body: bool
    http10: bool = False


def parse_head(head: bytes) -> RequestHead:
    """Parse one complete head (ending with its blank line); BadRequest when refused."""
    line = REQUEST_LINE.match(head)
    if line is None:
        raise BadRequest(f"malformed request line: {head[:80]!r}")
    start = line.end()
    if FIELDS.fullmatch(head, start) is None:
        raise BadRequest("malformed header field line")
    headers: dict[str, str] = {}
    for name, value in FIELD.findall(head, start):
        key = name.decode("ascii").lower()
        text = value.decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    http11 = line.group(3) == b"1"
    if http11 and ("host" not in headers or "," in headers["host"]):
        raise BadRequest("HTTP/1.1 without exactly one Host field")
    return RequestHead(
        method=line.group(1).decode("ascii"),
        target=line.group(2).decode("latin-1"),
        headers=headers,
        keep_alive=_keep_alive(headers.get("connection", ""), http11),
        has_body=_has_body(headers, http11),
        http10=not http11,
    )


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
