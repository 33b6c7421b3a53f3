"""The figures and lists in the repository's docs that follow from the code, rewritten by
`generate` (and compared by `generate --check`) like deploy/.

A hand-kept "23 alerts" in the README went stale as alerts were added; so did the list of
`collection_errors_total` kinds in docs/metrics.md. The fleet cost table (series and bytes per
reading group) is counted in bodies the real code renders. Each such figure now sits between two
markers, `<!-- generate:NAME -->` and `<!-- /generate:NAME -->`, and is rendered here from the
same rule groups deploy/ is rendered from and from the catalog. Only the text between the
markers is rewritten; a file without markers is left alone, so running `generate` in a folder
that is not this repository touches no README.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable, Mapping
from pathlib import Path

from kube_gpu_exporter.exporter.catalog.errors import (
    COLLECTION_ERROR_KINDS,
    KUBERNETES_ERROR_KINDS,
    NODE_HEALTH_ERROR_KINDS,
    NVML_ERROR_KINDS,
    POD_RESOURCES_ERROR_KINDS,
    STALLED_ERROR_KIND,
    SYSFS_ERROR_KIND,
)
from kube_gpu_exporter.exporter.input_errors import InputError
from kube_gpu_exporter.rules.alerts import alert_groups
from kube_gpu_exporter.rules.config import Config
from kube_gpu_exporter.rules.model import AlertRule
from kube_gpu_exporter.rules.recording import recording_groups
from kube_gpu_exporter.rules.xid_actions import xid_table

# The docs that carry blocks, relative to the folder `generate` writes deploy/ in.
DOC_FILES = ("README.md", "docs/metrics.md", "docs/troubleshooting.md", "docs/xid-catalog.md")
BLOCK = re.compile(r"(<!-- generate:([a-z-]+) -->)(.*?)(<!-- /generate:\2 -->)", re.DOTALL)
WIDTH = 100


class UnknownBlock(InputError):
    """A marker names a block this module does not render (one line, exit 2)."""


def _rule_counts(cfg: Config) -> str:
    alerts = sum(len(group.rules) for group in alert_groups(cfg))
    records = sum(len(group.rules) for group in recording_groups(cfg))
    return f"{alerts} alerts, {records} recording rules"


def _alert_groups(cfg: Config) -> str:
    """One nested list item per deployed rule group, its alerts in render order, wrapped as
    the README's list item continues (two spaces, four after the first line)."""
    lines = []
    for group in alert_groups(cfg):
        names = ", ".join(rule.name for rule in group.rules if isinstance(rule, AlertRule))
        lines += textwrap.wrap(
            f"- `{group.name}`: {names}",
            WIDTH,
            initial_indent="  ",
            subsequent_indent="    ",
            break_on_hyphens=False,
        )
    return "\n" + "\n".join(lines) + "\n  "


def _kinds(kinds: tuple[str, ...], prefix: str = "") -> str:
    return ", ".join(f"`{prefix}{kind}`" for kind in kinds)


def _nvml_codes(kind: str) -> str:
    return ", ".join(
        str(code) for code in sorted(NVML_ERROR_KINDS) if NVML_ERROR_KINDS[code] == kind
    )


