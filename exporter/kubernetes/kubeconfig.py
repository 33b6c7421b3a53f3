"""Kubeconfig files' chosen context → a `Connection`, read as kubectl reads them.

The context names a cluster (`server`, `certificate-authority[-data]`,
`insecure-skip-tls-verify`, `tls-server-name`, `proxy-url`), a user and a namespace. The
user authenticates with a client certificate and key (files or `-data`), a bearer token
(`token`, or `tokenFile`, which wins as in client-go and is re-read every minute), or a
`username` and `password`. `-data` fields are base64 and win over their file. An `exec`
plugin (EKS, GKE, AKS and OIDC logins on a workstation: `explain`'s usual case) is run as
kubectl runs it (exec_plugin.py, exec_auth.py); the user's own token or certificate, if it
has one, wins over the plugin's, as in client-go. An `auth-provider` (deprecated) is handed
to the `kubernetes` package's loader (plugin_auth.py, the optional `auth-provider` extra),
imported only then, as the one context kubectl would use.

Several files ($KUBECONFIG's) are merged as client-go merges them: the first file to name a
cluster, user or context wins, the first non-empty current-context is the current one, and
relative paths are relative to the folder of the file that holds their entry (so a user in
one folder keeps its certificates when its cluster is in another). Preferences are ignored.
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
from kube_gpu_exporter.exporter.kubernetes.exec_auth import ExecAuthorization
from kube_gpu_exporter.exporter.kubernetes.exec_plugin import cluster_info, exec_plugin
from kube_gpu_exporter.exporter.kubernetes.kubeconfig_choice import Kubeconfig, kubeconfig_of
from kube_gpu_exporter.exporter.kubernetes.tls_client import client_context
from kube_gpu_exporter.exporter.kubernetes.tokens import TokenFile, basic, bearer

MAX_BYTES: Final = 16 << 20  # a kubeconfig of hundreds of clusters, each with its CA, fits
PLUGIN_FIELDS: Final = ("exec", "auth-provider")
SECTIONS: Final = {"clusters": "cluster", "users": "user", "contexts": "context"}
# The file fields client-go resolves against their file's folder (ResolveLocalPaths).
CLUSTER_PATHS: Final = ("certificate-authority",)
USER_PATHS: Final = ("client-certificate", "client-key", "tokenFile")


@dataclass(frozen=True)
class Current:
    """The chosen context's parts, each section's inner mapping, and the file each of the
    cluster and the user comes from (where their relative paths start)."""

    context: str
    cluster: Mapping[str, Any]
    user_name: str
    user: Mapping[str, Any]
    namespace: str
    cluster_file: str = ""
    user_file: str = ""


@dataclass(frozen=True)
class _Entry:
    """A named entry's inner value (checked when used) and the file that holds it."""

    value: Any
    file: str


def load_kubeconfig(kubeconfig: str | Kubeconfig) -> Connection:
    """The connection of the chosen context (a path: that one file's current context);
    KubernetesConfigError on any problem."""
    choice = kubeconfig_of(kubeconfig)
    current = current_context(choice)
    if all(field in current.user for field in PLUGIN_FIELDS):
        raise KubernetesConfigError(
            f"kubeconfig {current.user_file}: user {current.user_name!r}: exec and "
            "auth-provider cannot be used together"
        )
    if "auth-provider" in current.user:
        from kube_gpu_exporter.exporter.kubernetes.plugin_auth import load_with_kubernetes

        proxy_url = _fields(current.cluster_file).string(current.cluster, "proxy-url")
        return load_with_kubernetes(
            plugin_config(current), choice.source, current.user_name, current.namespace, proxy_url
        )
    cluster, user = current.cluster, current.user
    of_cluster, of_user = _fields(current.cluster_file), _fields(current.user_file)
    server = server_url(
        of_cluster.string(cluster, "server", required=True) or "", of_cluster.source
    )
    ca_file = of_cluster.path(cluster, "certificate-authority")
    ca_data = of_cluster.data(cluster, "certificate-authority-data")
    cert_file = of_user.path(user, "client-certificate", "client-certificate-data")
    key_file = of_user.path(user, "client-key", "client-key-data")
    cert_data = of_user.data(user, "client-certificate-data")
    key_data = of_user.data(user, "client-key-data")
    authorization = _authorization(of_user, user)
    plugin = None
    if "exec" in user:
        plugin = _exec_authorization(current, server, ca_file, ca_data)
        authorization = authorization or plugin
        got = plugin.credential
        if cert_file is None and cert_data is None and got.cert is not None:
            cert_data, key_data, key_file = got.cert, got.key, None
    context = None
    if server.startswith("https:"):
        context = client_context(
            choice.source,
            ca_file=ca_file,
            ca_data=_pem_text(ca_data),
            insecure=of_cluster.flag(cluster, "insecure-skip-tls-verify"),
            cert_file=cert_file,
            key_file=key_file,
            cert_data=cert_data,
            key_data=key_data,
        )
    return Connection(
        server=server,
        source=choice.source,
        ssl_context=context,
        server_hostname=of_cluster.string(cluster, "tls-server-name"),
        authorization=authorization,
        proxy_url=of_cluster.string(cluster, "proxy-url"),
        namespace=current.namespace,
        rejected=plugin.rejected if plugin is not None and authorization is plugin else None,
    )


