"""Command line: flags and dispatch only, in the Prometheus exporter style.

`serve` runs the exporter (serve_command.py defines its flags, app.py builds and starts its
parts), `cluster` the cluster view's exporter (cluster_app.py), `generate` writes the rules,
dashboards and manifests (exporter/generate/), `demo` runs the demo stack (demo/), `report`
writes the GPU efficiency report (exporter/report/), `explain` says why a pod waits. This
module sits on top of all of them and loads only the command it runs: a node's `serve` starts
without the generator's, the report's or the cluster view's imports. Every bad input ends in
one line on stderr and exit status 2, never a traceback: an operator reading `kubectl logs`
of a crash-looping pod should see what to fix at once.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Final, NoReturn, Protocol, cast

from kube_gpu_exporter.exporter import __version__, help_text
from kube_gpu_exporter.exporter.input_errors import one_line

EXIT_USAGE = 2
__all__ = ["COMMANDS", "build_parser", "main"]
# What `--help` says above the commands, and below them.
DESCRIPTION = """\
kube-gpu-exporter: a Prometheus exporter for NVIDIA GPUs on Kubernetes. It serves each GPU's
health and usage with the pod that holds it, the cluster's GPU capacity and why GPU pods wait,
and writes the alert rules, dashboards and manifests that go with them.
"""
EPILOG = """\
`kube-gpu-exporter <command> --help` shows what a command does and its flags. Bad input (a flag,
a file, a server that cannot be reached) is one line on stderr and exit status 2.
"""


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", help_text.ParagraphFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        # argparse quotes the value whole ("invalid choice: '<4 MiB>'"): bounded, one line.
        self.exit(EXIT_USAGE, f"{self.prog}: error: {one_line(message)} (see --help)\n")


# Each command's line in the list, in list order. Its flags are defined by its own module,
# loaded only when that command runs (or its --help is asked): `serve` must not pay for the
# report's, the generator's or the cluster view's imports.
COMMANDS: Final[Mapping[str, str]] = {
    "serve": "serve the node's GPU metrics to Prometheus",
    "generate": "write the alert rules, promtool tests, runbooks and dashboards",
    "demo": "run a simulated GPU node with its kubelet, Prometheus and Alertmanager",
    "explain": "say why a GPU pod is Pending, or whether a manifest would schedule",
    "cluster": "serve the cluster's GPU capacity and why GPU pods wait (one replica per cluster)",
    "report": "write a GPU efficiency report over a period from Prometheus (HTML, JSON or CSV)",
}


class Command(Protocol):
    """What the CLI needs of a command's module."""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


def _command(name: str) -> Command:
    """The module of command `name`, imported now (each import spelled out, so the import
    contracts see them)."""
    module: Any
    if name == "serve":
        from kube_gpu_exporter.exporter import serve_command as module
    elif name == "generate":
        from kube_gpu_exporter.exporter.generate import command as module
    elif name == "demo":
        from kube_gpu_exporter.demo import run as module
    elif name == "explain":
        from kube_gpu_exporter.exporter.cluster.explain import command as module
    elif name == "cluster":
        from kube_gpu_exporter.exporter import cluster_app as module
    elif name == "report":
        from kube_gpu_exporter.exporter.report import command as module
    else:
        raise AssertionError(f"unknown command {name}")
    return cast(Command, module)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The CLI's parser with every command's flags, or, given `command`, with that command's
    only (the others listed, without flags: enough for the top-level help and errors)."""
    parser = _Parser(
        prog="kube-gpu-exporter",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=help_text.CommandListFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(
        title="commands", dest="command", metavar="command", required=True, parser_class=_Parser
    )
    for name, line in COMMANDS.items():
        sub = commands.add_parser(name, help=line)
        if command is None or command == name:
            _command(name).add_arguments(sub)
    help_text.open_with_summaries(commands)
    return parser


def _named_command(argv: Sequence[str]) -> str | None:
    """The command `argv` names: its first word that is not an option (the top level has
    only --help and --version); None when there is none or it names no command."""
    word = next((arg for arg in argv if not arg.startswith("-")), None)
    return word if word in COMMANDS else None


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = _named_command(argv)
    args = build_parser(command or "").parse_args(argv)
    if args.command == "serve":
        from kube_gpu_exporter.exporter import app

        return app.serve(args)
    return int(_command(args.command).run(args))


if __name__ == "__main__":
    sys.exit(main())
