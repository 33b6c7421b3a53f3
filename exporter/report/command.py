"""`kube-gpu-exporter report --prometheus URL --since 7d --out gpu-report.html`: the weekly
GPU efficiency report, from any Prometheus that scrapes the exporter and evaluates its
recording rules.

Exit status 0 when the report is written, 2 on bad input — a `--since` that is not a
duration, an `--out` that cannot be written, a Prometheus that does not answer or has no data
for the period, a `--cluster` or `--namespace` that held no GPU, the `report` extra not
installed — as one line on stderr, never a traceback. The CLI adds the subcommand's flags
with `add_arguments`; this module imports only argparse when loaded, so the command alone
pays for Jinja2 and matplotlib.
"""

from __future__ import annotations

import argparse
import sys
from typing import Final

PROG: Final = "kube-gpu-exporter"
EXIT_USAGE: Final = 2
EXTRA: Final = "pip install 'kube-gpu-exporter[report]'"
FORMATS: Final = ("html", "json", "csv")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__.split("\n\n")[0] if __doc__ else None
    parser.add_argument(
        "--prometheus",
        required=True,
        metavar="URL",
        help="the Prometheus that scrapes the exporter and evaluates its "
        "recording rules, e.g. http://prometheus:9090",
    )
    parser.add_argument(
        "--since",
        default="7d",
        metavar="DURATION",
        help="the period, ending now: a Prometheus duration (default 7d)",
    )
    parser.add_argument(
        "--out",
        default="gpu-report.html",
        metavar="FILE",
        help="where to write the report (default gpu-report.html); with "
        "--format csv, one file per table beside it: NAME.<table>.csv",
    )
    parser.add_argument(
        "--format",
        dest="fmt",
        choices=FORMATS,
        default="html",
        help="html (one self-contained file, charts inline), json or csv (default html)",
    )
    parser.add_argument(
        "--namespace",
        dest="namespaces",
        action="append",
        default=[],
        metavar="NS",
        help="only these namespaces' GPUs; repeatable",
    )
    parser.add_argument(
        "--cluster", metavar="NAME", help="only this cluster (the thresholds file's labels.cluster)"
    )
    parser.add_argument(
        "--thresholds",
        metavar="FILE",
        help="the thresholds file `generate` reads (selectors, labels, cost, "
        "efficiency target); defaults if omitted",
    )


def run(args: argparse.Namespace) -> int:
    """Check, ask, write; the exit status (see the module docstring)."""
    try:
        import jinja2  # noqa: F401
        import matplotlib  # noqa: F401
    except ImportError:
        print(f"{PROG}: error: report needs its extra: {EXTRA}", file=sys.stderr)
        return EXIT_USAGE
    from kube_gpu_exporter.exporter.input_errors import InputError
    from kube_gpu_exporter.exporter.report.build import build_report
    from kube_gpu_exporter.exporter.report.files import check_out, write
    from kube_gpu_exporter.exporter.report.period import parse_since
    from kube_gpu_exporter.exporter.report.queries import ReportQueries
    from kube_gpu_exporter.rules.config import load_config

    try:
        cfg = load_config(args.thresholds)
        period = parse_since(args.since)
        check_out(args.out)
        rq = ReportQueries(cfg, period, args.cluster, tuple(dict.fromkeys(args.namespaces)))
        report = build_report(args.prometheus, rq)
        written = write(report, args.out, args.fmt)
    except InputError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for path in written:
        print(path)
    return 0