def _exec_authorization(
    current: Current, server: str, ca_file: str | None, ca_data: bytes | None
) -> ExecAuthorization:
    """The user's exec plugin, run once now: its first failure is a configuration error."""
    source = f"kubeconfig {current.user_file}: user {current.user_name!r}"
    entry = current.user["exec"]
    command = entry.get("command") if isinstance(entry, Mapping) else None
    if not isinstance(command, str):
        command = ""
    elif os.sep in command and not os.path.isabs(command):
        command = _from(current.user_file, command)  # client-go: from its file's folder
    if ca_data is None and ca_file is not None:
        try:
            with open(ca_file, "rb") as file:
                ca_data = file.read(MAX_BYTES)
        except OSError:
            pass  # the TLS context names the file's problem
    info = cluster_info(current.cluster, server, ca_data)
    return ExecAuthorization(exec_plugin(entry, source, command, info))


def current_context(kubeconfig: str | Kubeconfig) -> Current:
    """The chosen context (`--context`, else the current-context), its cluster and its user
    (`explain` also reads the namespace)."""
    choice = kubeconfig_of(kubeconfig)
    source = choice.source
    if not choice.files:
        raise KubernetesConfigError(
            f"context {choice.context!r} not found: no kubeconfig file was given or found"
        )
    current, merged = _merge(choice.files, source)
    name = choice.context or current
    if not name:
        raise KubernetesConfigError(f"{source}: no current-context is set")
    context = _named(merged, "contexts", name, source)
    fields = _Fields(f"kubeconfig {context.file}: context {name!r}", "")
    where = f"{source}: context {name!r}"  # a name is looked up in every file
    cluster_name = fields.string(context.value, "cluster", required=True) or ""
    cluster = _named(merged, "clusters", cluster_name, where)
    user_name = fields.string(context.value, "user") or ""
    user = _named(merged, "users", user_name, where) if user_name else _Entry({}, context.file)
    namespace = fields.string(context.value, "namespace") or "default"
    return Current(name, cluster.value, user_name, user.value, namespace, cluster.file, user.file)


def plugin_config(current: Current) -> dict[str, Any]:
    """The chosen context alone as one kubeconfig for the `kubernetes` package's loader
    (auth-provider users), with
    each relative path made absolute from its own file's folder: that loader reads one file
    or one dict, and takes the cluster's folder for every path."""
    cluster = _absolute(current.cluster, CLUSTER_PATHS, current.cluster_file)
    user = _absolute(current.user, USER_PATHS, current.user_file)
    plugin = user.get("exec")
    if isinstance(plugin, Mapping):
        command = plugin.get("command")
        if isinstance(command, str) and os.sep in command and not os.path.isabs(command):
            # client-go's rule: a command with a separator is a path from its file's folder.
            user["exec"] = {**plugin, "command": _from(current.user_file, command)}
    context = {"cluster": "cluster", "user": current.user_name, "namespace": current.namespace}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "cluster", "cluster": cluster}],
        "users": [{"name": current.user_name, "user": user}],
        "contexts": [{"name": current.context, "context": context}],
        "current-context": current.context,
    }


