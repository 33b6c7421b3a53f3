"""`AlertSpec`: everything about one alert in one value — its settings and their defaults, its
rule, its promtool cases and its runbook.

The rule, the tests and the runbook of an alert are written from the same settings object, so
they cannot disagree on a threshold; and since they live together (one spec per alert in
rules/alerts/<area>.py), adding an alert is adding one spec. The `alerts:` section of the
thresholds file, the rule groups, the promtool file and docs/runbooks.md are all built from the
list of specs in rules/alerts/__init__.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from kube_gpu_exporter.rules.alert_text import AlertText
from kube_gpu_exporter.rules.model import AlertRule
from kube_gpu_exporter.rules.promql import Query
from kube_gpu_exporter.rules.promtool_cases import Case, World
from kube_gpu_exporter.rules.runbook_parts import Runbook
from kube_gpu_exporter.rules.settings.alert import AlertSettings
from kube_gpu_exporter.rules.settings.view import ConfigView

S = TypeVar("S", bound=AlertSettings)


@dataclass(frozen=True, slots=True)
class AlertSpec(Generic[S]):
    """One alert. `settings` is the model of its entry in the thresholds file, whose field
    defaults are the alert's defaults; `summary` is static (the monitoring-mixin style) and
    ends with a period. `rule`, `cases` and `runbook` each get the alert's validated settings;
    the whole config is theirs to read through `Query.config` and `World.q.config`."""

    name: str
    summary: str
    settings: type[S]
    rule: Callable[[S, Query], AlertText]
    cases: Callable[[S, World], Case]
    runbook: Callable[[S, Query], Runbook]
    # A device alert: where exactly one pod holds the device, the alert carries that pod's
    # namespace, pod and owner (`Query.with_holder`), so it routes to the team using it.
    holders: bool = False
    # A device alert raised once per workload holding the GPU (`Query.per_workload`), so that
    # an inhibit rule keyed on the workload reaches every sharer of a time-sliced GPU; its
    # rule's expression must be labelled by `Query.device_display` alone.
    per_workload: bool = False

    @property
    def defaults(self) -> S:
        return self.settings()

    def of(self, cfg: ConfigView) -> S:
        """This alert's settings in `cfg`."""
        settings = getattr(cfg.alerts, self.name)
        assert isinstance(settings, self.settings), self.name
        return settings

    def alert(self, q: Query) -> AlertRule:
        settings = self.of(q.config)
        text = self.rule(settings, q)
        labels = {**q.config.alert_labels, **settings.labels}
        expr = text.expr
        if self.per_workload:
            expr = q.per_workload(expr)
        elif self.holders:
            expr = q.with_holder(expr)
        return AlertRule(
            self.name,
            expr,
            settings.for_,
            settings.severity,
            self.summary,
            text.description,
            dict(sorted(labels.items())),
            settings.keep_firing(),
        )

    def case(self, w: World) -> Case:
        return self.cases(self.of(w.q.config), w)

    def runbook_of(self, q: Query) -> Runbook:
        return self.runbook(self.of(q.config), q)
