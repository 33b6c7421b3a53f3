"""Pods refused for an exceeded GPU quota, counted from their controllers' FailedCreate events.

Quota is checked at admission: a pod over quota is never created, so no pod watch sees it;
only the Warning event its controller (a Job, a ReplicaSet, a StatefulSet) records tells,
with a message kube-apiserver has written the same way since 1.x:

    Error creating: pods "train-7f9c-abcde" is forbidden: exceeded quota: gpu-quota,
    requested: requests.nvidia.com/gpu=4, used: requests.nvidia.com/gpu=8,
    limited: requests.nvidia.com/gpu=8

`requested` names only the resources that were exceeded (sorted, comma-separated); a GPU
resource is one of the settings' patterns once `requests.` is removed, as the quota series
name it. The recorder folds repeats into one event and raises its `count` (`series.count`
for events written through events.k8s.io), so the counter grows by each event's growth.

The events watch calls `parse` with every event (list and watch alike) and `publish` with
what it holds, from its one thread. What is held per event is its count, keyed by uid:
memory follows the number of refusal events, never their text. Events present at the first
list are a baseline (a restart must not replay an hour of history as a burst): their counts
are remembered and their series created at 0. Any event not known by uid after that counts
its whole count, also after a relist. Uids go when their events are deleted (their TTL is
one hour by default), and beyond `REMEMBERED` the earliest are dropped.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from kube_gpu_exporter.exporter.cluster import fields
from kube_gpu_exporter.exporter.cluster.parse import QUOTA_PREFIX
from kube_gpu_exporter.exporter.cluster.settings import ClusterSettings

FAILED_CREATE: Final = "FailedCreate"
WARNING: Final = "Warning"
REMEMBERED: Final = 50_000  # event uids kept; an event lives an hour, so a busy cluster's hour
MESSAGE_READ: Final = 4096  # a refusal's message is far shorter; the rest is not read
# "(combined from similar events): " or a StatefulSet's "create Pod web-0 in StatefulSet web
# failed error: " may come before it, so the refusal is searched for, not matched at the start.
REFUSAL: Final = re.compile(
    r"is forbidden: exceeded quota: (?P<quota>[^\s,]+), requested: (?P<requested>\S+?), used: "
)
Series = tuple[str, str, str]  # namespace, quota, resource
NO_TOTALS: Final[Mapping[Series, int]] = MappingProxyType({})


@dataclass(frozen=True)
class QuotaRefusal:
    """One FailedCreate event that says a GPU quota was exceeded: its identity, how often it
    happened, and the quota and GPU resources (without `requests.`) it names."""

    uid: str
    namespace: str
    count: int
    quota: str
    resources: tuple[str, ...]


def parse_refusal(obj: Mapping[str, Any], settings: ClusterSettings) -> QuotaRefusal | None:
    """A core/v1 Event as a GPU quota refusal; None for any other event or message."""
    if obj.get("reason") != FAILED_CREATE or obj.get("type") != WARNING:
        return None
    metadata = fields.mapping(obj.get("metadata"))
    uid = fields.text(metadata.get("uid"))
    namespace = fields.text(metadata.get("namespace")) or fields.text(
        fields.mapping(obj.get("involvedObject")).get("namespace")
    )
    match = REFUSAL.search(fields.text(obj.get("message"))[:MESSAGE_READ])
    if not (uid and namespace and match):
        return None
    resources = gpu_resources(match["requested"], settings)
    if not resources:
        return None
    return QuotaRefusal(
        uid=uid,
        namespace=sys.intern(namespace),
        count=_count(obj),
        quota=sys.intern(match["quota"]),
        resources=resources,
    )


def gpu_resources(requested: str, settings: ClusterSettings) -> tuple[str, ...]:
    """The GPU resources of a refusal's `name=quantity,…` list, `requests.` removed."""
    names = (item.partition("=")[0].strip().strip('"') for item in requested.split(","))
    resources = (name.removeprefix(QUOTA_PREFIX) for name in names)
    return tuple(dict.fromkeys(sys.intern(r) for r in resources if settings.is_gpu_resource(r)))


def _count(obj: Mapping[str, Any]) -> int:
    """How often the event happened: `count`, or `series.count` where that is higher."""
    counts = (obj.get("count"), fields.mapping(obj.get("series")).get("count"))
    return max((c for c in counts if isinstance(c, int) and not isinstance(c, bool)), default=1)


class QuotaRejections:
    """The counter behind `kube_gpu_quota_rejected_pods_total`, fed by the events watch.

    Only the watch thread calls `parse` and `publish`; the view's loop reads `totals`, a
    mapping that is replaced, never changed, so readers need no lock.
    """

    def __init__(self, settings: ClusterSettings, remembered: int = REMEMBERED) -> None:
        self._settings = settings
        self._remembered = remembered
        self._held: Mapping[str, int] = {}  # uid → count, the watch's dict as last published
        self._unpublished: dict[str, int] = {}  # counts taken since, e.g. in a list that failed
        self._listed = False
        self.totals: Mapping[Series, int] = NO_TOTALS

    @property
    def events(self) -> int:
        """Refusal events remembered (what the watch holds)."""
        return len(self._held)

    def parse(self, obj: Mapping[str, Any]) -> tuple[str, int] | None:
        """`ListWatch`'s parser: counts the event's growth and keeps only its count."""
        refusal = parse_refusal(obj, self._settings)
        if refusal is None:
            return None
        seen = self._unpublished.get(refusal.uid, self._held.get(refusal.uid))
        if not self._listed:
            grown = 0  # the first list: a baseline
        elif seen is None:
            grown = refusal.count
        else:
            grown = max(0, refusal.count - seen)
        self._unpublished[refusal.uid] = refusal.count
        series = [(refusal.namespace, refusal.quota, resource) for resource in refusal.resources]
        if grown or any(s not in self.totals for s in series):
            totals = dict(self.totals)
            for key in series:
                totals[key] = totals.get(key, 0) + grown
            self.totals = MappingProxyType(totals)
        return refusal.uid, refusal.count

    def publish(self, held: Mapping[str, int]) -> None:
        """`ListWatch`'s publish: `held` is the watch's own dict, kept as what was seen (a
        deleted event has left it). Beyond `remembered` its earliest entries are dropped,
        here on the watch's thread, where the dict is changed."""
        if isinstance(held, dict):
            while len(held) > self._remembered:
                del held[next(iter(held))]
        self._held = held
        self._unpublished.clear()
        self._listed = True
