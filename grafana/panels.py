"""Panel and variable constructors shared by the dashboards, in the project's conventions:
every panel has a unit, every query goes through `${datasource}`, thresholds drawn on panels
come from the thresholds file."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.grafana import queries as qq
from kube_gpu_exporter.grafana.model import Panel, PanelKind, Step, Target, Variable
from kube_gpu_exporter.rules.config import Config
from kube_gpu_exporter.rules.promql import Query

_GRAFANA_CURRENCIES = {
    "USD", "GBP", "EUR", "JPY", "RUB", "UAH", "BRL", "DKK", "ISK", "NOK", "SEK", "CZK",
    "CHF", "PLN", "ZAR", "INR", "KRW", "IDR", "PHP", "VND",
}  # fmt: skip

RED, ORANGE, GREEN = "red", "orange", "green"
LINK_TAG = "kube-gpu-exporter"  # every dashboard carries it; their link menus list it


def dashboard_tags(cfg: Config) -> tuple[str, ...]:
    return tuple(dict.fromkeys((*cfg.dashboards.tags, LINK_TAG)))


def currency_unit(cfg: Config) -> str:
    code = cfg.cost.currency
    return f"currency{code}" if code in _GRAFANA_CURRENCIES else f"suffix: {code}"


def panel(kind: PanelKind, title: str, unit: str, *targets: Target, **options: Any) -> Panel:
    return Panel(kind=kind, title=title, targets=tuple(targets), unit=unit, **options)


def timeseries(title: str, unit: str, *targets: Target, **options: Any) -> Panel:
    return panel("timeseries", title, unit, *targets, **options)


def ratio_series(title: str, *targets: Target, **options: Any) -> Panel:
    """A time series of 0–1 ratios, drawn on a fixed 0–100 % axis so panels compare."""
    return timeseries(title, "percentunit", *targets, min=0, max=1, **options)


def stat(title: str, unit: str, target: Target, **options: Any) -> Panel:
    return panel("stat", title, unit, target, width=options.pop("width", 3), height=4, **options)


def table(title: str, unit: str, *targets: Target, **options: Any) -> Panel:
    return panel("table", title, unit, *targets, **options)


def bargauge(title: str, unit: str, target: Target, **options: Any) -> Panel:
    return panel("bargauge", title, unit, target, **options)


def simulated_marker(q: Query, width: int = 3) -> Panel:
    """A stat for the first row of every dashboard: the nodes of `q` whose exporter serves
    invented readings (`serve --simulate`) under the real metric names. Plain "none" when
    every node is real; the whole panel red, with the count, as soon as one is simulated."""
    return stat(
        "Simulated exporters",
        "none",
        Target(qq.simulated_nodes(q), instant=True),
        width=width,
        steps=((None, GREEN), (1, RED)),
        mappings=(("0", "none", "transparent"),),
        background=True,
        description="Nodes whose exporter ran `serve --simulate` in this time range "
        '(kube_gpu_exporter_build_info{simulated="true"}): their series are invented readings '
        "under the real metric names, and the panels here include them. none: every node "
        "reads real GPUs.",
    )


def line_at(value: float, colour: str = RED) -> dict[str, Any]:
    """Options drawing a dashed threshold line at `value` on a timeseries."""
    steps: tuple[Step, ...] = ((None, GREEN), (value, colour))
    return {"steps": steps, "threshold_line": True}


def renamed(columns: Mapping[str, str], units: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Table overrides: display names (and units) for merged query columns ("Value #A")."""
    overrides: list[tuple[str, Mapping[str, Any]]] = []
    for name, display in columns.items():
        props: dict[str, Any] = {"displayName": display}
        if units and name in units:
            props["unit"] = units[name]
        overrides.append((name, props))
    return {"overrides": tuple(overrides)}


# --- variables ------------------------------------------------------------------------------------


def datasource_variable() -> Variable:
    return Variable("datasource", "Data source", "datasource")


def cluster_variable(cfg: Config) -> Variable:
    """A `label_values` query when a cluster label is configured; otherwise a hidden constant
    so that the variable exists (links and URLs keep working) while queries ignore it."""
    label = cfg.labels.cluster
    if not label:
        return Variable("cluster", "Cluster", "constant")
    query = f"label_values({c.GPU_INFO.name}{{{cfg.selectors.exporter}}}, {label})"
    return Variable("cluster", "Cluster", "query", query)


def scoped(cfg: Config) -> Query:
    """Queries restricted to the selected cluster (when there is a cluster label)."""
    label = cfg.labels.cluster
    return Query(cfg).everywhere(f'{label}="$cluster"') if label else Query(cfg)


def label_variable(q: Query, name: str, label: str, metric: c.Metric, title: str) -> Variable:
    query = f"label_values({q.sel(metric)}, {label})"
    return Variable(name, title, "query", query, multi=True, include_all=True)