def _error_kinds(_: Config) -> str:
    """A table of every `kind` of kube_gpu_exporter_collection_errors_total: what counts it
    and when the series exists. The kinds come from the catalog; the prefixes are those the
    attribution source adds (a test scrapes the exporter and compares)."""
    rows = [("`init`", "NVML could not start (no library, no driver), or every device or a "
                       "node-wide call answered a session-level code; retried with backoff",
             "always")]  # fmt: skip
    for kind in dict.fromkeys(NVML_ERROR_KINDS.values()):
        when = f"a reading failed with NVML return code {_nvml_codes(kind)}; that reading is absent"
        if kind == "session":
            when += " while NVML answers the rest (`init` when every device answers one)"
        rows.append((f"`{kind}`", when, "always"))
    rows += [
        (
            f"`{STALLED_ERROR_KIND}`",
            "a cycle stuck in an NVML call past `--collector.stall-timeout`, once per stall",
            "always",
        ),
        ("`other`", "a reading failed with any other NVML code, or a cycle raised", "always"),
        (
            f"`{SYSFS_ERROR_KIND}`",
            "the PCI device list under `--path.sysfs` could not be read",
            "while that reading is on",
        ),
        (
            _kinds(POD_RESOURCES_ERROR_KINDS, "pod_resources_"),
            "a call to the kubelet's pod-resources API failed: socket missing, refused or not "
            "permitted; `--kubelet.timeout` passed; an answer over the size limit; rate limited; "
            "`GetAllocatableResources` alone refused for another reason than an old kubelet's "
            "(the advertised counts are then absent); anything else",
            "while attribution is on",
        ),
        (
            _kinds(KUBERNETES_ERROR_KINDS, "kubernetes_"),
            "the list or watch of this node's pods failed: 410 Gone, a 5xx or 429, a timeout, "
            "no connection, anything else (a 403 is `other`)",
            "with `--kubernetes.enabled`",
        ),
        (
            _kinds(KUBERNETES_ERROR_KINDS, "kubernetes_resourceslices_"),
            "the same for the node's DRA ResourceSlices",
            "with `--kubernetes.enabled`",
        ),
        (
            _kinds(NODE_HEALTH_ERROR_KINDS, "node_health_"),
            "a read or write of the exporter's own Node (its `GPUHealthy` condition, its taint) "
            "failed: refused by RBAC (403), no such Node, the taints changed under every retry "
            "(409), a 5xx or 429, a timeout, no connection, anything else; logged when it "
            "begins, retried with backoff (docs/gpu-health.md)",
            "with `--health.node-conditions` or `--health.node-taint`",
        ),
    ]
    listed = {kind.strip("`") for kinds, _, _ in rows for kind in kinds.split(", ")}
    missing = set(COLLECTION_ERROR_KINDS) - listed
    if missing:  # a new kind of the collection loop needs its row above
        raise UnknownBlock(f"collection error kinds without a row: {sorted(missing)}")
    table = ["| kind | counted when | present (from 0) |", "|---|---|---|"]
    table += [f"| {kinds} | {when} | {present} |" for kinds, when, present in rows]
    return "\n" + "\n".join(table) + "\n"


def _fleet_cost(cfg: Config) -> str:
    """Series and bytes of the fleet, counted in real renders (fleet_cost.py)."""
    from kube_gpu_exporter.exporter.generate.fleet_cost import fleet_table

    return fleet_table(cfg)


RENDERERS: Mapping[str, Callable[[Config], str]] = {
    "rule-counts": _rule_counts,
    "alert-groups": _alert_groups,
    "collection-error-kinds": _error_kinds,
    "fleet-cost": _fleet_cost,
    "xid-catalog": xid_table,
}


def rewrite(text: str, cfg: Config) -> str:
    """`text` with every marked block rendered anew; raises UnknownBlock for a name no
    renderer has."""

    def render(match: re.Match[str]) -> str:
        name = match.group(2)
        if name not in RENDERERS:
            raise UnknownBlock(f"no such generated block: {name!r} (known: {', '.join(RENDERERS)})")
        return match.group(1) + RENDERERS[name](cfg) + match.group(4)

    return BLOCK.sub(render, text)


def planned_docs(cfg: Config, root: Path) -> dict[Path, str]:
    """The docs under `root` that carry blocks, with their blocks rendered."""
    planned = {}
    for name in DOC_FILES:
        path = root / name
        if path.is_file():
            try:
                text = path.read_text(encoding="utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(f"{path}: not UTF-8 ({exc.reason})") from None
            if BLOCK.search(text):
                planned[path] = rewrite(text, cfg)
    return planned
