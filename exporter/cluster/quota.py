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
    pod is not evaluated. `used` is None until the ResourceQuota controller has counted the
    namespace (a quota just created has no `status.used`): unknown, neither 0 nor exceeded."""

    namespace: str
    quota: str
    resource: str
    hard: int
    used: int | None
    requested: int
    scoped: bool = False

    @property
    def left(self) -> int | None:
        return None if self.used is None else max(0, self.hard - self.used)

    @property
    def exceeded(self) -> bool:
        left = self.left
        return not self.scoped and left is not None and self.requested > left

    @property
    def used_text(self) -> str:
        return "? (not counted yet)" if self.used is None else str(self.used)

    def __str__(self) -> str:
        scope = " (scoped: not evaluated)" if self.scoped else ""
        left = "?" if self.left is None else str(self.left)
        return (
            f"{self.quota}: {self.resource} {self.used_text} of {self.hard} used, "
            f"{left} left, {self.requested} requested{scope}"
        )


def quota_checks(quotas: Iterable[Quota], requests: Mapping[str, int]) -> tuple[QuotaCheck, ...]:
    """Every quota's limit on a GPU resource in `requests`, in quota then resource order."""
    return tuple(
        QuotaCheck(
            namespace=quota.namespace,
            quota=quota.name,
            resource=resource,
            hard=hard,
            used=quota.used.get(resource),
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
