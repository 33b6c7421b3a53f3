"""Which kubeconfig files a command reads and which of their contexts it uses, as kubectl
chooses: `--kubeconfig FILE` is that one file, $KUBECONFIG a list of files merged in order
(kubeconfig.py merges them), and `--context NAME` replaces their current-context.

`serve` and `cluster` take the pair as `--kubernetes.kubeconfig` and `--kubernetes.context`;
both flags write one `Kubeconfig` into `args.kubeconfig`, so the watches that hand it to
`api_client` take one value whichever flags were given. Loads only argparse and dataclasses,
so that `serve --help` loads nothing of the client.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class Kubeconfig:
    """`files` in kubectl's order (the first to name a cluster, user or context wins) and the
    context to use instead of their current-context (None: theirs)."""

    files: tuple[str, ...]
    context: str | None = None

    @property
    def source(self) -> str:
        """How messages name the whole configuration: `kubeconfig a.yaml:b.yaml`."""
        return f"kubeconfig {os.pathsep.join(self.files)}".rstrip()


def kubeconfig_of(kubeconfig: str | Kubeconfig) -> Kubeconfig:
    """A path is the one file of `--kubeconfig FILE`, with its own current-context."""
    return Kubeconfig((kubeconfig,)) if isinstance(kubeconfig, str) else kubeconfig


def add_flags(parser: argparse._ActionsContainer) -> None:
    """`--kubernetes.kubeconfig` and `--kubernetes.context` for the exporters (in-cluster
    config, the pod's service account, when neither is given)."""
    parser.add_argument(
        "--kubernetes.kubeconfig",
        dest="kubeconfig",
        action=_Part,
        const="files",
        metavar="FILE",
        help="kubeconfig to use instead of the in-cluster service account",
    )
    parser.add_argument(
        "--kubernetes.context",
        dest="kubeconfig",
        action=_Part,
        const="context",
        metavar="NAME",
        help="the kubeconfig context to use (default: its current-context)",
    )


class _Part(argparse.Action):
    """Sets its part (`const`: the files, or the context) of the one `Kubeconfig` both flags
    share, whichever comes first."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        value = str(values)
        current = getattr(namespace, self.dest, None) or Kubeconfig(())
        part: dict[str, Any] = {"files": (value,)} if self.const == "files" else {"context": value}
        setattr(namespace, self.dest, replace(current, **part))
