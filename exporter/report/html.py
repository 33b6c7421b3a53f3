"""The report as one HTML file: the Jinja2 template (templates/report.html.j2, package data)
with its CSS inline and each chart an inline SVG, so the file opens anywhere without a network
— no script, stylesheet or font is fetched."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from kube_gpu_exporter.exporter.report.charts import svg
from kube_gpu_exporter.exporter.report.model import Report

TEMPLATE = "report.html.j2"


def when(seconds: float) -> str:
    """A Unix time as the report prints it: `2026-11-24 09:00 UTC`."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M UTC")


def step_text(seconds: int) -> str:
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def render_html(report: Report) -> str:
    """The whole page. Text from Prometheus (label values) is escaped by the template; the
    SVGs come from matplotlib, which escapes the text it writes."""
    import jinja2
    from markupsafe import Markup

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("kube_gpu_exporter.exporter.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    charts: list[dict[str, Any]] = [
        {"chart": chart, "svg": Markup(svg(chart))} for chart in report.charts
    ]
    tables = {t.key: t for t in report.tables}
    return env.get_template(TEMPLATE).render(
        report=report,
        charts={c["chart"].key: c for c in charts},
        tables=tables,
        start=when(report.start),
        end=when(report.end),
        step=step_text(report.step),
    )
