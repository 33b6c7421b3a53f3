"""Writes on the exporter's own Node: one condition in its status, one taint in its spec, and
nothing else of the object.

The condition goes in a strategic merge patch on the `nodes/status` subresource: NodeStatus'
`conditions` merge by `type`, so the patch replaces our one condition and leaves the kubelet's
(Ready, MemoryPressure, ...) and any other agent's as they are, and RBAC can grant `patch` on
`nodes/status` alone. It is what node-problem-detector sends.

Taints have no merge key (a strategic merge patch would replace the whole list), so the taint
is set by a JSON merge patch of the whole list as read, with the `resourceVersion` read as a
precondition: a taint that the kubelet, a controller or an admin changed in between makes the
API server answer 409 Conflict, and the list is read and written again. Only taints with our
key are ever added or removed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import quote

from kube_gpu_exporter.exporter.kubernetes.api_errors import status_code
from kube_gpu_exporter.exporter.kubernetes.client import ApiClient

STRATEGIC: Final = "application/strategic-merge-patch+json"
MERGE: Final = "application/merge-patch+json"
TIMEOUT: Final = (5.0, 15.0)  # seconds: connect, read; a write is small, and retried next cycle
CONFLICT_RETRIES: Final = 5  # a node's taints change rarely: five races in a row is a bug
TAINT_EFFECT: Final = "NoSchedule"


class NodeStatus:
    """One Node's condition and taint, through `client` (whose credential RBAC limits)."""

    def __init__(self, client: ApiClient, node: str) -> None:
        self._client = client
        self._path = f"/api/v1/nodes/{quote(node, safe='')}"

    def condition(self, kind: str) -> Mapping[str, Any] | None:
        """The Node's condition of type `kind` as stored, or None where it has none."""
        node = self._read()
        for condition in (node.get("status") or {}).get("conditions") or ():
            if condition.get("type") == kind:
                return dict(condition)
        return None

    def write_condition(self, condition: Mapping[str, Any]) -> None:
        """Set the condition of its `type` (a strategic merge on the status subresource)."""
        patch = {"status": {"conditions": [dict(condition)]}}
        self._client.patch(self._path + "/status", patch, STRATEGIC, timeout=TIMEOUT)

    def set_taint(self, key: str, value: str | None) -> bool:
        """Our NoSchedule taint `key` with `value`, or none of it where `value` is None; True
        if the Node was changed. Other taints are kept as read."""
        for attempt in range(CONFLICT_RETRIES):
            node = self._read()
            taints = list((node.get("spec") or {}).get("taints") or ())
            kept = [t for t in taints if (t.get("key"), t.get("effect")) != (key, TAINT_EFFECT)]
            ours = [{"key": key, "value": value, "effect": TAINT_EFFECT}] if value else []
            wanted = kept + ours
            if _same(wanted, taints):
                return False
            patch = {
                "metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
                "spec": {"taints": wanted},
            }
            try:
                self._client.patch(self._path, patch, MERGE, timeout=TIMEOUT)
            except Exception as exc:
                if status_code(exc) == 409 and attempt + 1 < CONFLICT_RETRIES:
                    continue  # changed since read: read again
                raise
            return True
        return False  # not reached: the last attempt returns or raises

    def _read(self) -> Mapping[str, Any]:
        response = self._client.get(self._path, timeout=TIMEOUT, preload=True)
        node: Mapping[str, Any] = json.loads(response.data)
        return node


def _same(a: list[Mapping[str, Any]], b: list[Mapping[str, Any]]) -> bool:
    def key(t: Mapping[str, Any]) -> tuple[str, str, str]:
        return (str(t.get("key")), str(t.get("effect")), str(t.get("value") or ""))

    return sorted(map(key, a)) == sorted(map(key, b))
