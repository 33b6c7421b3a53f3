"""What the fleet pays in series: per GPU, per node and per 1,000 GPUs, by reading group, for
the node exporter, the cluster view and the recording rules, and the bytes per device of a
plain body; and the most label names a series can carry. docs/metrics.md's "Fleet cost" block.

Every figure is counted in bodies the real code renders (fleet_renders.py) and in the rule
groups `generate` writes, never typed: a new metric, label or rule changes the table at the
next `generate`, and `generate --check` fails until it is committed. A family belongs to the
reading group of the catalog module that defines it (its source in NVML or elsewhere).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kube_gpu_exporter.exporter.catalog import (
    ALLOCATION_INFO,
    BY_NAME,
    CLOCK_EVENT_ACTIVE,
    HARDWARE_LABELLED_METRICS,
    HARDWARE_VALUE_METRICS,
    NVLINK_ERRORS,
    NVLINK_RECEIVE_BYTES,
    NVLINK_TRANSMIT_BYTES,
    PROFILING_METRICS,
    XID_ERRORS,
    XID_WATCH_START,
    Metric,
    MetricType,
)
from kube_gpu_exporter.exporter.catalog import attribution as attribution_catalog
from kube_gpu_exporter.exporter.catalog import self_monitoring as self_catalog
from kube_gpu_exporter.exporter.generate import fleet_renders as renders
from kube_gpu_exporter.rules.config import Config
from kube_gpu_exporter.rules.model import RecordingRule
from kube_gpu_exporter.rules.promql import Query
from kube_gpu_exporter.rules.recording import recording_groups

FLEET_GPUS = 1000
NODES = FLEET_GPUS // renders.GPUS
MIG_DEVICES = renders.GPUS * (1 + renders.MIG_PER_GPU)  # the GPUs and their instances
MIMIR_MAX_LABEL_NAMES = 30  # Mimir's default max_label_names_per_series
# Label names Prometheus adds to every scraped series of the exporter: `job` and `instance`,
# and the `service` and `endpoint` a ServiceMonitor's targets get; `node` where
# labels.node relabels the node name into it.
TARGET_LABELS = frozenset({"job", "instance", "service", "endpoint", "node"})
# The operator's namespace/pod/container target labels: the generated ServiceMonitor drops
# them, but one of your own may keep them, and a series' own then become `exported_*`.
OPERATOR_POD_LABELS = frozenset({"namespace", "pod", "container"})
# External labels on every series sent on (remote write to Mimir): `cluster`, and
# kube-prometheus-stack's `prometheus` and `prometheus_replica`.
EXTERNAL_LABELS = frozenset({"cluster", "prometheus", "prometheus_replica"})

DEVICE_READINGS = "device readings"
GPM = "GPM profiling"
CLOCK_EVENTS = "clock events"
FIELD_VALUES = "field values"
XID = "Xid"
ATTRIBUTION = "attribution, node capacity"
SELF = "self-monitoring"
DCGM = "dcgm-exporter names"
GROUPS = (DEVICE_READINGS, GPM, CLOCK_EVENTS, FIELD_VALUES, XID, ATTRIBUTION, SELF, DCGM)


def _names(metrics: Iterable[object]) -> frozenset[str]:
    return frozenset(m.name for m in metrics if isinstance(m, Metric))


_BY_GROUP = {
    GPM: _names(PROFILING_METRICS),
    CLOCK_EVENTS: _names((CLOCK_EVENT_ACTIVE,)),
    FIELD_VALUES: _names((*HARDWARE_VALUE_METRICS, *HARDWARE_LABELLED_METRICS)),
    XID: _names((XID_ERRORS, XID_WATCH_START)),
    ATTRIBUTION: _names(vars(attribution_catalog).values()),
    SELF: _names(vars(self_catalog).values()) - {XID_WATCH_START.name},
}


def family_of(sample: str) -> str:
    """The family a sample or HELP/TYPE name belongs to: a catalog name (a histogram's
    `_bucket`, `_sum` and `_count` are its own), or a dcgm-exporter name as it is."""
    if sample in BY_NAME or sample.startswith("DCGM_"):
        return sample
    for suffix in ("_bucket", "_sum", "_count"):
        base = sample.removesuffix(suffix)
        if base in BY_NAME and BY_NAME[base].type is MetricType.HISTOGRAM:
            return base
    raise ValueError(f"a sample of no known family: {sample}")


def group_of(family: str) -> str:
    """The reading group of a node exporter family."""
    if family.startswith("DCGM_"):
        return DCGM
    found = [group for group, names in _BY_GROUP.items() if family in names]
    return found[0] if found else DEVICE_READINGS


@dataclass(frozen=True)
class Cost:
    series: int = 0
    bytes: int = 0

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.series + other.series, self.bytes + other.bytes)


def by_family(body: bytes) -> dict[str, Cost]:
    """Series and bytes (its HELP and TYPE lines included) of each family of a plain body."""
    out: dict[str, Cost] = {}
    for line in body.decode().splitlines():
        is_sample = not line.startswith("#")
        name = line.split()[2] if not is_sample else line.split("{", 1)[0].split(" ", 1)[0]
        family = family_of(name)
        out[family] = out.get(family, Cost()) + Cost(int(is_sample), len(line) + 1)
    return out


def by_group(body: bytes) -> dict[str, Cost]:
    out = {group: Cost() for group in GROUPS}
    for family, cost in by_family(body).items():
        out[group_of(family)] += cost
    return out


def label_names(body: bytes) -> dict[str, frozenset[str]]:
    """The most label names any series of each family carries in a plain body."""
    out: dict[str, frozenset[str]] = {}
    for line in body.decode().splitlines():
        if line.startswith("#") or "{" not in line:
            continue
        name, rest = line.split("{", 1)
        names = frozenset(pair.split("=", 1)[0] for pair in _pairs(rest.rsplit("}", 1)[0]))
        family = family_of(name)
        if len(names) > len(out.get(family, ())):
            out[family] = names
    return out


def _pairs(labels: str) -> list[str]:
    """`a="x,y",b="z"` → ['a="x,y"', 'b="z"']: commas inside quoted values kept."""
    pairs, current, quoted, escaped = [], "", False, False
    for char in labels:
        if char == "," and not quoted:
            pairs.append(current)
            current = ""
            continue
        current += char
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == '"':
            quoted = not quoted
    return [p for p in [*pairs, current] if p]


def as_stored(own: frozenset[str]) -> frozenset[str]:
    """A series' label names once scraped and sent on: its own, the target's, its own
    `namespace`/`pod`/`container` renamed `exported_*` beside the operator's (a
    ServiceMonitor that keeps them), and the external labels."""
    renamed = {f"exported_{name}" for name in own & OPERATOR_POD_LABELS}
    return own | TARGET_LABELS | OPERATOR_POD_LABELS | frozenset(renamed) | EXTERNAL_LABELS


# --- recording rules ------------------------------------------------------------------------


def recorded_per(cfg: Config) -> Counter[str]:
    """How many recording rules record one series per node, per pod's hold on a device, per
    namespace and per cluster, read from their names' level (`level:metric:operations`)."""
    node = Query(cfg).node_label
    per: Counter[str] = Counter()
    for group in recording_groups(cfg):
        for rule in group.rules:
            if not isinstance(rule, RecordingRule):
                raise ValueError(f"an alert among the recording rules: {rule.name}")
            level = rule.record.split(":", 1)[0]
            if level == node:
                per["node"] += 1
            elif level == f"{node}_uuid_namespace_pod":
                per["hold"] += 1
            elif level.split("_", 1)[0] in ("namespace", "cluster"):
                per[level.split("_", 1)[0]] += 1
            else:
                raise ValueError(f"a recording rule of unknown level: {rule.record}")
    return per


