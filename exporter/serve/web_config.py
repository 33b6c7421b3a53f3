"""`--web.config.file`: TLS and basic auth in the Prometheus exporter-toolkit format.

One web config file is commonly shared by every exporter on a host, so this module reads
exporter-toolkit's format with its defaults and validation instead of inventing a dialect:
https://github.com/prometheus/exporter-toolkit/blob/master/docs/web-configuration.md

Where Python's `ssl`/aiohttp cannot do what Go does, the difference is stricter or a no-op,
never looser, and is reported at load time rather than at handshake time:

- Every `client_auth_type` that asks for a client certificate needs `client_ca_file`: Python's
  ssl module verifies every certificate it asks for, so RequestClientCert/RequireAnyClientCert
  behave like VerifyClientCertIfGiven/RequireAndVerifyClientCert (Go accepts any cert there).
- `cipher_suites` (Go names) are mapped to OpenSSL names and enforced for TLS <= 1.2. The TLS 1.3
  suite names are accepted and ignored, as Go also ignores them.
- `curve_preferences` are validated and ignored: Python can only pin one curve, which would be
  stricter than the list asked for. `http2` is validated and ignored: aiohttp serves HTTP/1.1.
- Certificates are loaded once at startup (Go re-reads them per connection): restart to rotate.
- Inline `cert`/`key`/`client_ca`, `client_allowed_sans` and `rate_limit` are refused by name.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import re
import ssl
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

import bcrypt
import yaml
from aiohttp import hdrs, web
from aiohttp.typedefs import Handler, Middleware

from kube_gpu_exporter.exporter.input_errors import InputError, yaml_problem

__all__ = ["CheckPassword", "WebConfig", "WebConfigError", "load_web_config", "web_middlewares"]


class WebConfigError(InputError):
    """An unusable web config. str() is one line naming the file and the offending key, so the
    CLI can print it and exit 2 without a traceback."""


def _frozen() -> Mapping[Any, Any]:
    return MappingProxyType({})


@dataclass(frozen=True)
class WebConfig:
    """What the server needs from a web config file; the default is plain HTTP, no auth."""

    ssl_context: ssl.SSLContext | None = None  # None: serve plain HTTP
    basic_auth_users: Mapping[str, bytes] = field(default_factory=_frozen)  # user -> bcrypt hash
    headers: Mapping[str, str] = field(default_factory=_frozen)  # added to every response


CheckPassword = Callable[[bytes, bytes], bool]
"""`bcrypt.checkpw`'s signature (password, hashed); injectable so tests can count calls."""

_TOP_KEYS: Final = ("tls_server_config", "http_server_config", "basic_auth_users")
_TLS_KEYS: Final = (
    "cert_file",
    "key_file",
    "client_auth_type",
    "client_ca_file",
    "min_version",
    "max_version",
    "cipher_suites",
    "curve_preferences",
    "prefer_server_cipher_suites",
)
_HTTP_KEYS: Final = ("http2", "headers")

# exporter-toolkit keys this exporter does not implement, so the error says why, not "unknown".
_UNSUPPORTED: Final[Mapping[str, str]] = {
    "rate_limit": "is not supported by this exporter",
    "tls_server_config.cert": "inline certificates are not supported; use cert_file",
    "tls_server_config.key": "inline keys are not supported; use key_file",
    "tls_server_config.client_ca": "inline CAs are not supported; use client_ca_file",
    "tls_server_config.client_allowed_sans": "is not supported (Python's ssl cannot check SANs)",
}

# Go tls.ClientAuthType name -> verify mode. "RequireClientCert" is Go's legacy alias.
_CLIENT_AUTH: Final[Mapping[str, ssl.VerifyMode]] = {
    "NoClientCert": ssl.CERT_NONE,
    "RequestClientCert": ssl.CERT_OPTIONAL,
    "RequireAnyClientCert": ssl.CERT_REQUIRED,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
_CLIENT_AUTH_ALIASES: Final[Mapping[str, str]] = {"RequireClientCert": "RequireAnyClientCert"}

_TLS_VERSIONS: Final[Mapping[str, ssl.TLSVersion]] = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}

