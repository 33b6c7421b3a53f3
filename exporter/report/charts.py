"""The report's charts as inline SVG, drawn by matplotlib's SVG backend.

The figure is built with `matplotlib.figure.Figure` and printed through `FigureCanvasSVG`, so
neither pyplot's global state nor a GUI or raster (Agg) backend is involved. Text stays text
(`svg.fonttype: none`) instead of glyph outlines, which keeps a chart to a few tens of KB and
lets the page's font draw it; `svg.hashsalt` and no metadata make the bytes the same for the
same data. The XML prologue is dropped so the SVG can sit inside the HTML.
"""

from __future__ import annotations

import io

from kube_gpu_exporter.exporter.report.model import Chart

WIDTH, HEIGHT = 11.0, 2.8  # inches at 72 dpi in the SVG: 792 × 202 px, scaled to the page
COLOURS = ("#3274d9", "#e0752d", "#56a64b", "#a352cc", "#f2cc0c", "#8ab8ff", "#de314d")
NO_METADATA = {"Date": None, "Creator": None, "Format": None, "Type": None}


def svg(chart: Chart) -> str:
    """`chart` as an `<svg>` element, or "" when it has no line to draw."""
    if not any(line.times for line in chart.lines):
        return ""
    import matplotlib
    import numpy
    from matplotlib.backends.backend_svg import FigureCanvasSVG
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
    from matplotlib.figure import Figure
    from matplotlib.ticker import PercentFormatter

    with matplotlib.rc_context(
        {
            "svg.fonttype": "none",
            "svg.hashsalt": "kube-gpu-exporter-report",
            "font.family": "sans-serif",
            "font.size": 9,
            "axes.spines.top": False,
            "axes.spines.right": False,
        }
    ):
        figure = Figure(figsize=(WIDTH, HEIGHT), dpi=72, layout="constrained")
        axes = figure.add_subplot()
        for index, line in enumerate(chart.lines):
            times = numpy.array([int(t) for t in line.times], dtype="datetime64[s]")  # UTC
            axes.plot(
                times,
                line.values,
                label=line.label,
                linewidth=1.4,
                color=COLOURS[index % len(COLOURS)],
            )
        if chart.target is not None:
            axes.axhline(
                chart.target,
                color="#56a64b",
                linestyle="--",
                linewidth=1,
                label=f"target {chart.target * 100:g} %",
            )
        if chart.unit == "ratio":
            axes.set_ylim(0, 1)
            axes.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
        else:
            top = max((v for line in chart.lines for v in line.values if v == v), default=0)
            axes.set_ylim(0, top * 1.15 or 1)  # room above the highest line for its legend
            axes.set_ylabel(chart.unit)
        # matplotlib's date ticks and SVG printer carry no type hints.
        locator = AutoDateLocator()  # type: ignore[no-untyped-call]
        axes.xaxis.set_major_locator(locator)
        axes.xaxis.set_major_formatter(ConciseDateFormatter(locator))  # type: ignore[no-untyped-call]
        axes.grid(True, color="#dddddd", linewidth=0.6)
        axes.legend(loc="lower left", bbox_to_anchor=(0, 1), frameon=False, ncols=6, fontsize=8)
        buffer = io.StringIO()
        canvas = FigureCanvasSVG(figure)
        canvas.print_svg(buffer, metadata=NO_METADATA)  # type: ignore[no-untyped-call]
    text = buffer.getvalue()
    return text[text.index("<svg") :]
