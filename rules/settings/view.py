"""What queries, alert specs and promtool cases may read of the config.

A protocol rather than the `Config` class: `Config` is assembled from the alert specs (its
`alerts:` section has one field per spec), so the specs — and `Query`, which they are written
with — cannot import it without an import cycle. `Config` satisfies this protocol, and every
caller passes a `Config`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from kube_gpu_exporter.rules.settings.alert import AlertsBase
from kube_gpu_exporter.rules.settings.dashboards import Cost
from kube_gpu_exporter.rules.settings.selectors import Labels, Selectors


class ConfigView(Protocol):
    """The sections a rule, a promtool case or a runbook reads beyond its own alert's settings:
    the selectors and labels of every query, the price of an idle GPU-hour, and the other
    alerts' settings (the two Xid alerts test against each other's lists)."""

    @property
    def selectors(self) -> Selectors: ...

    @property
    def labels(self) -> Labels: ...

    @property
    def cost(self) -> Cost: ...

    @property
    def alerts(self) -> AlertsBase: ...

    @property
    def alert_labels(self) -> Mapping[str, str]: ...