# --- the table ------------------------------------------------------------------------------


def _number(value: float) -> str:
    """1,160 or 0.375: thousands separated, fractions to three decimals."""
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.3f}".rstrip("0")


@dataclass(frozen=True)
class Row:
    name: str
    whole: int  # series of one 8-GPU node
    mig: int  # series of one 8 × 7 MIG node
    fleet: int  # series of 1,000 whole GPUs
    fleet_mig: int  # series of 1,000 GPUs in MIG mode
    bytes_whole: float | None = None  # per device
    bytes_mig: float | None = None

    def cells(self) -> list[str]:
        per_gpu = _number(self.whole / renders.GPUS)
        sizes = [
            "—" if b is None else _number(round(b)) for b in (self.bytes_whole, self.bytes_mig)
        ]
        counts = [_number(n) for n in (self.whole, self.mig, self.fleet, self.fleet_mig)]
        return [self.name, per_gpu, *counts, *sizes]


def node_rows(whole: Mapping[str, Cost], mig: Mapping[str, Cost]) -> list[Row]:
    """One row per reading group of the node exporter."""
    rows = []
    for group in GROUPS:
        w, m = whole[group], mig[group]
        rows.append(
            Row(
                group,
                w.series,
                m.series,
                w.series * NODES,
                m.series * NODES,
                w.bytes / renders.GPUS,
                m.bytes / MIG_DEVICES,
            )
        )
    return rows


def _sum(name: str, rows: Iterable[Row], with_bytes: bool = True) -> Row:
    rows = list(rows)

    def total(size: str) -> float | None:
        sizes = [getattr(r, size) for r in rows if getattr(r, size) is not None]
        return sum(sizes) if with_bytes and sizes else None

    def count(size: str) -> int:
        return sum(getattr(r, size) for r in rows)

    return Row(
        name,
        count("whole"),
        count("mig"),
        count("fleet"),
        count("fleet_mig"),
        total("bytes_whole"),
        total("bytes_mig"),
    )


def _series(body: bytes) -> int:
    return sum(cost.series for cost in by_family(body).values())


