"""The ssl.SSLContext a web config's `tls_server_config` asks for, from Go's names.

exporter-toolkit names client-auth types, TLS versions and cipher suites as Go's crypto/tls
does; the tables here map them to Python's ssl module, and the web config's schema validates
against their keys. Where Python cannot do what Go does, the result is stricter or a no-op,
never looser:

- Every client-auth type that asks for a client certificate needs `client_ca_file`: Python's
  ssl module verifies every certificate it asks for, so RequestClientCert/RequireAnyClientCert
  behave like VerifyClientCertIfGiven/RequireAndVerifyClientCert (Go accepts any cert there).
- Cipher suites are mapped to OpenSSL names and enforced for TLS <= 1.2. The TLS 1.3 suite
  names are accepted and ignored, as Go also ignores them.
- Curve preferences are validated and ignored: Python can only pin one curve, which would be
  stricter than the list asked for.
- Certificates are loaded once at startup (Go re-reads them per connection): restart to rotate.

Files are opened here, at load time, so a missing or mismatched certificate stops the exporter
with a one-line CertificateError naming the key, instead of failing the first handshake. So do
settings no client can use with the certificate (up to TLS 1.2 a cipher suite names the key
type that signs, so ECDSA suites with an RSA key leave none): the context is proved by one
handshake in memory with a client that offers every version and suite OpenSSL has.
"""

from __future__ import annotations

import base64
import re
import ssl
import warnings
from collections.abc import Mapping, Sequence
from typing import Final

from kube_gpu_exporter.exporter.input_errors import InputError

__all__ = [
    "CIPHERS",
    "CLIENT_AUTH",
    "CLIENT_AUTH_ALIASES",
    "CURVES",
    "TLS_VERSIONS",
    "CertificateError",
    "server_context",
]

# Go tls.ClientAuthType name -> verify mode. "RequireClientCert" is Go's legacy alias.
CLIENT_AUTH: Final[Mapping[str, ssl.VerifyMode]] = {
    "NoClientCert": ssl.CERT_NONE,
    "RequestClientCert": ssl.CERT_OPTIONAL,
    "RequireAnyClientCert": ssl.CERT_REQUIRED,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
CLIENT_AUTH_ALIASES: Final[Mapping[str, str]] = {"RequireClientCert": "RequireAnyClientCert"}

TLS_VERSIONS: Final[Mapping[str, ssl.TLSVersion]] = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}

# Go cipher suite name -> OpenSSL name; None for TLS 1.3 suites, which Go does not let you pick.
CIPHERS: Final[Mapping[str, str | None]] = {
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_AES_128_GCM_SHA256": None,
    "TLS_AES_256_GCM_SHA384": None,
    "TLS_CHACHA20_POLY1305_SHA256": None,
}
CURVES: Final = ("CurveP256", "CurveP384", "CurveP521", "X25519", "X25519MLKEM768")


class CertificateError(InputError):
    """A certificate, key or CA file that cannot be used. str() is one line that starts with the
    web config key naming the file, so the loader only has to add the config file's name."""


