"""`kube-gpu-exporter generate`: the thresholds file → rules, promtool tests, runbooks and
dashboards, written (or compared with the disk: `--check`) where `WHERE` says.

Without `--out` the files go where this repository keeps them, `deploy/` and
`docs/runbooks.md`, and the generated blocks of README.md and docs/ are rewritten
(doc_blocks.py); with `--out DIR` every file goes under DIR, the runbooks as DIR/runbooks.md
(a `--out` of another thresholds file, run in a checkout, once overwrote the checkout's
runbooks). Only an explicit `--runbooks FILE` puts them elsewhere.

The exporter's CLI adds the subcommand with `add_arguments` and calls `run`. This module
imports only argparse at load time — validation, rules and dashboards load when `run` is
called — so `kube-gpu-exporter serve` does not pay for them at start-up.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

PROG = "kube-gpu-exporter"
EXIT_STALE = 1
EXIT_USAGE = 2
DEFAULT_OUT = "deploy"
DEFAULT_RUNBOOKS = "docs/runbooks.md"
RUNBOOKS_IN_OUT = "runbooks.md"  # the runbooks' name under --out DIR
# What `generate --help` says after its opening line.
WHERE = f"""\
Without --out it writes this repository's {DEFAULT_OUT}/, {DEFAULT_RUNBOOKS} and Helm chart
(charts/kube-gpu-exporter/). With --out DIR everything goes under DIR, the runbooks as
DIR/{RUNBOOKS_IN_OUT}, unless --runbooks names another file. --helm-values FILE writes only
that file: the chart's values for the thresholds file.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = WHERE
    """The `generate` subcommand's flags."""
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="thresholds file (YAML; see rules/thresholds.example.yaml); defaults if omitted",
    )
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="folder for everything generated: rules, promtool tests, dashboards, manifests "
        f"and {RUNBOOKS_IN_OUT} (default {DEFAULT_OUT}, with the runbooks in "
        f"{DEFAULT_RUNBOOKS})",
    )
    parser.add_argument(
        "--runbooks",
        metavar="FILE",
        help=f"where the runbooks go instead (default DIR/{RUNBOOKS_IN_OUT} with --out, "
        f"else {DEFAULT_RUNBOOKS})",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 if the files on disk differ from what would be written",
    )
    parser.add_argument(
        "--helm-values",
        metavar="FILE",
        help="write only FILE: the thresholds and what they render to, as values for the Helm "
        "chart (helm upgrade -f FILE); nothing else is written",
    )


def output_paths(args: argparse.Namespace) -> tuple[Path, Path]:
    """(the output folder, the runbooks file) the flags name: `--out DIR` keeps everything
    under DIR; no `--out` is the repository's own layout."""
    if args.runbooks:
        runbooks = Path(args.runbooks)
    elif args.out:
        runbooks = Path(args.out) / RUNBOOKS_IN_OUT
    else:
        runbooks = Path(DEFAULT_RUNBOOKS)
    return Path(args.out or DEFAULT_OUT), runbooks


def run(args: argparse.Namespace) -> int:
    """Generate (or check) the outputs; the exit status: 0 ok, 1 stale (--check), 2 bad config."""
    from kube_gpu_exporter.exporter.generate.doc_blocks import planned_docs
    from kube_gpu_exporter.exporter.generate.helm_chart import planned_chart, write_values
    from kube_gpu_exporter.exporter.generate.outputs import check, planned_files, write
    from kube_gpu_exporter.exporter.input_errors import InputError
    from kube_gpu_exporter.exporter.output_paths import (
        check_output_dir,
        check_output_file,
        file_errors,
    )
    from kube_gpu_exporter.rules.config import load_config
    from kube_gpu_exporter.rules.xid_actions import xid_warnings

    try:
        cfg = load_config(args.config)
        for line in xid_warnings(cfg):  # overrides of NVIDIA's Xid catalog: allowed, never unseen
            print(f"{PROG}: warning: {line}", file=sys.stderr)
        if args.helm_values:  # that file alone (helm_chart.py)
            for line in (stale := write_values(cfg, args.helm_values, args.check)):
                print(f"{PROG}: {line}", file=sys.stderr)
            return EXIT_STALE if stale else 0
        out_dir, runbooks = output_paths(args)
        if not args.check:  # before rendering, so a bad path fails at once and writes nothing
            check_output_dir(out_dir, "--out")
            check_output_file(runbooks, "--runbooks")
        planned = planned_files(cfg, out_dir, runbooks)
        if not args.out:  # this repository's layout: its docs' generated figures too
            with file_errors("read"):
                planned.update(planned_docs(cfg, Path(".")))
            planned.update(planned_chart(cfg, Path(".")))  # charts/: helm_chart.py
        if args.check:
            with file_errors("read"):
                problems = check(planned, out_dir)
        else:
            with file_errors("write"):
                write(planned, out_dir)
            return 0
    except InputError as exc:  # the thresholds file (ConfigError) or an output path
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for line in problems:
        print(f"{PROG}: {line}", file=sys.stderr)
    if problems:
        print(f"{PROG}: generated files are stale; run `{PROG} generate`", file=sys.stderr)
        return EXIT_STALE
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run `generate` on its own (`python -m kube_gpu_exporter.exporter.generate.command`)."""
    parser = argparse.ArgumentParser(prog=f"{PROG} generate", description=WHERE)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
