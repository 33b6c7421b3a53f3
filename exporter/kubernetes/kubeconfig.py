"""A kubeconfig file's current context → a `Connection`, read as kubectl reads it.

The current context names a cluster (`server`, `certificate-authority[-data]`,
`insecure-skip-tls-verify`, `tls-server-name`, `proxy-url`), a user and a namespace. The
user authenticates with a client certificate and key (files or `-data`), a bearer token
(`token`, or `tokenFile`, which wins as in client-go and is re-read every minute), or a
`username` and `password`. Relative paths are relative to the kubeconfig's folder; `-data`
fields are base64 and win over their file. An `exec` plugin or an `auth-provider` (EKS, GKE,
AKS and OIDC logins on a workstation: `explain`'s usual case) is handed to the `kubernetes`
package's loader (plugin_auth.py), imported only then.

One file is read (the path given, or explain's pick from $KUBECONFIG); files are not merged.
Every problem is one `KubernetesConfigError` line that names the file and the field.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import yaml

from kube_gpu_exporter.exporter.input_errors import yaml_problem
from kube_gpu_exporter.exporter.kubernetes.connection import (
    Authorization,
    Connection,
    KubernetesConfigError,
    server_url,
)
from kube_gpu_exporter.exporter.kubernetes.tls_client import client_context
from kube_gpu_exporter.exporter.kubernetes.tokens import TokenFile, basic, bearer

MAX_BYTES: Final = 16 << 20  # a kubeconfig of hundreds of clusters, each with its CA, fits
PLUGIN_FIELDS: Final = ("exec", "auth-provider")


@dataclass(frozen=True)
class Current:
    """The current context's parts, each section's inner mapping."""

    context: str
    cluster: Mapping[str, Any]
    user_name: str
    user: Mapping[str, Any]
    namespace: str


def load_kubeconfig(path: str) -> Connection:
    """The connection of the file's current context; KubernetesConfigError on any problem."""
    source = f"kubeconfig {path}"
    current = current_context(path)
    if any(field in current.user for field in PLUGIN_FIELDS):
        from kube_gpu_exporter.exporter.kubernetes.plugin_auth import load_with_kubernetes

        proxy_url = _Fields(source, "").string(current.cluster, "proxy-url")
        return load_with_kubernetes(path, source, current.user_name, current.namespace, proxy_url)
    fields = _Fields(source, os.path.dirname(os.path.abspath(path)))
    cluster, user = current.cluster, current.user
    server = server_url(fields.string(cluster, "server", required=True) or "", source)
    context = None
    if server.startswith("https:"):
        context = client_context(
            source,
            ca_file=fields.path(cluster, "certificate-authority"),
            ca_data=_pem_text(fields.data(cluster, "certificate-authority-data")),
            insecure=fields.flag(cluster, "insecure-skip-tls-verify"),
            cert_file=fields.path(user, "client-certificate", "client-certificate-data"),
            key_file=fields.path(user, "client-key", "client-key-data"),
            cert_data=fields.data(user, "client-certificate-data"),
            key_data=fields.data(user, "client-key-data"),
        )
    return Connection(
        server=server,
        source=source,
        ssl_context=context,
        server_hostname=fields.string(cluster, "tls-server-name"),
        authorization=_authorization(fields, user),
        proxy_url=fields.string(cluster, "proxy-url"),
        namespace=current.namespace,
    )


def current_context(path: str) -> Current:
    """The current context, its cluster and its user (`explain` also reads the namespace)."""
    source = f"kubeconfig {path}"
    config = _read(path, source)
    name = config.get("current-context")
    if not isinstance(name, str) or not name:
        raise KubernetesConfigError(f"{source}: no current-context is set")
    context = _named(config, "contexts", "context", name, source)
    where = f"{source}: context {name!r}"
    fields = _Fields(where, "")
    cluster_name = fields.string(context, "cluster", required=True) or ""
    cluster = _named(config, "clusters", "cluster", cluster_name, where)
    user_name = fields.string(context, "user") or ""
    user = _named(config, "users", "user", user_name, where)
    namespace = fields.string(context, "namespace") or "default"
    return Current(name, cluster, user_name, user if user_name else {}, namespace)


