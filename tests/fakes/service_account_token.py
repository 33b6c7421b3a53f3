"""A ServiceAccount's token from the test control plane, and a kubeconfig that uses it: how
the tests run a command with exactly the rights our manifests grant, where the admin
kubeconfig would hide a missing RBAC rule.

Tokens are minted by TokenRequest, as the kubelet gets them for a pod's projected volume, so
the API server authenticates them as it would a pod's (the plane signs them with its own
ServiceAccount key)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from control_plane import ControlPlane


def mint_token(
    plane: ControlPlane, namespace: str, account: str, bound: dict[str, str] | None = None
) -> str:
    """A token for `account`; `bound`, an object reference (a pod's kind, apiVersion, name and
    uid), binds it to that object as a pod's mounted token is."""
    spec: dict[str, Any] = {"boundObjectRef": bound} if bound else {}
    minted = plane.ok(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
    )
    return str(minted["status"]["token"])


def token_kubeconfig(plane: ControlPlane, path: Path, token: str) -> Path:
    """The plane's kubeconfig with `token` as its user, written to `path` (owner-only, as
    client tools expect of a file holding a credential)."""
    config = yaml.safe_load(plane.kubeconfig.read_text())
    config["users"][0]["user"] = {"token": token}
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path
