"""GPU ResourceQuotas: what a namespace may still request, and whether a request fits.

Quota is checked by admission when a pod is created, never by the scheduler: a pod over
quota is refused (its controller records a FailedCreate event) and never Pending. So the
check matters before submission (`explain -f`); for a pod that exists, its requests are
already part of `used`, and the checks are shown for information only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kube_gpu_exporter.exporter.cluster.objects import Quota


@dataclass(frozen=True)
class QuotaCheck:
    """One quota's limit on one GPU resource the pod requests. A scoped quota (scopes or a
    scope selector) is reported but never counted as exceeded: whether its scope takes the
    pod is not evaluated."""

    namespace: str
    quota: str
    resource: str
    hard: int
    used: int
    requested: int
    scoped: bool = False

    @property
    def left(self) -> int:
        return max(0, self.hard - self.used)

    @property
    def exceeded(self) -> bool:
        return not self.scoped and self.requested > self.left

    def __str__(self) -> str:
        scope = " (scoped: not evaluated)" if self.scoped else ""
        return (
            f"{self.quota}: {self.resource} {self.used} of {self.hard} used, "
            f"{self.left} left, {self.requested} requested{scope}"
        )


def quota_checks(quotas: Iterable[Quota], requests: Mapping[str, int]) -> tuple[QuotaCheck, ...]:
    """Every quota's limit on a GPU resource in `requests`, in quota then resource order."""
    return tuple(
        QuotaCheck(
            namespace=quota.namespace,
            quota=quota.name,
            resource=resource,
            hard=hard,
            used=quota.used.get(resource, 0),
            requested=requests[resource],
            scoped=quota.scoped,
        )
        for quota in sorted(quotas, key=lambda q: q.name)
        for resource, hard in sorted(quota.hard.items())
        if resource in requests
    )


def exceeded(checks: Iterable[QuotaCheck]) -> tuple[QuotaCheck, ...]:
    """The checks a new pod with these requests would fail at admission."""
    return tuple(check for check in checks if check.exceeded)
