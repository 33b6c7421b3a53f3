"""Kubeconfig users who log in through an `auth-provider` (gcp, azure, oidc): their
credentials come from the `kubernetes` package's loader, imported only for them, and
installed only with the `auth-provider` extra (`pip install 'kube-gpu-exporter[auth-provider]'`).

Why not refuse them: kubectl deprecated auth-providers for exec plugins (exec_plugin.py,
which we run ourselves), but old kubeconfigs still hold OIDC ones, and their refresh is
what that loader implements. The package is large and slow to import (bench/README.md), so
it is no default dependency and stays out of the image; without it such a user is one error
line that names the extra.

The loader is given the one context kubeconfig.py chose, as a dict (`plugin_config`), its
paths already absolute: from the files it would resolve a user's paths against its cluster's
folder. Only the credentials are taken from the loader; requests still go through our
client. The loader's refresh hook runs when its credential expires; it is called with a lock
held, since the watches ask from their own threads.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from kube_gpu_exporter.exporter.kubernetes.connection import (
    Connection,
    KubernetesConfigError,
    server_url,
)
from kube_gpu_exporter.exporter.kubernetes.tls_client import client_context


class PluginToken:
    """The Authorization header the loader's configuration holds, refreshed as it says."""

    def __init__(self, configuration: Any) -> None:
        self._configuration = configuration
        self._lock = threading.Lock()

    def __call__(self) -> str | None:
        with self._lock:
            value = self._configuration.get_api_key_with_prefix("BearerToken", "authorization")
        return value if isinstance(value, str) and value else None


def load_with_kubernetes(
    config: Mapping[str, Any], source: str, user: str, namespace: str, proxy_url: str | None
) -> Connection:
    """The connection the `kubernetes` package's loader makes of `config`, the chosen context
    alone (its current-context). `proxy_url` is the cluster's own (an environment proxy is
    the client's choice)."""
    try:
        import kubernetes
    except ImportError:
        raise KubernetesConfigError(
            f"{source}: user {user!r} logs in through an auth-provider, which needs the "
            "kubernetes package: pip install 'kube-gpu-exporter[auth-provider]'"
        ) from None
    configuration = kubernetes.client.Configuration()
    try:
        kubernetes.config.load_kube_config_from_dict(
            config_dict=config,
            client_configuration=configuration,
            persist_config=False,
        )
    except Exception as exc:  # ConfigException, the plugin's own failures, OS errors alike
        message = " ".join(str(exc).split()) or type(exc).__name__
        raise KubernetesConfigError(f"{source}: {message}") from None
    token = PluginToken(configuration)
    cert_file = configuration.cert_file or None
    if token() is None and cert_file is None:
        raise KubernetesConfigError(
            f"{source}: user {user!r}'s auth-provider gave no credentials "
            "(its error is logged above)"
        )
    server = server_url(str(configuration.host or ""), source)
    context = None
    if server.startswith("https:"):
        context = client_context(
            source,
            ca_file=configuration.ssl_ca_cert or None,
            insecure=not configuration.verify_ssl,
            cert_file=cert_file,
            key_file=configuration.key_file or None,
        )
    return Connection(
        server=server,
        source=source,
        ssl_context=context,
        server_hostname=getattr(configuration, "tls_server_name", None) or None,
        authorization=token,
        proxy_url=proxy_url,
        namespace=namespace,
    )
