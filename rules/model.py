"""Rules as values: what the generators build and the renderers, tests and runbooks read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class AlertRule:
    """An alert in the monitoring-mixin style.

    `summary` is static and ends with a period; `description` is a Go template that repeats
    the threshold; `runbook_url` is added by a post-pass from the config's base URL and
    `anchor`, so every alert links to its own section of docs/runbooks.md.
    """

    name: str
    expr: str
    for_: str
    severity: str
    summary: str
    description: str
    labels: Mapping[str, str] = field(default_factory=dict)  # routing labels besides severity
    # How long the alert stays firing after its condition last held (Prometheus 2.42+): a
    # flapping condition sends one notification, not a resolve and a new page per flap.
    keep_firing_for: str = "0s"

    @property
    def anchor(self) -> str:
        """The GitHub heading anchor of `## <name>` in docs/runbooks.md."""
        return self.name.lower()


@dataclass(frozen=True, slots=True)
class RecordingRule:
    record: str
    expr: str
    labels: Mapping[str, str] = field(default_factory=dict)  # e.g. the quantile a rule records


@dataclass(frozen=True, slots=True)
class RuleGroup:
    name: str
    rules: tuple[AlertRule | RecordingRule, ...]

    @property
    def alerts(self) -> tuple[AlertRule, ...]:
        return tuple(r for r in self.rules if isinstance(r, AlertRule))
