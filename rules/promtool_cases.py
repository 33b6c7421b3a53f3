"""The promtool case model: input series, the alerts expected at each check, and the test fleet
that every alert's cases are written against.

Each alert's spec (rules/alerts/) writes one `Case`: series for devices (or nodes) that must
fire and for ones that must not, and checks once while the condition has not yet held for the
alert's `for` (nothing fires) and once after (exactly the expected alerts fire). Values derive
from the alert's settings — half of an idle threshold, midway between a memory threshold and
full — so a changed thresholds file still produces tests that pass against the rules it
produces. rules/promtool_tests.py turns the cases into the promtool file.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.rules.promql import Query
from kube_gpu_exporter.rules.settings.values import duration_seconds, selector_labels
from kube_gpu_exporter.rules.settings.view import ConfigView

Labels = Mapping[str, str]


@dataclass(frozen=True, slots=True)
class Series:
    metric: str
    labels: Labels
    values: str

    def notation(self) -> str:
        inner = ", ".join(f'{k}="{v}"' for k, v in sorted(self.labels.items()))
        return f"{self.metric}{{{inner}}}"


@dataclass(frozen=True, slots=True)
class Firing:
    labels: Labels  # the alert's labels besides alertname and severity
    value: float  # $value, for the description
    rows: tuple[Labels, ...] = ()  # what the description's `with query` block returns


@dataclass(frozen=True, slots=True)
class Check:
    minute: int
    firing: tuple[Firing, ...]


@dataclass(frozen=True, slots=True)
class Case:
    series: tuple[Series, ...]
    checks: tuple[Check, ...]


def minutes(duration: str) -> int:
    return math.ceil(duration_seconds(duration) / 60)


def steady(value: float, samples: int) -> str:
    """`value` at every minute for `samples` + 1 samples."""
    return f"{value!r}+0x{samples}"


def later(first_minute: int, value_series: str) -> str:
    """Nothing before `first_minute`, then `value_series`."""
    return f"_x{first_minute} {value_series}" if first_minute else value_series


def uuid(node: str, gpu: int) -> str:
    return f"GPU-{node}-{gpu:04d}"


class World:
    """Label sets of the test fleet: nodes `node-a`…, GPUs by index, pods by name."""

    def __init__(self, cfg: ConfigView) -> None:
        self.q = Query(cfg)
        self.base = selector_labels(cfg.selectors.exporter)
        self.view_base = selector_labels(cfg.selectors.cluster_view)
        self.scope = {cfg.labels.cluster: "test-cluster"} if cfg.labels.cluster else {}

    def node(self, name: str) -> dict[str, str]:
        """Series labels of an exporter target."""
        return {**self.base, **self.scope, self.q.node_label: f"node-{name}:19400"}

    def node_out(self, name: str) -> dict[str, str]:
        """Labels of an alert aggregated per node."""
        return {**self.scope, self.q.node_label: f"node-{name}:19400"}

    def view(self, **labels: str) -> dict[str, str]:
        """Series labels of the cluster view's target, plus `labels`."""
        return {**self.view_base, **self.scope, **labels}

    def view_out(self, **labels: str) -> dict[str, str]:
        """Labels of an alert on the cluster view's series (aggregated: no job)."""
        return {**self.scope, **labels}

    def dev(self, node: str, gpu: int, **extra: str) -> dict[str, str]:
        return {**self.node(node), "gpu": str(gpu), "uuid": uuid(node, gpu), **extra}

    def dev_out(self, node: str, gpu: int, **extra: str) -> dict[str, str]:
        return {**self.node_out(node), "gpu": str(gpu), "uuid": uuid(node, gpu), **extra}

    def held_out(
        self, node: str, gpu: int, namespace: str, pod: str, **owner: str
    ) -> dict[str, str]:
        """Labels of a device alert on a GPU one pod holds (`Query.with_holder`): the pod, its
        owner where given, and its `workload` as the workload alerts name it."""
        workload = owner.get("owner_name", pod)
        return self.dev_out(node, gpu, namespace=namespace, pod=pod, workload=workload, **owner)

    def pod(self, node: str, gpu: int, namespace: str, pod: str) -> dict[str, str]:
        return self.dev(node, gpu, namespace=namespace, pod=pod, container="main")

    def alloc(self, node: str, gpu: int, namespace: str, pod: str, sharing: str) -> Series:
        labels = self.pod(node, gpu, namespace, pod) | {
            "resource": "nvidia.com/gpu",
            "sharing": sharing,
        }
        return Series(c.ALLOCATION_INFO.name, labels, "1+0x200")


