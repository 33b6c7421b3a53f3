"""The Kubernetes API client, configured once from a kubeconfig or the in-cluster environment.

The API is optional in the product (`--kubernetes.enabled`), so `kubernetes` is imported only
here, when a watch is built, never at module import.
"""

from __future__ import annotations

import os
from typing import Any

from kube_gpu_exporter.exporter.input_errors import InputError


class KubernetesConfigError(InputError):
    """The API cannot be configured (no in-cluster env, bad kubeconfig); a one-line message."""


def api_client(kubeconfig: str | None) -> Any:
    """A `kubernetes.client.ApiClient` from the kubeconfig file, or in-cluster config if None."""
    try:
        import kubernetes
    except ImportError as exc:
        raise KubernetesConfigError(f"the kubernetes package is not installed: {exc}") from exc
    configuration = kubernetes.client.Configuration()
    source = "in-cluster config" if kubeconfig is None else f"kubeconfig {kubeconfig}"
    try:
        if kubeconfig is None:
            kubernetes.config.load_incluster_config(client_configuration=configuration)
        else:
            if not os.path.isfile(kubeconfig):
                raise KubernetesConfigError(f"{source}: no such file")
            kubernetes.config.load_kube_config(
                config_file=kubeconfig, client_configuration=configuration, persist_config=False
            )
    except KubernetesConfigError:
        raise
    except Exception as exc:  # ConfigException, YAML, unicode, type and OS errors alike
        message = " ".join(str(exc).split())[:300] or type(exc).__name__
        raise KubernetesConfigError(f"{source}: {message}") from exc
    # Retries are ours (backoff, relist); urllib3's would hide errors and repeat stalls.
    configuration.retries = False
    return kubernetes.client.ApiClient(configuration)