def server_context(
    *,
    cert_file: str,
    key_file: str,
    client_ca_file: str,
    client_auth_type: str,
    min_version: str,
    max_version: str,
    cipher_suites: Sequence[str],
    prefer_server_cipher_suites: bool,
) -> ssl.SSLContext:
    """A server context for already validated settings (Go names, paths resolved); files are
    read now, so a bad one raises CertificateError here."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with warnings.catch_warnings():  # TLS 1.0/1.1 are deprecated, but were asked for
        warnings.simplefilter("ignore", DeprecationWarning)
        ctx.minimum_version = TLS_VERSIONS[min_version]
        ctx.maximum_version = TLS_VERSIONS[max_version]
    if prefer_server_cipher_suites:
        ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    else:
        ctx.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    _load_cert_chain(ctx, cert_file, key_file)
    tls12_ciphers = [c for name in cipher_suites if (c := CIPHERS[name]) is not None]
    if tls12_ciphers:
        try:
            ctx.set_ciphers(":".join(tls12_ciphers))
        except ssl.SSLError as exc:
            raise CertificateError(f"tls_server_config.cipher_suites: {_ssl_reason(exc)}") from None
    # Before client certificates are asked for: the probe client has none.
    failure = _handshake_failure(ctx)
    if failure is not None:
        key = "cipher_suites" if cipher_suites else "min_version/max_version"
        raise CertificateError(
            f"tls_server_config.{key}: no TLS handshake is possible with the "
            f"{_key_type(key_file)} key of {cert_file} and cipher_suites "
            f"[{', '.join(cipher_suites) or 'default'}] at {min_version}–{max_version} "
            f"(OpenSSL: {failure})"
        )
    ctx.verify_mode = CLIENT_AUTH[client_auth_type]
    if client_ca_file:
        _readable("client_ca_file", client_ca_file)
        try:
            ctx.load_verify_locations(cafile=client_ca_file)
        except (OSError, ValueError) as exc:
            raise CertificateError(
                f"tls_server_config.client_ca_file: cannot load {client_ca_file}: "
                f"{_ssl_reason(exc)}"
            ) from None
    return ctx


HANDSHAKE_ROUNDS = 8  # flights: TLS 1.2 needs 4, TLS 1.3 3


def _handshake_failure(server: ssl.SSLContext) -> str | None:
    """Why no client can complete a handshake with `server`, or None when one can: a real
    handshake in memory (MemoryBIO pairs) with a client offering every protocol version and
    cipher suite this OpenSSL has, at security level 0, and verifying nothing."""
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.check_hostname = False
    client.verify_mode = ssl.CERT_NONE
    with warnings.catch_warnings():  # TLS 1.0/1.1 are offered too: the server may ask for them
        warnings.simplefilter("ignore", DeprecationWarning)
        client.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
        client.maximum_version = ssl.TLSVersion.MAXIMUM_SUPPORTED
    client.set_ciphers("ALL:@SECLEVEL=0")
    to_server, to_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    ends = (
        client.wrap_bio(to_client, to_server, server_side=False),
        server.wrap_bio(to_server, to_client, server_side=True),
    )
    done = [False, False]
    for _ in range(HANDSHAKE_ROUNDS):
        for i, end in enumerate(ends):
            if done[i]:
                continue
            try:
                end.do_handshake()
                done[i] = True
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLError as exc:
                return _ssl_reason(exc).split("] ", 1)[-1]  # "[SSL: NO_SHARED_CIPHER] no …"
        if all(done):
            return None
    return "the handshake did not finish"


# PKCS#8 algorithm identifiers (DER-encoded OIDs) → the key type a cipher suite names.
_KEY_OIDS: Final[Mapping[bytes, str]] = {
    bytes.fromhex("2a864886f70d010101"): "RSA",  # rsaEncryption
    bytes.fromhex("2a864886f70d01010a"): "RSA-PSS",
    bytes.fromhex("2a8648ce3d0201"): "ECDSA",  # id-ecPublicKey
    bytes.fromhex("2b6570"): "Ed25519",
    bytes.fromhex("2b6571"): "Ed448",
    bytes.fromhex("2a8648ce380401"): "DSA",
}


def _key_type(key_file: str) -> str:
    """The private key's type for a message ("RSA", "ECDSA", …), read from its PEM header or
    its PKCS#8 algorithm identifier: Python's ssl module cannot tell, and the message is only
    worth so much code."""
    try:
        with open(key_file, encoding="ascii", errors="replace") as pem:
            text = pem.read(64 << 10)
    except OSError:
        return "private"
    legacy = re.search(r"-----BEGIN (RSA|EC|DSA) PRIVATE KEY-----", text)
    if legacy:
        return {"EC": "ECDSA"}.get(legacy.group(1), legacy.group(1))
    body = re.search(r"-----BEGIN PRIVATE KEY-----(.*?)-----END", text, re.S)
    try:
        der = base64.b64decode(body.group(1)) if body else b""
    except ValueError:
        der = b""
    head = der[:32]  # the version and algorithm identifier open a PrivateKeyInfo
    for oid, name in _KEY_OIDS.items():
        if bytes([6, len(oid)]) + oid in head:
            return name
    return "private"


def _load_cert_chain(ctx: ssl.SSLContext, cert: str, key: str) -> None:
    _readable("cert_file", cert)
    _readable("key_file", key)

    def refuse_password() -> bytes:
        # Without a callback OpenSSL would prompt on the terminal and hang the exporter.
        raise CertificateError(
            f"tls_server_config.key_file: {key}: encrypted keys are not supported"
        )

    try:
        ctx.load_cert_chain(cert, key, password=refuse_password)
    except OSError as exc:
        raise CertificateError(
            f"tls_server_config: cannot load cert_file/key_file ({cert}, {key}): {_ssl_reason(exc)}"
        ) from None


def _readable(key: str, path: str) -> None:
    """Fail with the key's name: ssl's own errors do not say which file was missing."""
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise CertificateError(f"tls_server_config.{key}: {path}: {exc.strerror or exc}") from None


def _ssl_reason(exc: Exception) -> str:
    """OpenSSL's reason without the `(_ssl.c:1234)` suffix, which only confuses operators."""
    if isinstance(exc, OSError) and not isinstance(exc, ssl.SSLError) and exc.strerror:
        return exc.strerror
    return re.sub(r"\s*\(_ssl\.c:\d+\)$", "", str(exc)) or type(exc).__name__
