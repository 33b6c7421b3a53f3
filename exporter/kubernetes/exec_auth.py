"""An exec plugin's credential, kept until it expires and fetched again then or on a 401, as
client-go's exec authenticator keeps it.

The first run is at start-up (its failure is the configuration error, exit 2). Later the
plugin runs again on the first request after `expirationTimestamp`, or after the API server
answered 401 to the token it gave (`rejected`, called by the client with the header it sent:
a 401 to an older token, already replaced, does not run the plugin again). A later run that
fails keeps the last credential and logs a warning: the API server says when it stops
working, and the watches' backoff paces the next attempts. The lock is held while the plugin
runs, since the watches ask from their own threads: one run serves them all.

A client certificate is read into the TLS context once, at start-up (tls_client.py); one
that expires is not renewed while the process runs (a warning says so: restart to renew),
as the `kubernetes` package's loader did not renew it either.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace

from kube_gpu_exporter.exporter.kubernetes.connection import KubernetesConfigError
from kube_gpu_exporter.exporter.kubernetes.exec_plugin import Credential, ExecPlugin
from kube_gpu_exporter.exporter.kubernetes.tokens import checked

log = logging.getLogger(__name__)


class ExecAuthorization:
    """The Authorization header of the plugin's token (None when it gives only a client
    certificate), run again when expired or rejected."""

    def __init__(self, plugin: ExecPlugin, *, clock: Callable[[], float] = time.time) -> None:
        self._plugin = plugin
        self._clock = clock
        self._lock = threading.Lock()
        self._stale = False
        self._warned_cert = False
        self.credential = self._run()  # KubernetesConfigError at start-up

    def __call__(self) -> str | None:
        with self._lock:
            if self._stale or self._expired():
                self._refresh()
            token = self.credential.token
        return f"Bearer {token}" if token is not None else None

    def rejected(self, header: str | None) -> None:
        """A 401 to `header`: the next request runs the plugin again, if that was its token."""
        with self._lock:
            token = self.credential.token
            if token is not None and header == f"Bearer {token}":
                self._stale = True

    def _expired(self) -> bool:
        expires = self.credential.expires
        return expires is not None and self._clock() >= expires

    def _refresh(self) -> None:
        if self.credential.token is None:  # a certificate alone: running again changes nothing
            if not self._warned_cert:
                self._warned_cert = True
                log.warning(
                    "%s: the client certificate from exec plugin %s has expired; restart to "
                    "renew it",
                    self._plugin.source,
                    self._plugin.command,
                )
            return
        self._stale = False
        try:
            self.credential = self._run()
        except KubernetesConfigError as exc:
            log.warning("%s; using the credential it gave before", exc)

    def _run(self) -> Credential:
        credential = self._plugin.run()
        if credential.token is None:
            return credential
        try:
            return replace(credential, token=checked(credential.token))
        except ValueError as exc:
            raise self._plugin.error(f"status.token is {exc}") from None