def _absolute(section: Mapping[str, Any], keys: tuple[str, ...], file: str) -> dict[str, Any]:
    copy = dict(section)
    for key in keys:
        value = copy.get(key)
        if isinstance(value, str) and value:
            copy[key] = _from(file, value)
    return copy


def _from(file: str, path: str) -> str:
    """`path` from `file`'s folder, cleaned as Go's filepath.Join cleans it."""
    return os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(file)), path))


def _fields(file: str) -> _Fields:
    return _Fields(f"kubeconfig {file}", os.path.dirname(os.path.abspath(file)))


def _merge(files: tuple[str, ...], source: str) -> tuple[str, dict[str, dict[str, _Entry]]]:
    """The first non-empty current-context, and every section's entries by name, the first
    file's entry winning (within a file too)."""
    current = ""
    merged: dict[str, dict[str, _Entry]] = {section: {} for section in SECTIONS}
    empty = True
    for path in files:
        config = _read(path, f"kubeconfig {path}")
        if config is None:
            continue
        empty = False
        name = config.get("current-context")
        if not current and isinstance(name, str):
            current = name
        for section, inner in SECTIONS.items():
            entries = config.get(section)
            for entry in entries if isinstance(entries, list) else []:
                if isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
                    merged[section].setdefault(entry["name"], _Entry(entry.get(inner), path))
    if empty:
        raise KubernetesConfigError(
            f"{source}: {'the file is' if len(files) == 1 else 'every file is'} empty"
        )
    return current, merged


def _read(path: str, source: str) -> Mapping[str, Any] | None:
    """The file's mapping; None for an empty file (it adds nothing to a merge)."""
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
        return None
    if not isinstance(loaded, Mapping):
        raise KubernetesConfigError(f"{source}: not a kubeconfig (a YAML mapping of clusters…)")
    return loaded


def _named(merged: dict[str, dict[str, _Entry]], section: str, name: str, where: str) -> _Entry:
    """The `section` entry called `name`, its inner value a mapping ({} for none)."""
    inner = SECTIONS[section]
    entry = merged[section].get(name)
    if entry is None:
        raise KubernetesConfigError(f"{where}: {inner} {name!r} not found in {section}")
    if entry.value is None:
        return _Entry({}, entry.file)
    if not isinstance(entry.value, Mapping):
        raise KubernetesConfigError(f"kubeconfig {entry.file}: {inner} {name!r} is not a mapping")
    return entry


class _Fields:
    """Typed reads of one section's fields; a wrong type is a one-line error naming it."""

    def __init__(self, source: str, base: str) -> None:
        self.source = source
        self._base = base

    def string(self, section: Mapping[str, Any], key: str, *, required: bool = False) -> str | None:
        value = section.get(key)
        if value is None or value == "":
            if required:
                raise KubernetesConfigError(f"{self.source}: {key} is not set")
            return None
        if not isinstance(value, str):
            raise KubernetesConfigError(f"{self.source}: {key} is not a string")
        return value

    def flag(self, section: Mapping[str, Any], key: str) -> bool:
        value = section.get(key, False)
        if not isinstance(value, bool):
            raise KubernetesConfigError(f"{self.source}: {key} is not true or false")
        return value

    def path(self, section: Mapping[str, Any], key: str, data_key: str = "") -> str | None:
        """A file field as a path from its file's folder; None if its -data is given."""
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
            raise KubernetesConfigError(f"{self.source}: {key} is not base64") from None


def _pem_text(data: bytes | None) -> str | None:
    """CA data as `cadata` takes it: PEM text (kubeconfigs hold PEM, never DER)."""
    if data is None:
        return None
    return data.decode("ascii", errors="replace")


def _authorization(fields: _Fields, user: Mapping[str, Any]) -> Authorization | None:
    source = fields.source
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
