"""`explain -f`: the manifest put through the API server as `kubectl create --dry-run=server`
would, so that the pod judged is the one admission makes of it.

Admission changes what the scheduler sees (LimitRanger's default requests and limits, a
RuntimeClass's overhead, node selector and tolerations, DefaultTolerationSeconds, the
priority) and refuses what would never be created (any ResourceQuota, a LimitRange's
maximum, an invalid spec); reproducing each plugin by hand missed some and differed on
others, so the API server's own answer is taken:

- admitted: the pod object it returns;
- refused by a quota (403 Forbidden, "exceeded quota") or another admission plugin (403):
  the message verbatim, the pod will not be created;
- invalid (422, or 400 for fields strict decoding rejects): bad input, the message verbatim;
- not allowed to create pods (RBAC's 403) or a server that takes no POST: the manifest is
  judged as written (manifest.py's `as_written`), and the caller says so in one line.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from kube_gpu_exporter.exporter.cluster.explain.api import ApiReader
from kube_gpu_exporter.exporter.input_errors import InputError, one_line
from kube_gpu_exporter.exporter.kubernetes.client import ApiError

QUOTA_REFUSAL: Final = "exceeded quota"
# The authorizer's refusal, whichever authorizer: `User "u" cannot create resource "pods"`.
NOT_AUTHORIZED: Final = 'cannot create resource "pods"'
INVALID: Final = frozenset({400, 422})
NO_POST: Final = frozenset({405, 501})  # not a Kubernetes API server (a read-only stand-in)


@dataclass(frozen=True)
class Admission:
    """The API server's answer to a dry-run create: `pod` the admitted object, or `refusal`
    its message (`quota`: a ResourceQuota's), or `unasked` why the manifest could not be
    put through admission."""

    pod: Mapping[str, Any] | None = None
    refusal: str = ""
    quota: bool = False
    unasked: str = ""


def admit(reader: ApiReader, pod: Mapping[str, Any], label: str) -> Admission:
    """`pod` (a manifest's, with its namespace) dry-run created; InputError when invalid."""
    metadata = pod.get("metadata") if isinstance(pod.get("metadata"), Mapping) else {}
    assert isinstance(metadata, Mapping)
    namespace = str(metadata.get("namespace") or "default")
    body = {**pod, "apiVersion": "v1", "kind": "Pod"}
    body.pop("status", None)
    if metadata.get("generateName") and metadata.get("name") == metadata["generateName"]:
        # manifest.py shows a pod with only generateName by it; the API server names it
        metadata = {k: v for k, v in metadata.items() if k != "name"}
        body["metadata"] = metadata
    try:
        try:
            return Admission(pod=reader.dry_run_pod(namespace, body))
        except ApiError as exc:
            if exc.status != 409 or not metadata.get("name"):
                raise
        # a pod of that name exists: the same pod under a generated name
        renamed = {k: v for k, v in metadata.items() if k != "name"}
        renamed["generateName"] = f"{metadata['name'][:200]}-"
        return Admission(pod=reader.dry_run_pod(namespace, {**body, "metadata": renamed}))
    except ApiError as exc:
        return _refused(exc, namespace, reader.host, label)


def _refused(exc: ApiError, namespace: str, host: str, label: str) -> Admission:
    message = _message(exc)
    if exc.status == 403 and NOT_AUTHORIZED in message:
        return Admission(unasked=f"may not create pods in namespace {namespace} ({message})")
    if exc.status == 403:
        return Admission(refusal=message, quota=QUOTA_REFUSAL in message)
    if exc.status in NO_POST:
        return Admission(unasked=f"the API server at {host} takes no dry-run create ({message})")
    if exc.status in INVALID:
        raise InputError(f"{label}: the API server refuses it: {message}")
    raise InputError(f"{label}: the API server at {host} answered a dry run with {message}")


def _message(exc: ApiError) -> str:
    """The Status object's message (one line), else the HTTP status."""
    try:
        status = json.loads(exc.body or "{}")
    except ValueError:
        status = {}
    text = status.get("message") if isinstance(status, Mapping) else None
    if not isinstance(text, str) or not text:
        text = f"HTTP {exc.status} {exc.reason}".strip()
    return one_line(text)