def _read(path: str, source: str) -> Mapping[str, Any]:
    if not os.path.isfile(path):
        raise KubernetesConfigError(f"{source}: no such file")
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_BYTES + 1)
    except OSError as exc:
        raise KubernetesConfigError(f"{source}: cannot read it: {exc.strerror or exc}") from None
    if len(data) > MAX_BYTES:
        raise KubernetesConfigError(f"{source}: larger than {MAX_BYTES >> 20} MiB")
    try:
        loaded = yaml.load(
            data.decode("utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        )
    except UnicodeDecodeError as exc:
        raise KubernetesConfigError(f"{source}: not UTF-8 text (offset {exc.start})") from None
    except yaml.YAMLError as exc:
        raise KubernetesConfigError(f"{source}: {yaml_problem(exc)}") from None
    except RecursionError:
        raise KubernetesConfigError(f"{source}: not valid YAML: nested too deeply") from None
    if loaded is None:
        raise KubernetesConfigError(f"{source}: the file is empty")
    if not isinstance(loaded, Mapping):
        raise KubernetesConfigError(f"{source}: not a kubeconfig (a YAML mapping of clusters…)")
    return loaded


def _named(
    config: Mapping[str, Any], section: str, inner: str, name: str, where: str
) -> Mapping[str, Any]:
    """The inner mapping of the `section` entry called `name` ({} for the empty name)."""
    if not name:
        return {}
    entries = config.get(section)
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, Mapping) and entry.get("name") == name:
            value = entry.get(inner)
            if value is None:
                return {}
            if not isinstance(value, Mapping):
                raise KubernetesConfigError(f"{where}: {inner} {name!r} is not a mapping")
            return value
    raise KubernetesConfigError(f"{where}: {inner} {name!r} not found in {section}")


class _Fields:
    """Typed reads of one section's fields; a wrong type is a one-line error naming it."""

    def __init__(self, source: str, base: str) -> None:
        self._source = source
        self._base = base

    def string(self, section: Mapping[str, Any], key: str, *, required: bool = False) -> str | None:
        value = section.get(key)
        if value is None or value == "":
            if required:
                raise KubernetesConfigError(f"{self._source}: {key} is not set")
            return None
        if not isinstance(value, str):
            raise KubernetesConfigError(f"{self._source}: {key} is not a string")
        return value

    def flag(self, section: Mapping[str, Any], key: str) -> bool:
        value = section.get(key, False)
        if not isinstance(value, bool):
            raise KubernetesConfigError(f"{self._source}: {key} is not true or false")
        return value

    def path(self, section: Mapping[str, Any], key: str, data_key: str = "") -> str | None:
        """A file field as a path from the kubeconfig's folder; None if its -data is given."""
        value = self.string(section, key)
        if value is None or (data_key and section.get(data_key)):
            return None
        return os.path.join(self._base, value)

    def data(self, section: Mapping[str, Any], key: str) -> bytes | None:
        value = self.string(section, key)
        if value is None:
            return None
        try:
            return base64.b64decode("".join(value.split()), validate=True)
        except (binascii.Error, ValueError):
            raise KubernetesConfigError(f"{self._source}: {key} is not base64") from None


def _pem_text(data: bytes | None) -> str | None:
    """CA data as `cadata` takes it: PEM text (kubeconfigs hold PEM, never DER)."""
    if data is None:
        return None
    return data.decode("ascii", errors="replace")


def _authorization(fields: _Fields, user: Mapping[str, Any]) -> Authorization | None:
    source = fields._source
    token_file = fields.path(user, "tokenFile")
    if token_file is not None:
        return TokenFile(token_file, source)
    token = fields.string(user, "token")
    if token is not None:
        try:
            return bearer(token)
        except ValueError as exc:
            raise KubernetesConfigError(f"{source}: token is {exc}") from None
    username, password = fields.string(user, "username"), fields.string(user, "password")
    if username is None and password is None:
        return None
    if username is None or password is None:
        raise KubernetesConfigError(f"{source}: username and password must be given together")
    return basic(username, password)
