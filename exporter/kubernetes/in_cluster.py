"""The pod's own service account → a `Connection`, as client-go's `rest.InClusterConfig`.

The API server is `https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT` (an IPv6
address goes in brackets), verified against the service account's `ca.crt`; the token is
the mounted `token` file, a bound token that the kubelet rotates, so it is re-read every
minute (tokens.py). The namespace is the pod's own.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from kube_gpu_exporter.exporter.kubernetes.connection import Connection, KubernetesConfigError
from kube_gpu_exporter.exporter.kubernetes.tls_client import client_context
from kube_gpu_exporter.exporter.kubernetes.tokens import REREAD_SECONDS, TokenFile

SERVICE_ACCOUNT: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount")
SOURCE: Final = "in-cluster config"


def load_in_cluster(
    root: Path = SERVICE_ACCOUNT,
    environ: Mapping[str, str] = os.environ,
    *,
    reread_seconds: float = REREAD_SECONDS,
) -> Connection:
    """The connection from the environment and the mounted service account under `root`."""
    host = environ.get("KUBERNETES_SERVICE_HOST", "").strip()
    port = environ.get("KUBERNETES_SERVICE_PORT", "").strip()
    if not host or not port:
        raise KubernetesConfigError(
            f"{SOURCE}: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set "
            "(not in a pod? give --kubernetes.kubeconfig)"
        )
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise KubernetesConfigError(f"{SOURCE}: KUBERNETES_SERVICE_PORT {port!r} is not a port")
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    ca_file = root / "ca.crt"
    if not ca_file.is_file():
        raise KubernetesConfigError(f"{SOURCE}: {ca_file}: no such file")
    token = TokenFile(str(root / "token"), SOURCE, period=reread_seconds)
    return Connection(
        server=f"https://{host}:{port}",
        source=SOURCE,
        ssl_context=client_context(SOURCE, ca_file=str(ca_file)),
        authorization=token,
        namespace=_namespace(root / "namespace"),
    )


def _namespace(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").strip() or "default"
    except (OSError, ValueError):
        return "default"
