"""The flags that say which resources are GPUs and which node labels name a GPU type, shared by
`explain` and the `cluster` mode so the two read a cluster the same way.

`explain` is a person's command and takes them bare (`--gpu-resource`); the `cluster` mode takes
them in the exporter's dotted style (`--cluster.gpu-resource`). Both build their
`ClusterSettings` with `settings_from`.
"""

from __future__ import annotations

import argparse

from kube_gpu_exporter.exporter.cluster.settings import DEFAULT_SETTINGS, ClusterSettings


def add_gpu_flags(parser: argparse.ArgumentParser, prefix: str = "") -> None:
    """`--<prefix>gpu-resource` and `--<prefix>gpu-type-label`, both repeatable."""
    parser.add_argument(
        f"--{prefix}gpu-resource",
        dest="gpu_resources",
        action="append",
        metavar="PATTERN",
        help="extended resource names that are GPUs, as shell patterns; repeatable (default "
        "nvidia.com/gpu, nvidia.com/gpu.shared, nvidia.com/mig-*)",
    )
    parser.add_argument(
        f"--{prefix}gpu-type-label",
        dest="gpu_type_labels",
        action="append",
        default=[],
        metavar="KEY",
        help="a node label whose value names a GPU type, beside nvidia.com/gpu.product and "
        "the other defaults; repeatable",
    )


def settings_from(args: argparse.Namespace) -> ClusterSettings:
    """The settings the flags of `add_gpu_flags` give: the resource patterns replace the
    defaults, the type labels add to them."""
    return ClusterSettings(
        gpu_resources=tuple(args.gpu_resources or DEFAULT_SETTINGS.gpu_resources),
        gpu_type_labels=(*DEFAULT_SETTINGS.gpu_type_labels, *args.gpu_type_labels),
    )
