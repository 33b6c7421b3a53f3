"""The Authorization header of each request: a bearer token given once, a token file that is
followed as it changes, or a user name and password.

A service account's token is a bound token that the kubelet rotates (about hourly; it is
valid for an hour more), and a kubeconfig's `tokenFile` may be rotated by whatever wrote it.
client-go re-reads such a file at most once a minute (`cachedFileTokenSource`), and so do we:
the file is read again on the first request after `REREAD_SECONDS`. A read that fails then,
or finds the file empty (it is being replaced), keeps the last token and logs a warning: an
old token that still works beats a failed request, and the API server says when it stops
working. Only the first read, at start-up, is a configuration error.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from collections.abc import Callable

from kube_gpu_exporter.exporter.kubernetes.connection import KubernetesConfigError

log = logging.getLogger(__name__)

REREAD_SECONDS = 60.0  # client-go's period for token files


class FixedHeader:
    """The same header value on every request (a kubeconfig's `token`, basic auth)."""

    def __init__(self, value: str) -> None:
        self._value = value

    def __call__(self) -> str:
        return self._value


def bearer(token: str) -> FixedHeader:
    """`Bearer <token>`; ValueError if the token could not be a header's value."""
    return FixedHeader(f"Bearer {checked(token)}")


def checked(token: str) -> str:
    """The token without surrounding white space; ValueError if empty or not printable ASCII
    (a header value cannot hold it: a pasted line break would fail every request)."""
    token = token.strip()
    if not token:
        raise ValueError("empty")
    if any(ord(c) < 0x21 or ord(c) > 0x7E for c in token):
        raise ValueError("not a token (characters other than printable ASCII)")
    return token


def basic(username: str, password: str) -> FixedHeader:
    """HTTP basic auth, as client-go sends a kubeconfig's username and password."""
    pair = f"{username}:{password}".encode()
    return FixedHeader(f"Basic {base64.b64encode(pair).decode('ascii')}")


class TokenFile:
    """`Bearer <the file's token>`, the file read again once `period` has passed."""

    def __init__(
        self,
        path: str,
        source: str,
        *,
        period: float = REREAD_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._path = path
        self._period = period
        self._clock = clock
        self._lock = threading.Lock()
        try:
            token = self._read()
        except (OSError, ValueError) as exc:
            raise KubernetesConfigError(f"{source}: token file {path}: {_reason(exc)}") from None
        self._token, self._read_at = token, clock()

    def __call__(self) -> str:
        with self._lock:
            if self._clock() - self._read_at >= self._period:
                self._read_at = self._clock()  # one attempt per period, failed or not
                try:
                    self._token = self._read()
                except (OSError, ValueError) as exc:
                    log.warning(
                        "token file %s: %s; using the token read before", self._path, _reason(exc)
                    )
            return f"Bearer {self._token}"

    def _read(self) -> str:
        with open(self._path, "rb") as file:
            return checked(file.read(1 << 20).decode("utf-8", errors="replace"))


def _reason(exc: BaseException) -> str:
    return str(getattr(exc, "strerror", None) or exc) or type(exc).__name__