def s(metric: c.Metric, labels: Labels, values: str) -> Series:
    return Series(metric.name, labels, values)


# --- boundaries ----------------------------------------------------------------------------------
# A case whose series sit comfortably past a threshold, checked minutes after `for`, passes
# against a rule with the wrong threshold, `>=` for `>` or a `for` a minute off. Cases probe the
# edges instead: a series exactly at the threshold, one just past it, and checks on both sides
# of `for` (tests/integration/test_rules_mutation.py proves each of those slips fails them).

BOUNDARY = 0.01  # how far past a threshold a probe sits, relative to it


def just_over(threshold: float) -> float:
    """1 % over `threshold` (0.01 over 0): fires under `> threshold`, and no longer once the
    threshold rises by more than that. Its partner sits exactly at the threshold, which `>`
    leaves silent and `>=` does not."""
    return threshold + (abs(threshold) * BOUNDARY or BOUNDARY)


def just_under(threshold: float) -> float:
    """1 % under `threshold`: silent under `>= threshold`, firing once it drops by more."""
    return threshold - (abs(threshold) * BOUNDARY or BOUNDARY)


def bursts(size: float, first: int, every: int, n: int, last: int | None = None) -> str:
    """A counter at 0 that rises by `size` at minute `first` and every `every` minutes after
    (up to minute `last`, where given), for n + 1 samples: `increase()` over a window of
    `every` minutes is exactly `size` from `first` on (Prometheus 2's range holds a sample at
    both ends, so nothing is extrapolated): a case can put a counter's rise exactly on a
    threshold. A whole number is written as one (`3`, not `3.0`), whether the threshold came
    as an int or a float."""
    end = n if last is None else last
    values = (size * max(0, (min(m, end) - first) // every + 1) for m in range(n + 1))
    return " ".join(f"{v:.0f}" if float(v).is_integer() else repr(float(v)) for v in values)


def last_burst(first: int, every: int, held: int) -> int:
    """The minute of the last of `bursts(…, first, every, …)` a condition needs to hold for
    `held` minutes from `first`: each burst counts for a window of `every` minutes."""
    return first + held // every * every


def window_ends(
    burst: int, window: str, firing: tuple[Firing, ...], after: tuple[Firing, ...] = ()
) -> tuple[Check, Check]:
    """Checks on the far edge of the window after a burst at minute `burst`: `firing` at its
    last minute (on both Prometheus generations, which a left-open range alone does not
    give), `after` the minute after, when the burst is out of the window on both."""
    last = burst + minutes(window) - 1
    return Check(last, firing), Check(last + 1, after)


def ramp(size: float, full: int, window: int, n: int) -> str:
    """A counter at 0 that rises steadily by `size` per `window` minutes, reaching `size` at
    minute `full` (so from `full - window`), for n + 1 samples: `increase()` over `window` is
    `size` from minute `full` on, on both Prometheus generations. Bursts cannot do that:
    Prometheus 2's closed range [t - window, t] holds one interval more of aligned samples
    than Prometheus 3's left-open one, so a burst in that interval counts on one only. While
    the window still holds the counter's 0 neither extrapolates (the increase is exactly the
    counter); after, Prometheus 3 extrapolates the steady rise to the same `size`, up to the
    last bit (the rule rounds that off: promql.settled)."""
    start = full - window
    values = (size * max(0, m - start) / window for m in range(n + 1))
    return " ".join(f"{v:.0f}" if float(v).is_integer() else repr(float(v)) for v in values)


def ramp_over(size: float, full: int, window: int, threshold: float) -> int:
    """The first minute `ramp(size, full, window, …)`'s increase is over `threshold`."""
    return full - window + math.floor(window * threshold / size) + 1


def edges(for_: str, firing: tuple[Firing, ...], start: int = 0) -> tuple[Check, ...]:
    """Checks on both edges of `for` for a condition true from minute `start`: nothing at the
    last minute before the alert may fire, exactly `firing` at the first minute `for` has
    held. A `for` one evaluation shorter fires at the first check; one longer misses the
    second (which a check two minutes late would let pass)."""
    held = minutes(for_)
    before = (Check(start + held - 1, ()),) if start + held else ()
    return (*before, Check(start + held, firing))


def edges_from(for_: str, firing: tuple[Firing, ...], start: int) -> tuple[Check, ...]:
    """`edges` for a condition that starts at minute `start` (a counter's first rise, a value
    raised), with a check the minute before it too: nothing may fire before the rise."""
    before = (Check(start - 1, ()),) if minutes(for_) else ()  # else `edges` checks it
    return (*before, *edges(for_, firing, start))