def fleet_table(cfg: Config) -> str:
    """The doc block: the table, then what it assumes and what it leaves out."""
    bodies = {mig: renders.node_body(mig) for mig in (False, True)}
    groups = {mig: by_group(body) for mig, body in bodies.items()}
    dcgm = {mig: by_group(renders.node_body(mig, dcgm=True))[DCGM] for mig in (False, True)}
    groups[False][DCGM], groups[True][DCGM] = dcgm[False], dcgm[True]
    rows = node_rows(groups[False], groups[True])
    served = [row for row in rows if row.name != DCGM]  # off by default
    exporter = _sum("**node exporter** (dcgm-exporter names off)", served)

    view_body = renders.cluster_body(1)
    one, two = _series(view_body), _series(renders.cluster_body(2))
    view_node, view_fixed = two - one, 2 * one - two
    per_namespace_waits = _series(renders.cluster_body(1, 1)) - one
    view = Row(
        "cluster view (`cluster`)",
        view_node,
        view_node,
        view_node * NODES + view_fixed,
        view_node * NODES + view_fixed,
    )

    per = recorded_per(cfg)
    holds = {mig: by_family(body)[ALLOCATION_INFO.name].series for mig, body in bodies.items()}
    node_records = {mig: per["node"] + per["hold"] * holds[mig] for mig in bodies}
    records = Row(
        "recording rules",
        node_records[False],
        node_records[True],
        node_records[False] * NODES + per["cluster"],
        node_records[True] * NODES + per["cluster"],
    )
    total = _sum("**all** (per namespace: see below)", [exporter, view, records], False)

    header = [
        "reading group",
        "per GPU",
        "8-GPU node",
        "8 × 7 MIG node",
        "1,000 GPUs",
        "1,000 GPUs as MIG",
        "bytes per GPU",
        "bytes per MIG-node device",
    ]
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(r.cells()) + " |" for r in [*rows, exporter, view, records, total]),
    ]
    rendered = [*bodies.values(), *(renders.node_body(m, dcgm=True) for m in bodies), view_body]
    largest = max((len(as_stored(n)), f) for b in rendered for f, n in label_names(b).items())

    links = (NVLINK_ERRORS, NVLINK_RECEIVE_BYTES, NVLINK_TRANSMIT_BYTES)
    families = by_family(bodies[False])
    nvlink = sum(families[m.name].series for m in links if m.name in families)

    def listed(names: frozenset[str]) -> str:
        return ", ".join(f"`{n}`" for n in sorted(names))

    notes = (
        f"Counted on an HGX H100 node ({renders.GPUS} GPUs, {renders.NVLINKS} NVLinks "
        f"each, GPM), whole or each GPU split into {renders.MIG_PER_GPU} MIG instances of "
        f"{renders.MIG_PROFILE}, played by the simulated backend through the collection "
        "loop as the generated DaemonSet runs it (`--kubernetes.enabled`, the PCI bus "
        f"read), every device held by one pod of a Job; {FLEET_GPUS:,} GPUs are {NODES} "
        "such nodes. Bytes: the lines of a plain body (HELP and TYPE included) per device: "
        "a GPU, and on the MIG node a GPU or an instance. The dcgm-exporter names "
        "(`--compat.dcgm-exporter`, classic) are off by default and not in the totals. Of "
        f"the field values, {_number(nvlink / renders.GPUS)} series per GPU are NVLink's "
        "per-link counters (bytes each way, and the error counters of the links nvml.h has "
        "fields for).",
        f"Per namespace, the recording rules add {per['namespace']} series (at most: the "
        "scheduling-wait quantiles only where pods waited) and the cluster view "
        f"{per_namespace_waits} per namespace and GPU resource whose pods it saw scheduled "
        "(the wait histogram), plus one per pending (namespace, resource, product, reason), "
        "two per GPU quota and one per disruption reason seen. An Xid code seen on a GPU adds "
        "one series; none is served at 0 in advance.",
        f"Label names: a series carries its own, Prometheus' target labels "
        f"({listed(TARGET_LABELS)}), the operator's {listed(OPERATOR_POD_LABELS)} with its "
        "own renamed `exported_*` where a ServiceMonitor keeps them (the generated one drops "
        f"them), and the external labels sent on ({listed(EXTERNAL_LABELS)}). The most a served "
        f"series carries is {largest[0]} (`{largest[1]}`), "
        f"{MIMIR_MAX_LABEL_NAMES - largest[0]} under Mimir's default "
        f"`max_label_names_per_series` of {MIMIR_MAX_LABEL_NAMES}: `--kubernetes.pod-labels` "
        f"can add at most {MIMIR_MAX_LABEL_NAMES - largest[0]} keys to it (the recording rules "
        "aggregate them away). tests/unit/test_fleet_cost.py holds every family and every "
        "recording rule's output to the limit.",
    )
    return "\n" + "\n".join(lines) + "\n\n" + "\n\n".join(notes) + "\n"
