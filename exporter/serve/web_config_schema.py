"""The web config file's schema: exporter-toolkit's keys as pydantic models, with its
defaults and validation (see web_config.py for what the server takes from it).

A module of its own so that pydantic is loaded only when `--web.config.file` is given: a
plain `serve` reads no file and builds the default `WebConfig` without it.

Messages follow `validation_problem`: a field's message is followed by the value given, and a
check of a whole mapping starts its message with the key it blames. Null (an empty YAML
value) means unset everywhere, as in Go, where it unmarshals to the zero value.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Annotated, Any, Final, Self

from pydantic import BaseModel, BeforeValidator, ConfigDict, model_validator
from pydantic_core import PydanticUseDefault

from kube_gpu_exporter.exporter.serve.tls import (
    CIPHERS,
    CLIENT_AUTH,
    CLIENT_AUTH_ALIASES,
    CURVES,
    TLS_VERSIONS,
    server_context,
)

# exporter-toolkit keys this exporter does not implement, so the error says why, not "unknown".
_UNSUPPORTED: Final[Mapping[str, str]] = {
    "rate_limit": "is not supported by this exporter",
    "tls_server_config.cert": "inline certificates are not supported; use cert_file",
    "tls_server_config.key": "inline keys are not supported; use key_file",
    "tls_server_config.client_ca": "inline CAs are not supported; use client_ca_file",
    "tls_server_config.client_allowed_sans": "is not supported (Python's ssl cannot check SANs)",
}

# exporter-toolkit only lets these headers be set, some only to fixed values, so one config
# behaves the same across the Prometheus ecosystem. Names match case-insensitively, as in HTTP.
_HEADERS: Final[Mapping[str, tuple[str, ...]]] = {
    "Strict-Transport-Security": (),
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": (),
    "Content-Security-Policy": (),
}

# Not in an HTTP field value (RFC 9110 §5.5): C0 controls but tab, and DEL.
_CONTROL: Final = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")

# What Go's bcrypt.Cost accepts: version 2a/2b/2y, cost 04..31, 22 chars salt + 31 chars hash.
_BCRYPT_HASH: Final = re.compile(r"\$2[aby]\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}")


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _unknown(value: object, allowed: Collection[str]) -> str:
    return f"unknown value {value!r} (expected one of: {', '.join(allowed)})"


def _strict(kind: type, words: str) -> Callable[[object], object]:
    """A value of exactly `kind` (YAML's `yes please` is not a boolean), said in the operator's
    words rather than pydantic's."""

    def check(value: object) -> object:
        if value is None or (value == "" and kind is str):
            raise PydanticUseDefault
        if not isinstance(value, kind):
            raise ValueError(f"expected {words}")
        return value

    return check


def _one_of(
    allowed: Collection[str], aliases: Mapping[str, str] | None = None
) -> Callable[[object], object]:
    """One of Go's names; a legacy alias becomes the name it stands for. "" is unset."""
    names = tuple(allowed)

    def check(value: object) -> object:
        if value is None or value == "":
            raise PydanticUseDefault
        if isinstance(value, str):
            value = (aliases or {}).get(value, value)
        if value not in names:
            raise ValueError(_unknown(value, names))
        return value

    return check


def _some_of(allowed: Collection[str]) -> Callable[[object], object]:
    """A list of Go's names (cipher suites, curves)."""
    names = tuple(allowed)

    def check(value: object) -> object:
        if value is None:
            raise PydanticUseDefault
        if not isinstance(value, list):
            raise ValueError("expected a list")
        for item in value:
            if item not in names:
                raise ValueError(_unknown(item, names))
        return value

    return check


def _bcrypt_users(users: Mapping[str, object]) -> dict[str, bytes]:
    """user -> hash. The hash is never echoed: it is a secret, as in exporter-toolkit, so the
    message names only the user (the whole mapping is the value, which is never shown)."""
    hashes: dict[str, bytes] = {}
    for user, hashed in users.items():
        if not isinstance(hashed, str) or not _BCRYPT_HASH.fullmatch(hashed):
            raise ValueError(
                f"{user}: not a bcrypt hash (expected $2a$, $2b$ or $2y$, a cost of 04-31 "
                "and 53 more characters, e.g. from `htpasswd -nBC 10 user`)"
            )
        hashes[user] = hashed.encode("ascii")
    return hashes


Text = Annotated[str, BeforeValidator(_strict(str, "a string"))]
Flag = Annotated[bool, BeforeValidator(_strict(bool, "true or false"))]
ClientAuthType = Annotated[str, BeforeValidator(_one_of(CLIENT_AUTH, CLIENT_AUTH_ALIASES))]
TlsVersion = Annotated[str, BeforeValidator(_one_of(TLS_VERSIONS))]
CipherSuites = Annotated[list[str], BeforeValidator(_some_of(CIPHERS))]
Curves = Annotated[list[str], BeforeValidator(_some_of(CURVES))]
BcryptUsers = Annotated[dict[str, bytes], BeforeValidator(_bcrypt_users)]


class _Model(BaseModel):
    """Immutable, and refuses unknown keys (WebConfigFile names them first, with the section)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class TlsServerConfig(_Model):
    """`tls_server_config`; TLS is on when a file or a client-auth type is set."""

    cert_file: Text = ""
    key_file: Text = ""
    client_auth_type: ClientAuthType = ""
    client_ca_file: Text = ""
    min_version: TlsVersion = "TLS12"
    max_version: TlsVersion = "TLS13"
    cipher_suites: CipherSuites = []
    curve_preferences: Curves = []  # validated and ignored (see tls.py)
    prefer_server_cipher_suites: Flag = True

    @property
    def enabled(self) -> bool:
        """exporter-toolkit turns TLS on when any of these is set; otherwise it is plain HTTP."""
        return bool(self.cert_file or self.key_file or self.client_ca_file or self.client_auth_type)

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if not self.enabled:
            return self
        if not self.cert_file:
            raise ValueError("cert_file: required when TLS is configured")
        if not self.key_file:
            raise ValueError("key_file: required when TLS is configured")
        if TLS_VERSIONS[self.min_version] > TLS_VERSIONS[self.max_version]:
            raise ValueError(
                f"max_version: min_version {self.min_version} is above "
                f"max_version {self.max_version}"
            )
        asks = CLIENT_AUTH[self.client_auth_type or "NoClientCert"] is not ssl.CERT_NONE
        if self.client_ca_file and not asks:
            raise ValueError(
                "client_ca_file: set, but client_auth_type does not ask for client certificates"
            )
        if asks and not self.client_ca_file:
            raise ValueError(
                f"client_ca_file: required by client_auth_type {self.client_auth_type} "
                "(this exporter verifies every client certificate it asks for)"
            )
        return self

    def files(self, directory: Path) -> tuple[str, ...]:
        """The certificate, key and client CA files (those given), resolved as `ssl_context`
        resolves them: what a rotation changes."""
        names = (self.cert_file, self.key_file, self.client_ca_file)
        return tuple(_resolve(name, directory) for name in names if name)

    def ssl_context(self, directory: Path) -> ssl.SSLContext | None:
        """The context to serve with (None: plain HTTP). Relative paths are resolved against
        `directory`, the config file's, as exporter-toolkit does."""
        if not self.enabled:
            return None

        def resolve(name: str) -> str:
            return _resolve(name, directory)

        return server_context(
            cert_file=resolve(self.cert_file),
            key_file=resolve(self.key_file),
            client_ca_file=resolve(self.client_ca_file),
            client_auth_type=self.client_auth_type or "NoClientCert",
            min_version=self.min_version,
            max_version=self.max_version,
            cipher_suites=self.cipher_suites,
            prefer_server_cipher_suites=self.prefer_server_cipher_suites,
        )


class HttpServerConfig(_Model):
    """`http_server_config`: the headers added to every response."""

    http2: Flag = True  # validated and ignored: the server speaks HTTP/1.1
    headers: dict[str, str] = {}

    @model_validator(mode="before")
    @classmethod
    def _allowed_headers(cls, data: dict[str, Any]) -> dict[str, Any]:
        """Only exporter-toolkit's headers, some only with its values; names are kept as the
        table spells them. Checked here so a refused name reads `headers: header 'X' …`."""
        given = data.get("headers")
        if given is None:
            return {**data, "headers": {}}
        if not isinstance(given, dict):
            raise ValueError(f"headers: expected a mapping, got {_kind(given)}")
        canonical = {name.lower(): name for name in _HEADERS}
        headers: dict[str, str] = {}
        for name, value in given.items():
            known = canonical.get(name.lower()) if isinstance(name, str) else None
            if known is None:
                allowed_names = ", ".join(_HEADERS)
                raise ValueError(
                    f"headers: header {name!r} cannot be configured (allowed: {allowed_names})"
                )
            if not isinstance(value, str):
                raise ValueError(f"headers.{name}: expected a string, got {_kind(value)}")
            if _CONTROL.search(value):  # a CR or LF would end the header and forge the next
                raise ValueError(f"headers.{name}: control character in value {value!r}")
            if _HEADERS[known] and value not in _HEADERS[known]:
                allowed = ", ".join(_HEADERS[known])
                raise ValueError(
                    f"headers.{name}: invalid value {value!r} (expected one of: {allowed})"
                )
            headers[known] = value
        return {**data, "headers": headers}


class WebConfigFile(_Model):
    """A whole web config file; every section may be left out or empty."""

    tls_server_config: TlsServerConfig = TlsServerConfig()
    http_server_config: HttpServerConfig = HttpServerConfig()
    basic_auth_users: BcryptUsers = {}

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: object) -> dict[str, Any]:
        """Every key of the file, checked here so a message can name a section with the keys it
        allows (`tls_server_config: unknown key 'x' (expected one of: …)`) and so a users
        section that is not a mapping is never echoed (it may hold hashes)."""
        if data is None:
            return {}
        if not isinstance(data, dict):
            raise ValueError(f"expected a mapping, got {_kind(data)}")
        _only(data, "top level", cls.model_fields)
        sections = {name: _mapping(data.get(name), name) for name in cls.model_fields}
        _only(sections["tls_server_config"], "tls_server_config", TlsServerConfig.model_fields)
        _only(sections["http_server_config"], "http_server_config", HttpServerConfig.model_fields)
        for user in sections["basic_auth_users"]:
            if not isinstance(user, str):
                raise ValueError(f"basic_auth_users: user name {user!r} must be a string")
        return {**data, **sections}


def _mapping(value: object, where: str) -> dict[Any, Any]:
    """A section; null (an empty YAML section) is an empty one."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{where}: expected a mapping, got {_kind(value)}")
    return value


def _only(section: Mapping[Any, Any], where: str, allowed: Collection[str]) -> None:
    """Refuse a key not in `allowed`, saying why where exporter-toolkit has it and we do not."""
    prefix = "" if where == "top level" else f"{where}."
    for key in section:
        if key in allowed:
            continue
        if f"{prefix}{key}" in _UNSUPPORTED:
            raise ValueError(f"{prefix}{key}: {_UNSUPPORTED[f'{prefix}{key}']}")
        raise ValueError(f"{where}: unknown key {key!r} (expected one of: {', '.join(allowed)})")


def _resolve(name: str, directory: Path) -> str:
    return name if not name or Path(name).is_absolute() else str(directory / name)
