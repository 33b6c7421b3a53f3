"""Typed helpers for the few Grafana building blocks our dashboards use.

Why our own and not grafana-foundation-sdk: we need five panel kinds, three variable kinds
and a grid layout — about 250 lines of frozen dataclasses — while the SDK is a public
preview (0.0.x) whose PyPI history carries epoch-numbered builds that an unpinned or loosely
pinned install silently prefers, and it would become a runtime dependency of the exporter's
image only for `generate`. What the SDK's types would catch (a misspelt key, a missing one)
Grafana's own `Dashboard` type catches in tests/integration/test_dashboards_schema.py, and the
lint tests and the Prometheus-backed query test the rest; the JSON stays byte stable under
our control.

Every panel and target points at the `${datasource}` variable, so dashboards provision from
files or ConfigMaps without `__inputs`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

DATASOURCE: dict[str, str] = {"type": "prometheus", "uid": "${datasource}"}
# The dashboard JSON model's current version (@grafana/schema 13.2, Grafana 12.2 and later):
# Grafana migrates a dashboard below its own version on every load. Versions 40-42 changed
# nothing these dashboards use (refresh a string, no timepicker.time_options, no hideFrom), and
# a Grafana older than 12.2 runs none of its migrations on a version above its own.
SCHEMA_VERSION = 42

PanelKind = Literal["timeseries", "stat", "table", "bargauge", "state-timeline"]
Step = tuple[float | None, str]  # (from value, colour); the first step's value is None


@dataclass(frozen=True, slots=True)
class Target:
    expr: str
    legend: str = "__auto"
    table: bool = False  # an instant query formatted as a table (for table panels)
    instant: bool = False


@dataclass(frozen=True, slots=True)
class Panel:
    """One panel: a title, its queries, a unit, and how it is drawn."""

    kind: PanelKind
    title: str
    targets: tuple[Target, ...]
    unit: str
    description: str = ""
    width: int = 12
    height: int = 8
    steps: tuple[Step, ...] = ((None, "green"),)
    threshold_line: bool = False  # draw the steps as a dashed line (timeseries)
    min: float | None = None
    max: float | None = None
    bars: bool = False  # timeseries drawn as bars (event counts)
    background: bool = False  # a stat coloured as a whole, not only its value (a warning)
    stack: bool = False
    mappings: tuple[tuple[str, str, str], ...] = ()  # (value, text, colour)
    overrides: tuple[tuple[str, Mapping[str, Any]], ...] = ()  # (field name, properties)
    hidden_columns: tuple[str, ...] = ("Time", "__name__", "job")


@dataclass(frozen=True, slots=True)
class Row:
    title: str
    panels: tuple[Panel, ...]


@dataclass(frozen=True, slots=True)
class Variable:
    """A dashboard variable: `datasource`, a `label_values` query, or a hidden constant."""

    name: str
    label: str
    kind: Literal["datasource", "query", "constant"]
    query: str = ""
    multi: bool = False
    include_all: bool = False

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "label": self.label, "type": self.kind}
        if self.kind == "datasource":
            # "default": the data source Grafana marks as default, what it picks unasked.
            current = {"text": "default", "value": "default"}
            out |= {"query": "prometheus", "current": current, "hide": 0, "refresh": 1, "regex": ""}
        elif self.kind == "constant":
            out |= {"query": self.query, "hide": 2, "skipUrlSync": True}
        else:
            out |= {
                "datasource": DATASOURCE,
                # The plain-string form: every Grafana version reads it (newer ones migrate
                # it to their query editor's object on load). No `definition`: the editor's
                # copy of it for display, which the dashboard schema does not have.
                "query": self.query,
                "refresh": 2,
                "sort": 1,
                "regex": "",
                "hide": 0,
                "current": self._current(),
                "multi": self.multi,
                "includeAll": self.include_all,
            }
            if self.include_all:
                out["allValue"] = ".*"
        out["options"] = []
        return out

    def _current(self) -> dict[str, Any]:
        """What a query variable shows before anyone picks: All where it has All (what Grafana
        selects then), else nothing chosen yet, which Grafana fills with the first value."""
        if self.include_all:
            if self.multi:
                return {"text": ["All"], "value": ["$__all"]}
            return {"text": "All", "value": "$__all"}
        return {"text": "", "value": ""}


@dataclass(frozen=True, slots=True)
class Dashboard:
    uid: str
    title: str
    description: str
    tags: tuple[str, ...]
    variables: tuple[Variable, ...]
    rows: tuple[Row, ...]
    refresh: str = "30s"
    time_from: str = "now-6h"
    links_tag: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)

    def panels(self) -> tuple[Panel, ...]:
        return tuple(p for row in self.rows for p in row.panels)

    def to_json(self) -> dict[str, Any]:
        links = []
        if self.links_tag:
            links.append(
                {
                    "title": "GPU dashboards",
                    "tooltip": "The other kube-gpu-exporter dashboards, at this time range "
                    "and these variables",
                    "icon": "external link",  # Grafana's own for a new link
                    "targetBlank": False,
                    "type": "dashboards",
                    "tags": [self.links_tag],
                    "asDropdown": True,
                    "includeVars": True,
                    "keepTime": True,
                }
            )
        return {
            "uid": self.uid,
            "title": self.title,
            "description": self.description,
            "tags": list(self.tags),
            "editable": True,
            "graphTooltip": 1,
            "fiscalYearStartMonth": 0,
            "liveNow": False,
            "refresh": self.refresh,
            "schemaVersion": SCHEMA_VERSION,
            "version": 1,
            "time": {"from": self.time_from, "to": "now"},
            "timepicker": {},
            "timezone": "",
            "links": links,
            "annotations": {"list": []},
            "templating": {"list": [v.to_json() for v in self.variables]},
            "panels": _layout(self.rows),
        }


def _layout(rows: tuple[Row, ...]) -> list[dict[str, Any]]:
    """Rows and panels on Grafana's 24-column grid, left to right, wrapping; ids in order."""
    out: list[dict[str, Any]] = []
    y = 0
    next_id = 1
    for row in rows:
        out.append(
            {
                "type": "row",
                "id": next_id,
                "title": row.title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                "panels": [],
            }
        )
        next_id += 1
        y += 1
        x = 0
        line_height = 0
        for panel in row.panels:
            if x + panel.width > 24:
                y += line_height
                x, line_height = 0, 0
            grid = {"h": panel.height, "w": panel.width, "x": x, "y": y}
            out.append(_panel_json(panel, next_id, grid))
            next_id += 1
            x += panel.width
            line_height = max(line_height, panel.height)
        y += line_height
    return out


