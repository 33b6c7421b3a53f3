"""Kubeconfig users who log in through an `exec` plugin or an `auth-provider`: their
credentials come from the `kubernetes` package's loader, imported only for them.

Why not refuse them, or run the plugins ourselves: they are how a workstation reaches a
managed cluster (`aws eks get-token`, `gke-gcloud-auth-plugin`, `kubelogin`, OIDC), so
`explain` and a `cluster` run from a laptop meet them first; the exec protocol
(ExecCredential versions, interactive modes, expiry, cluster info) and the OIDC refresh are
what that loader already implements and keeps current. The DaemonSet and the cluster
Deployment use their service account (in_cluster.py) and never load it: the package's import
costs time and memory (bench/README.md), paid here only by the users who need it.

The loader is given the one context kubeconfig.py chose, as a dict (`plugin_config`), its
paths already absolute: from the files it would resolve a user's paths against its cluster's
folder. Only the credentials are taken from the loader; requests still go through our
client. The loader's refresh hook runs the plugin again when its credential expires; it is
called with a lock held, since the watches ask from their own threads.
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
            f"{source}: user {user!r} logs in through an exec plugin or auth-provider, which "
            "needs the kubernetes Python package (pip install kubernetes)"
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
            f"{source}: user {user!r}'s exec plugin or auth-provider gave no credentials "
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
