"""What every alert's entry in the thresholds file has, and the `alerts:` section assembled
from the alerts' own settings models.

Each alert declares its settings model next to its rule (rules/alerts/), and the `alerts:`
section is built from those, one key per alert, so no table lists the alerts by hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import ConfigDict, Field, create_model

from kube_gpu_exporter.rules.settings.values import AlertLabels, Duration, FrozenModel, Severity


class AlertSettings(FrozenModel):
    """What every alert has: an enable switch, how long the condition must hold, a severity."""

    enabled: Annotated[bool, Field(strict=True)] = True
    for_: Duration = Field(default="5m", alias="for")
    severity: Severity = "warning"
    labels: AlertLabels = Field(default_factory=dict)  # routing labels; win over alert_labels

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    def keep_firing(self) -> str:
        """How long the alert fires on after its condition stops holding: only alerts whose
        condition flickers by nature (idle) have the setting, so it is no key of every entry."""
        return "0s"


class AlertsBase(FrozenModel):
    """The `alerts:` section: one field per alert, by alert name, added by `alerts_model`."""

    if TYPE_CHECKING:
        # The fields are made at run time, so a type checker cannot know them: code that
        # needs an alert's settings typed reads them through its spec (`AlertSpec.of`).
        def __getattr__(self, name: str) -> Any: ...


ALERTS_DOC = """One entry per alert, by alert name. A class per alert whose defaults differ, so that
overriding one key (say `severity`) keeps that alert's other defaults; an unknown name is
an error (a typo would otherwise silently leave the real alert on its defaults)."""


def alerts_model(settings: Mapping[str, type[AlertSettings]]) -> type[AlertsBase]:
    """The `alerts:` model for alerts named by `settings` (name → settings model), in order;
    each defaults to its model's defaults."""
    fields: dict[str, Any] = {name: (model, model()) for name, model in settings.items()}
    return create_model("Alerts", __base__=AlertsBase, __doc__=ALERTS_DOC, **fields)
