"""The TLS side of an API server connection, as one `ssl.SSLContext` made at start-up.

The server is verified against the configured CA (a file, or PEM text from a kubeconfig's
`certificate-authority-data`), else against the system's roots, as client-go does; with
`insecure-skip-tls-verify` it is not verified at all. A client certificate and key are loaded
into the context once: `SSLContext.load_cert_chain` reads only paths, so PEM data from a
kubeconfig is written to a private temporary folder (mode 0700, files 0600), loaded, and
removed before this returns; no key is left on disk while the exporter runs.

Every problem (no such file, not PEM, a key that does not match its certificate, an
encrypted key) is one `KubernetesConfigError` line naming the field.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from pathlib import Path

from kube_gpu_exporter.exporter.kubernetes.connection import KubernetesConfigError


def client_context(
    source: str,
    *,
    ca_file: str | None = None,
    ca_data: str | None = None,
    insecure: bool = False,
    cert_file: str | None = None,
    key_file: str | None = None,
    cert_data: bytes | None = None,
    key_data: bytes | None = None,
) -> ssl.SSLContext:
    """The context: verification (CA or system roots, or none) and the client certificate,
    given as files or as PEM data (each of the pair from either)."""
    if insecure:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        context = _verifying(source, ca_file, ca_data)
    has_cert = cert_file is not None or cert_data is not None
    has_key = key_file is not None or key_data is not None
    if has_cert != has_key:
        given, missing = ("client-certificate", "client-key")[:: 1 if has_cert else -1]
        raise KubernetesConfigError(f"{source}: {given} is given without {missing}")
    if has_cert:
        _load_pair(source, context, cert_file, key_file, cert_data, key_data)
    return context


def _verifying(source: str, ca_file: str | None, ca_data: str | None) -> ssl.SSLContext:
    if ca_file is not None and not os.path.isfile(ca_file):
        raise KubernetesConfigError(f"{source}: certificate-authority {ca_file}: no such file")
    try:
        return ssl.create_default_context(cafile=ca_file, cadata=ca_data)
    except (ssl.SSLError, ValueError, OSError) as exc:
        field = "certificate-authority-data" if ca_data is not None else "certificate-authority"
        where = "" if ca_file is None else f" {ca_file}"
        raise KubernetesConfigError(
            f"{source}: {field}{where}: no PEM certificate could be loaded ({_reason(exc)})"
        ) from None


def _load_pair(
    source: str,
    context: ssl.SSLContext,
    cert_file: str | None,
    key_file: str | None,
    cert_data: bytes | None,
    key_data: bytes | None,
) -> None:
    for field, path in (("client-certificate", cert_file), ("client-key", key_file)):
        if path is not None and not os.path.isfile(path):
            raise KubernetesConfigError(f"{source}: {field} {path}: no such file")
    with tempfile.TemporaryDirectory(prefix="kube-gpu-exporter-") as folder:
        cert_path = cert_file or _private(Path(folder, "client.crt"), cert_data or b"")
        key_path = key_file or _private(Path(folder, "client.key"), key_data or b"")
        try:
            # An encrypted key would make OpenSSL prompt on the terminal: answer no password.
            context.load_cert_chain(cert_path, key_path, password=_no_password)
        except (ssl.SSLError, ValueError, OSError) as exc:
            raise KubernetesConfigError(
                f"{source}: the client certificate and key cannot be used: {_reason(exc)}"
            ) from None


def _private(path: Path, data: bytes) -> str:
    """`data` in a new file only its owner can read (in a folder only its owner can enter)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(data)
    return str(path)


def _no_password() -> bytes:
    return b""


def _reason(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or str(exc)
    return " ".join(str(reason).split()) or type(exc).__name__
