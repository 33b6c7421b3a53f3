"""The head of an answer, as bytes: what the connection and the listener put on the wire.

Every answer carries the same things, however it was made (the app's, or one refused below
it): its status line, its own headers, Content-Length, `Connection: close` when the
connection ends with it (`Connection: keep-alive` when an HTTP/1.0 client asked to keep it:
1.0 closes unless both sides say so, RFC 9112 §9.3), and the web config's headers; never a
`Server` header (Go's servers send none, aiohttp's named the Python and aiohttp versions).
The app's answers carry `Date` (RFC 9110 §6.6.1, as Go's do); the refusals the listener
renders once at start do not.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from http import HTTPStatus
from typing import Final

RETRY_AFTER_SECONDS: Final = 1
STATUS_LINES: Final = {s.value: f"HTTP/1.1 {s.value} {s.phrase}\r\n" for s in HTTPStatus}
_WEEKDAYS: Final = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS: Final = (
    "Jan",
    "Feb",
    "Mar",
    "Apr",
    "May",
    "Jun",
    "Jul",
    "Aug",
    "Sep",
    "Oct",
    "Nov",
    "Dec",
)
_date_line = (0, "")


def configured_lines(headers: Mapping[str, str]) -> dict[str, str]:
    """The web config's headers as lines, by lower-case name (for `answer_head`)."""
    return {name.lower(): f"{name}: {value}\r\n" for name, value in headers.items()}


def answer_head(
    status: int,
    headers: Mapping[str, str],
    length: int,
    connection: str,
    configured: Mapping[str, str],
) -> bytes:
    """The head of an app's answer; `connection` the Connection field's value ("" for
    none); `configured` (`configured_lines`) are defaults a handler may override, as in
    exporter-toolkit."""
    lines = [STATUS_LINES.get(status) or f"HTTP/1.1 {status} \r\n"]
    lines += [f"{name}: {value}\r\n" for name, value in headers.items()]
    lines.append(f"Content-Length: {length}\r\n")
    lines.append(http_date())
    if connection:
        lines.append(f"Connection: {connection}\r\n")
    if configured:
        given = {name.lower() for name in headers}
        lines += [line for key, line in configured.items() if key not in given]
    lines.append("\r\n")
    return "".join(lines).encode("latin-1")


def raw_response(
    status: int, reason: str, text: str, headers: Mapping[str, str], retry_after: bool = False
) -> bytes:
    """A whole `Connection: close` answer as bytes, for what is said before (or without) a
    parsed request: the configured headers on it, no Server header."""
    body = text.encode()
    lines = [f"HTTP/1.1 {status} {reason}", "Content-Type: text/plain; charset=utf-8"]
    lines += [f"Content-Length: {len(body)}", "Connection: close"]
    if retry_after:
        lines.append(f"Retry-After: {RETRY_AFTER_SECONDS}")
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def http_date() -> str:
    """The `Date` line every answer carries (RFC 9110 §6.6.1; Go's servers send it too),
    formatted once a second."""
    global _date_line
    now = int(time.time())
    if _date_line[0] != now:
        t = time.gmtime(now)
        stamp = f"{_WEEKDAYS[t.tm_wday]}, {t.tm_mday:02d} {_MONTHS[t.tm_mon - 1]} {t.tm_year}"
        _date_line = (now, f"Date: {stamp} {t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} GMT\r\n")
    return _date_line[1]
