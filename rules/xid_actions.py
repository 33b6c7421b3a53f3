"""Where a thresholds file's Xid lists contradict NVIDIA's Xid catalog: `generate`'s warnings.

Each Xid alert stands for one action of the catalog, and its `xids` default to the catalog's
codes for that action; moving a code to another alert's list is how a thresholds file overrides
its action. That is allowed (a fleet may know better), but it should never happen unseen: each
code listed by an alert of another action than the catalog's, listed twice, or unknown to the
catalog is named on stderr, and generation goes on.
"""

from __future__ import annotations

from typing import Any

from kube_gpu_exporter.exporter.catalog.xid import BY_CODE, XIDS, ActionClass
from kube_gpu_exporter.rules.settings.view import ConfigView

# Each Xid alert and the action it stands for.
ALERT_ACTIONS: dict[str, ActionClass] = {
    "GPUXidApplicationErrors": "restart_app",
    "GPUXidErrors": "reset_gpu",
    "GPUXidRebootRequired": "reboot",
    "GPUXidWorkflow": "workflow",
    "GPUXidInvestigate": "investigate",
}
ACTION_ALERTS: dict[ActionClass, str] = {v: k for k, v in ALERT_ACTIONS.items()}


def _catalog_says(code: int) -> str:
    x = BY_CODE[code]
    action = x.immediate_action
    extra = f", {x.investigatory_action}" if x.investigatory_action else ""
    alert = ACTION_ALERTS.get(x.action) if x.action else None
    where = f" ({alert} by default)" if alert else " (no alert by default)"
    return f"{action}{extra}{where}"


def xid_warnings(cfg: ConfigView) -> list[str]:
    """One line per code of an enabled Xid alert's list that the catalog gives another action,
    that the catalog does not know, or that another enabled Xid alert lists too."""
    lines: list[str] = []
    seen: dict[int, str] = {}
    for name, action in ALERT_ACTIONS.items():
        settings: Any = getattr(cfg.alerts, name)
        if not settings.enabled:
            continue
        for code in settings.xids:
            key = f"alerts.{name}.xids: Xid {code}"
            if code in seen:
                lines.append(f"{key}: also listed by {seen[code]}")
            seen.setdefault(code, name)
            if code not in BY_CODE:
                lines.append(f"{key}: not in NVIDIA's Xid catalog as this version records it")
            elif BY_CODE[code].action != action:
                lines.append(f"{key}: NVIDIA's Xid catalog says {_catalog_says(code)}")
    return lines


def xid_table(cfg: ConfigView) -> str:
    """The docs' table of every code of the catalog: what the catalog says, and which enabled
    alert of `cfg` watches it (the defaults: the catalog's own), as markdown."""
    watchers: dict[int, list[str]] = {}
    for name in ALERT_ACTIONS:
        settings: Any = getattr(cfg.alerts, name)
        for code in settings.xids if settings.enabled else ():
            watchers.setdefault(code, []).append(name)
    rows = [
        "| Xid | mnemonic | immediate action | investigatory action | if it recurs | alert "
        "| meaning |",
        "|---|---|---|---|---|---|---|",
    ]
    for x in XIDS:
        cells = (
            str(x.code),
            x.mnemonic or "—",
            x.immediate_action,
            x.investigatory_action or "—",
            x.investigator or "—",
            ", ".join(watchers.get(x.code, ())) or "none",
            x.meaning or x.name or "—",
        )
        rows.append("| " + " | ".join(cells) + " |")
    return "\n" + "\n".join(rows) + "\n"
