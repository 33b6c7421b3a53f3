"""`--web.config.file`: TLS and basic auth in the Prometheus exporter-toolkit format.

One web config file is commonly shared by every exporter on a host, so this module reads
exporter-toolkit's format with its defaults and validation instead of inventing a dialect:
https://github.com/prometheus/exporter-toolkit/blob/master/docs/web-configuration.md

The file is a pydantic model, validated whole at startup (certificates included, see tls.py),
so a bad file stops the exporter with one line naming the file and the key instead of failing
the first scrape. Where Python cannot do what Go does, the result is stricter or a no-op, never
looser (the TLS cases are listed in tls.py):

- `http2` is validated and ignored: the server speaks HTTP/1.1.
- Inline `cert`/`key`/`client_ca`, `client_allowed_sans` and `rate_limit` are refused by name.

middleware.py applies the result: configured headers and bcrypt basic auth. The schema
(pydantic) is web_config_schema.py, loaded only when a file is given.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from kube_gpu_exporter.exporter.httpd import Middleware
from kube_gpu_exporter.exporter.input_errors import InputError, validation_problem
from kube_gpu_exporter.exporter.serve.middleware import BasicAuth, CheckPassword

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
    # The context for each new connection: ssl_context's, built again when its files change.
    ssl_contexts: Callable[[], ssl.SSLContext] | None = None
    basic_auth_users: Mapping[str, bytes] = field(default_factory=_frozen)  # user -> bcrypt hash
    headers: Mapping[str, str] = field(default_factory=_frozen)  # added to every response


def load_web_config(path: str | Path) -> WebConfig:
    """Read and validate a web config file and build its SSL context; WebConfigError if any of
    it is unusable."""
    # Imported here: pydantic, pyyaml and the TLS checks load only when a file is given.
    from pydantic import ValidationError

    from kube_gpu_exporter.exporter.input_yaml import load_yaml
    from kube_gpu_exporter.exporter.serve.tls import CertificateError
    from kube_gpu_exporter.exporter.serve.tls_reload import ReloadingContext
    from kube_gpu_exporter.exporter.serve.web_config_schema import WebConfigFile

    path = Path(path)
    try:
        # The one input-file reader: size, UTF-8, depth, aliases and duplicate keys (Go's
        # yaml.UnmarshalStrict refuses them too), one line naming the file.
        doc = load_yaml(path, "web config")
    except InputError as exc:
        raise WebConfigError(str(exc)) from None
    try:
        spec = WebConfigFile.model_validate(doc)
        tls = spec.tls_server_config
        contexts = None
        if tls.enabled:
            contexts = ReloadingContext(
                lambda: _context(tls.ssl_context(path.parent)), tls.files(path.parent)
            )
    except ValidationError as exc:
        raise WebConfigError(f"web config {path}: {validation_problem(exc)}") from None
    except CertificateError as exc:
        raise WebConfigError(f"web config {path}: {exc}") from None
    return WebConfig(
        ssl_context=contexts.context if contexts else None,
        ssl_contexts=contexts,
        basic_auth_users=MappingProxyType(dict(spec.basic_auth_users)),
        headers=MappingProxyType(dict(spec.http_server_config.headers)),
    )


def _context(context: ssl.SSLContext | None) -> ssl.SSLContext:
    assert context is not None  # tls_server_config is enabled
    return context


def web_middlewares(
    config: WebConfig,
    *,
    checkpw: CheckPassword | None = None,
    public_paths: frozenset[str] = frozenset(),
) -> list[Middleware]:
    """The middleware that applies `config`'s basic auth, on every path but `public_paths`
    (the kubelet's probes carry no credentials); none without users. The configured headers
    are not a middleware: the connection adds them to every answer it writes."""
    middlewares: list[Middleware] = []
    if config.basic_auth_users:
        if checkpw is None:
            import bcrypt  # only a config with users needs it

            checkpw = bcrypt.checkpw
        middlewares.append(BasicAuth(config.basic_auth_users, checkpw, public_paths).middleware)
    return middlewares
