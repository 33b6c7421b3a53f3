"""What an API failure was, for the watches' `errors_total` and for one line of log or CLI error.

The watches (list_watch.py) and `explain` (cluster/explain/api.py) meet the same failures —
the client's `ApiError`, a non-2xx response, a Status in a watch stream, the socket's,
TLS's and http.client's connection and timeout errors — and name them the same way.
"""

from __future__ import annotations

import contextlib
import json
from http.client import HTTPException
from typing import Any


class WatchError(Exception):
    """An ERROR event in the watch stream (a Status object), or a non-2xx response."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


def check_status(response: Any) -> None:
    """Older clients return non-2xx raw responses without raising; treat them as errors."""
    status = getattr(response, "status", 200)
    if not 200 <= status <= 299:
        raise WatchError(status, getattr(response, "reason", "") or "")


def status_code(exc: BaseException) -> int | None:
    """The HTTP status of an API failure (ApiError or WatchError), if it has one."""
    code = exc.code if isinstance(exc, WatchError) else getattr(exc, "status", None)
    return code if isinstance(code, int) and code else None


def summary(exc: BaseException) -> str:
    """One line for the log or the CLI: an ApiError's Status message (its body's), else the
    error's text with its whitespace folded, cut at 300 characters."""
    code = status_code(exc)
    if code is None or isinstance(exc, WatchError):
        return " ".join(str(exc).split())[:300]
    message = getattr(exc, "reason", "") or ""
    with contextlib.suppress(Exception):
        message = json.loads(getattr(exc, "body", "") or "{}").get("message") or message
    return f"HTTP {code}: {' '.join(str(message).split())[:300]}"


def classify(exc: BaseException) -> str:
    """The `errors_total` kind of a list/watch failure."""
    code = status_code(exc)
    if code is not None:
        if code == 410:
            return "gone"
        return "server_error" if code >= 500 or code == 429 else "other"
    if isinstance(exc, ConnectionError):  # refused, reset, the server gone mid-answer
        return "connection"
    if isinstance(exc, TimeoutError):  # connect or read timeout (socket.timeout)
        return "timeout"
    if isinstance(exc, OSError | HTTPException) or getattr(exc, "status", None) == 0:
        return "connection"  # DNS, TLS, a truncated or malformed answer
    return "other"
