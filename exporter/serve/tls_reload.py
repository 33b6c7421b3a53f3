"""The TLS context re-read when its files change, as exporter-toolkit re-reads them.

cert-manager (and the kubelet's projection of a renewed Secret) rotate a certificate in
place, under the same path: a server that loaded it once serves the expired one until it is
restarted. So the listener asks for the context on every new connection, and the files'
identity (inode, size, modification time: a Secret volume swaps a symlink, an editor writes
a new file) is looked at no more than once per CHECK_SECONDS. When it changed, the context is
built again with the same checks as at start; a file caught half-written, or a pair that
does not match, keeps the context in use (a warning says why) until the files change again.
"""

from __future__ import annotations

import logging
import os
import ssl
import time
from collections.abc import Callable, Sequence
from typing import Final

log = logging.getLogger(__name__)

CHECK_SECONDS: Final = 1.0

Signature = tuple[tuple[int, int, int] | None, ...]


def _signature(files: Sequence[str]) -> Signature:
    def identity(path: str) -> tuple[int, int, int] | None:
        try:
            status = os.stat(path)
        except OSError:
            return None
        return (status.st_ino, status.st_size, status.st_mtime_ns)

    return tuple(identity(path) for path in files)


class ReloadingContext:
    """Called for the context to serve a new connection with: `build()`'s, again once one of
    `files` has changed."""

    def __init__(
        self,
        build: Callable[[], ssl.SSLContext],
        files: Sequence[str],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._build = build
        self._files = tuple(path for path in files if path)
        self._clock = clock
        self._signature = _signature(self._files)
        self._context = build()
        self._next_check = clock() + CHECK_SECONDS
        self.reloads = 0

    @property
    def context(self) -> ssl.SSLContext:
        return self._context

    def __call__(self) -> ssl.SSLContext:
        now = self._clock()
        if now < self._next_check:
            return self._context
        self._next_check = now + CHECK_SECONDS
        signature = _signature(self._files)
        if signature == self._signature:
            return self._context
        self._signature = signature
        try:
            context = self._build()
        except Exception as exc:  # CertificateError, or whatever a half-written file raises
            log.warning("TLS files changed but cannot be used (%s); still serving the old", exc)
            return self._context
        self._context = context
        self.reloads += 1
        log.info("TLS certificate re-read: %s", ", ".join(self._files))
        return context