# Go cipher suite name -> OpenSSL name; None for TLS 1.3 suites, which Go does not let you pick.
_CIPHERS: Final[Mapping[str, str | None]] = {
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
_CURVES: Final = ("CurveP256", "CurveP384", "CurveP521", "X25519", "X25519MLKEM768")

# exporter-toolkit only lets these headers be set, some only to fixed values, so one config
# behaves the same across the Prometheus ecosystem. Names match case-insensitively, as in HTTP.
_HEADERS: Final[Mapping[str, tuple[str, ...]]] = {
    "Strict-Transport-Security": (),
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": (),
    "Content-Security-Policy": (),
}

# What Go's bcrypt.Cost accepts: version 2a/2b/2y, cost 04..31, 22 chars salt + 31 chars hash.
_BCRYPT_HASH: Final = re.compile(r"\$2[aby]\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}")
_BCRYPT_MAX_PASSWORD: Final = 72  # bcrypt only reads this many bytes; Go truncates silently


def load_web_config(path: str | Path) -> WebConfig:
    """Read and validate a web config file and build its SSL context.

    Everything is checked here, certificates included, so a bad file stops the exporter at
    startup with a WebConfigError instead of failing the first scrape.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise WebConfigError(f"cannot read web config {path}: {_os_reason(exc)}") from None
    except UnicodeDecodeError:
        raise WebConfigError(f"web config {path}: not UTF-8 text") from None
    return _Parser(path).parse(text)


def web_middlewares(
    config: WebConfig,
    *,
    checkpw: CheckPassword = bcrypt.checkpw,
    public_paths: frozenset[str] = frozenset(),
) -> list[Middleware]:
    """The aiohttp middlewares that apply `config`: headers first (outermost, so 401s get them
    too, as in exporter-toolkit), then basic auth on every path but `public_paths` when users
    are configured (the kubelet's probes carry no credentials)."""
    middlewares: list[Middleware] = []
    if config.headers:
        middlewares.append(_headers_middleware(config.headers))
    if config.basic_auth_users:
        middlewares.append(_BasicAuth(config.basic_auth_users, checkpw, public_paths).middleware)
    return middlewares


# --- parsing ------------------------------------------------------------------------------


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys, as Go's yaml.UnmarshalStrict does: otherwise a
    second `basic_auth_users:` block would silently replace the first."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in seen
        except TypeError:  # unhashable: construct_mapping reports it
            continue
        if duplicate:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=True)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


class _Parser:
    """Validates one file; exists so every error can name the file without threading it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def error(self, where: str, message: str) -> WebConfigError:
        return WebConfigError(f"web config {self.path}: {where}: {message}")

    def parse(self, text: str) -> WebConfig:
        try:
            doc = yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass: no tags run code
        except yaml.YAMLError as exc:
            raise WebConfigError(f"web config {self.path}: {yaml_problem(exc)}") from None
        top = self.mapping(doc, "top level", _TOP_KEYS, prefix="")
        tls = self.mapping(top.get("tls_server_config"), "tls_server_config", _TLS_KEYS)
        http = self.mapping(top.get("http_server_config"), "http_server_config", _HTTP_KEYS)
        self.boolean(http, "http_server_config", "http2")
        return WebConfig(
            ssl_context=self.ssl_context(tls),
            basic_auth_users=MappingProxyType(self.users(top.get("basic_auth_users"))),
            headers=MappingProxyType(self.headers(http.get("headers"))),
        )

    def mapping(
        self, value: object, where: str, allowed: tuple[str, ...], prefix: str | None = None
    ) -> dict[str, Any]:
        """A mapping with only `allowed` keys; null (an empty YAML section) is an empty one."""
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.error(where, f"expected a mapping, got {_kind(value)}")
        prefix = f"{where}." if prefix is None else prefix
        for key in value:
            if key in allowed:
                continue
            if f"{prefix}{key}" in _UNSUPPORTED:
                raise self.error(f"{prefix}{key}", _UNSUPPORTED[f"{prefix}{key}"])
            raise self.error(where, f"unknown key {key!r} (expected one of: {', '.join(allowed)})")
        return value

    def string(self, section: Mapping[str, Any], where: str, key: str) -> str:
        value = section.get(key)
        if value is None:
            return ""
        if not isinstance(value, str):
            raise self.error(f"{where}.{key}", f"expected a string, got {_kind(value)}")
        return value

    def boolean(
        self, section: Mapping[str, Any], where: str, key: str, default: bool = True
    ) -> bool:
        value = section.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(f"{where}.{key}", f"expected true or false, got {value!r}")
        return value

    def choices(
        self, section: Mapping[str, Any], key: str, allowed: Mapping[str, object]
    ) -> list[str]:
        """A list of names from `allowed` (cipher suites, curves)."""
        where = f"tls_server_config.{key}"
        value = section.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.error(where, f"expected a list, got {_kind(value)}")
        for item in value:
            if item not in allowed:
                raise self.error(
                    where, f"unknown value {item!r} (expected one of: {', '.join(allowed)})"
                )
        return value

    def enum(
        self,
        section: Mapping[str, Any],
        key: str,
        allowed: Mapping[str, object],
        aliases: Mapping[str, str] | None = None,
    ) -> str:
        """One name from `allowed` (or a legacy alias of one, returned resolved); "" if unset."""
        value = self.string(section, "tls_server_config", key)
        value = (aliases or {}).get(value, value)
        if value and value not in allowed:
            raise self.error(
                f"tls_server_config.{key}",
                f"unknown value {value!r} (expected one of: {', '.join(allowed)})",
            )
        return value

    def file(self, section: Mapping[str, Any], key: str) -> str:
        """A path resolved against the config file's directory, as exporter-toolkit does."""
        value = self.string(section, "tls_server_config", key)
        if not value or Path(value).is_absolute():
            return value
        return str(self.path.parent / value)

    def readable(self, key: str, path: str) -> None:
        """Fail with the key's name: ssl's own errors do not say which file was missing."""
        try:
            with open(path, "rb"):
                pass
        except OSError as exc:
            raise self.error(f"tls_server_config.{key}", f"{path}: {_os_reason(exc)}") from None

    def ssl_context(self, tls: Mapping[str, Any]) -> ssl.SSLContext | None:
        cert = self.file(tls, "cert_file")
        key = self.file(tls, "key_file")
        client_ca = self.file(tls, "client_ca_file")
        auth = self.enum(tls, "client_auth_type", _CLIENT_AUTH, _CLIENT_AUTH_ALIASES)
        min_name = self.enum(tls, "min_version", _TLS_VERSIONS) or "TLS12"
        max_name = self.enum(tls, "max_version", _TLS_VERSIONS) or "TLS13"
        ciphers = self.choices(tls, "cipher_suites", _CIPHERS)
        self.choices(tls, "curve_preferences", dict.fromkeys(_CURVES))
        prefer_server = self.boolean(tls, "tls_server_config", "prefer_server_cipher_suites")

        # exporter-toolkit turns TLS on when any of these is set; otherwise it is plain HTTP.
        if not (cert or key or client_ca or auth):
            return None
        if not cert:
            raise self.error("tls_server_config.cert_file", "required when TLS is configured")
        if not key:
            raise self.error("tls_server_config.key_file", "required when TLS is configured")
        min_version, max_version = _TLS_VERSIONS[min_name], _TLS_VERSIONS[max_name]
        if min_version > max_version:
            raise self.error(
                "tls_server_config", f"min_version {min_name} is above max_version {max_name}"
            )
        mode = _CLIENT_AUTH[auth or "NoClientCert"]
        if mode is ssl.CERT_NONE and client_ca:
            raise self.error(
                "tls_server_config.client_ca_file",
                "set, but client_auth_type does not ask for client certificates",
            )
        if mode is not ssl.CERT_NONE and not client_ca:
            raise self.error(
                "tls_server_config.client_ca_file",
                f"required by client_auth_type {auth} "
                "(this exporter verifies every client certificate it asks for)",
            )

        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        with warnings.catch_warnings():  # TLS 1.0/1.1 are deprecated, but were asked for
            warnings.simplefilter("ignore", DeprecationWarning)
            ctx.minimum_version = min_version
            ctx.maximum_version = max_version
        if prefer_server:
            ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
        else:
            ctx.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
        self.load_cert_chain(ctx, cert, key)
        ctx.verify_mode = mode
        if client_ca:
            self.readable("client_ca_file", client_ca)
            try:
                ctx.load_verify_locations(cafile=client_ca)
            except (OSError, ValueError) as exc:
                raise self.error(
                    "tls_server_config.client_ca_file",
                    f"cannot load {client_ca}: {_ssl_reason(exc)}",
                ) from None
        tls12_ciphers = [c for name in ciphers if (c := _CIPHERS[name]) is not None]
        if tls12_ciphers:
            try:
                ctx.set_ciphers(":".join(tls12_ciphers))
            except ssl.SSLError as exc:
                raise self.error("tls_server_config.cipher_suites", _ssl_reason(exc)) from None
        return ctx

    def load_cert_chain(self, ctx: ssl.SSLContext, cert: str, key: str) -> None:
        self.readable("cert_file", cert)
        self.readable("key_file", key)

        def refuse_password() -> bytes:
            # Without a callback OpenSSL would prompt on the terminal and hang the exporter.
            raise self.error(
                "tls_server_config.key_file", f"{key}: encrypted keys are not supported"
            )

        try:
            ctx.load_cert_chain(cert, key, password=refuse_password)
        except OSError as exc:
            raise self.error(
                "tls_server_config",
                f"cannot load cert_file/key_file ({cert}, {key}): {_ssl_reason(exc)}",
            ) from None

    def users(self, value: object) -> dict[str, bytes]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.error("basic_auth_users", f"expected a mapping, got {_kind(value)}")
        users: dict[str, bytes] = {}
        for user, hashed in value.items():
            if not isinstance(user, str):
                raise self.error("basic_auth_users", f"user name {user!r} must be a string")
            # The hash itself is never echoed: it is a secret, as in exporter-toolkit.
            if not isinstance(hashed, str) or not _BCRYPT_HASH.fullmatch(hashed):
                raise self.error(
                    f"basic_auth_users.{user}",
                    "not a bcrypt hash (expected $2a$, $2b$ or $2y$, a cost of 04-31 "
                    "and 53 more characters, e.g. from `htpasswd -nBC 10 user`)",
                )
            users[user] = hashed.encode("ascii")
        return users

    def headers(self, value: object) -> dict[str, str]:
        where = "http_server_config.headers"
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.error(where, f"expected a mapping, got {_kind(value)}")
        canonical = {name.lower(): name for name in _HEADERS}
        headers: dict[str, str] = {}
        for name, header_value in value.items():
            known = canonical.get(name.lower()) if isinstance(name, str) else None
            if known is None:
                raise self.error(
                    where,
                    f"header {name!r} cannot be configured (allowed: {', '.join(_HEADERS)})",
                )
            if not isinstance(header_value, str):
                raise self.error(f"{where}.{name}", f"expected a string, got {_kind(header_value)}")
            allowed = _HEADERS[known]
            if allowed and header_value not in allowed:
                raise self.error(
                    f"{where}.{name}",
                    f"invalid value {header_value!r} (expected one of: {', '.join(allowed)})",
                )
            headers[known] = header_value
        return headers


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _os_reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _ssl_reason(exc: Exception) -> str:
    """OpenSSL's reason without the `(_ssl.c:1234)` suffix, which only confuses operators."""
    if isinstance(exc, OSError) and not isinstance(exc, ssl.SSLError) and exc.strerror:
        return exc.strerror
    return re.sub(r"\s*\(_ssl\.c:\d+\)$", "", str(exc)) or type(exc).__name__


# --- serving ------------------------------------------------------------------------------


def _headers_middleware(headers: Mapping[str, str]) -> Middleware:
    @web.middleware
    async def add_headers(request: web.Request, handler: Handler) -> web.StreamResponse:
        # As in exporter-toolkit the configured value is a default a handler may override.
        try:
            response = await handler(request)
        except web.HTTPException as exc:  # raised 404s and the like are responses too
            for name, value in headers.items():
                exc.headers.setdefault(name, value)
            raise
        if not response.prepared:  # a streamed response has already sent its headers
            for name, value in headers.items():
                response.headers.setdefault(name, value)
        return response

    return add_headers


class _BasicAuth:
    """HTTP basic auth against bcrypt hashes without blocking the event loop.

    bcrypt costs tens of milliseconds by design, and Prometheus sends the same credentials every
    scrape, so (as exporter-toolkit does) a verified password is cached: by user, as the SHA-256
    of the password, compared in constant time. Only successes are cached, so the cache is
    bounded by the number of users and wrong guesses always pay for bcrypt.
    """

    def __init__(
        self, users: Mapping[str, bytes], checkpw: CheckPassword, public_paths: frozenset[str]
    ) -> None:
        self._users = users
        self._checkpw = checkpw
        self._public_paths = public_paths
        self._verified: dict[str, bytes] = {}
        # One check at a time, like exporter-toolkit's bcryptMtx: a flood of bad passwords then
        # costs one core and one executor thread instead of starving the shared executor.
        self._lock = asyncio.Lock()
        # Unknown users are checked against the costliest configured hash so they take as long
        # as known ones (no user enumeration by timing); they can never pass, match or not.
        self._decoy = max(users.values(), key=lambda hashed: int(hashed[4:6]))

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in self._public_paths:
            return await handler(request)
        credentials = _parse_basic_auth(request.headers.get(hdrs.AUTHORIZATION, ""))
        if credentials is not None and await self._authenticate(*credentials):
            return await handler(request)
        return web.Response(
            status=401, text="Unauthorized\n", headers={hdrs.WWW_AUTHENTICATE: "Basic"}
        )

    async def _authenticate(self, user: str, password: bytes) -> bool:
        digest = hashlib.sha256(password).digest()
        if self._is_cached(user, digest):
            return True
        async with self._lock:
            if self._is_cached(user, digest):  # a concurrent request just verified it
                return True
            hashed = self._users.get(user)
            loop = asyncio.get_running_loop()
            matched = await loop.run_in_executor(
                None, self._check, password[:_BCRYPT_MAX_PASSWORD], hashed or self._decoy
            )
            if matched and hashed is not None:
                self._verified[user] = digest
                return True
        return False

    def _check(self, password: bytes, hashed: bytes) -> bool:
        try:
            return self._checkpw(password, hashed)
        except ValueError:  # hashes are validated at load; a checker may still refuse input
            return False

    def _is_cached(self, user: str, digest: bytes) -> bool:
        known = self._verified.get(user)
        return known is not None and hmac.compare_digest(known, digest)


def _parse_basic_auth(header: str) -> tuple[str, bytes] | None:
    """(user, password bytes) from an Authorization header, like Go's Request.BasicAuth."""
    scheme, _, encoded = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True)
        user, sep, password = decoded.partition(b":")
        return (user.decode("utf-8"), password) if sep else None
    except (binascii.Error, ValueError):  # bad base64, non-ASCII input, non-UTF-8 user
        return None