def _target_json(target: Target, ref: str) -> dict[str, Any]:
    instant = target.table or target.instant
    return {
        "datasource": DATASOURCE,
        "refId": ref,
        "expr": target.expr,
        "legendFormat": target.legend,
        "range": not instant,
        "instant": instant,
        "format": "table" if target.table else "time_series",
        "editorMode": "code",
    }


def _steps(steps: tuple[Step, ...]) -> dict[str, Any]:
    return {"mode": "absolute", "steps": [{"color": c, "value": v} for v, c in steps]}


def _panel_json(panel: Panel, panel_id: int, grid: dict[str, int]) -> dict[str, Any]:
    defaults: dict[str, Any] = {
        "unit": panel.unit,
        "thresholds": _steps(panel.steps),
        "color": {"mode": "palette-classic" if panel.kind == "timeseries" else "thresholds"},
    }
    if panel.min is not None:
        defaults["min"] = panel.min
    if panel.max is not None:
        defaults["max"] = panel.max
    if panel.mappings:
        defaults["mappings"] = [
            {
                "type": "value",
                "options": {
                    value: {"text": text, "color": colour, "index": i}
                    for i, (value, text, colour) in enumerate(panel.mappings)
                },
            }
        ]
    options: dict[str, Any]
    reduce = {"calcs": ["lastNotNull"], "fields": "", "values": False}
    transformations: list[dict[str, Any]] = []
    if panel.kind == "timeseries":
        defaults["custom"] = {
            "drawStyle": "bars" if panel.bars else "line",
            "fillOpacity": 60 if panel.bars else 10,
            "lineWidth": 1,
            "showPoints": "never",
            "spanNulls": False,
            "stacking": {"mode": "normal" if panel.stack else "none", "group": "A"},
            "thresholdsStyle": {"mode": "dashed" if panel.threshold_line else "off"},
        }
        options = {
            "legend": {"displayMode": "table", "placement": "bottom", "showLegend": True,
                       "calcs": ["mean", "max", "lastNotNull"]},
            "tooltip": {"mode": "multi", "sort": "desc"},
        }  # fmt: skip
    elif panel.kind == "stat":
        options = {
            "reduceOptions": reduce,
            "colorMode": "background" if panel.background else "value",
            "graphMode": "area",
            "justifyMode": "auto",
            "orientation": "auto",
            "textMode": "auto",
        }
    elif panel.kind == "bargauge":
        options = {
            "reduceOptions": reduce,
            "displayMode": "gradient",
            "orientation": "horizontal",
            "showUnfilled": True,
        }
    elif panel.kind == "state-timeline":
        defaults["custom"] = {"fillOpacity": 80, "lineWidth": 0}
        options = {
            "mergeValues": True,
            "showValue": "never",
            "rowHeight": 0.9,
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": False},
            "tooltip": {"mode": "single", "sort": "none"},
        }
    else:  # table
        options = {"showHeader": True, "cellHeight": "sm", "footer": {"show": False}}
        if len(panel.targets) > 1:
            transformations.append({"id": "merge", "options": {}})
        transformations.append(
            {
                "id": "organize",
                "options": {"excludeByName": {name: True for name in panel.hidden_columns}},
            }
        )
    refs = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    out: dict[str, Any] = {
        "type": panel.kind,
        "id": panel_id,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": grid,
        "targets": [_target_json(t, refs[i]) for i, t in enumerate(panel.targets)],
        "fieldConfig": {
            "defaults": defaults,
            "overrides": [
                {
                    "matcher": {"id": "byName", "options": name},
                    "properties": [{"id": k, "value": v} for k, v in props.items()],
                }
                for name, props in panel.overrides
            ],
        },
        "options": options,
    }
    if transformations:
        out["transformations"] = transformations
    return out
