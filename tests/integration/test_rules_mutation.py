"""Mutation test of the generated promtool tests: do they notice a rule that is slightly wrong?

For each enabled alert the generated rules file is changed one way at a time — a threshold from
the alert's settings nudged 2 % up or down, a comparison turned into its strict/non-strict twin
(`>` ↔ `>=`, `<` ↔ `<=`), the `for` one minute shorter or longer — and promtool runs that
alert's generated tests, unchanged, against it. Every such mutant must fail them ("killed"). A
surviving mutant is a rule that could ship wrong without a test noticing: its cases sit
comfortably past the threshold instead of on it, or check the alert minutes after `for` has
passed instead of at its edge. These are the mistakes a rule's author makes (`>` for `>=`, a
threshold off by a little, a `for` off by a minute), so the cases must pin each of them down.

Thresholds are found, not listed: every numeric setting of an alert other than those in
NOT_THRESHOLDS (a Duration one counts in seconds, as the rules write it) is located after a
comparison, in the formats rules/promql.py writes numbers in, in the alert's expression or in a
recording rule it reads (GPUAllocatedIdle compares in its idle series). The textual nudge must
equal the rules rendered from the nudged setting, which proves that the literal mutated is that
setting and not, say, the `0` of `== 0`. Comparisons are mutated in the spec's expression and
built into the rule as the spec builds it, so one written once and repeated by the build (the
two arms of `Query.with_holder`) changes everywhere at once, as an author's slip would. The
cases probe 1 % past a threshold (rules/promtool_cases.py: just_over, just_under) and both
edges of `for` (edges), inside the 2 % and the minute mutated here.

Each mutant runs only its alert's test group, against the generated rules file cut down to the
alert and the recording rules it reads (nothing else can change the alert's result, and
promtool evaluating every rule over every mutant's timeline took minutes); that cut-down file
first passes the group unmutated. Mutants run in a small thread pool of promtool processes.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import pytest
import yaml

from kube_gpu_exporter.rules import promtool_tests  # its tests_file is no pytest test
from kube_gpu_exporter.rules.alert_text import AlertText
from kube_gpu_exporter.rules.alerts import BY_NAME, alert_groups
from kube_gpu_exporter.rules.config import Config, parse_config
from kube_gpu_exporter.rules.model import AlertRule
from kube_gpu_exporter.rules.promql import Query, fmt_bytes, fmt_number
from kube_gpu_exporter.rules.recording import recording_groups
from kube_gpu_exporter.rules.render import dump_yaml, rules_file
from kube_gpu_exporter.rules.settings.alert import AlertSettings
from kube_gpu_exporter.rules.settings.values import duration_seconds
from kube_gpu_exporter.rules.spec import AlertSpec
from prometheus_server import Generation

NUDGE = 0.02  # relative; the cases' boundary probes sit 1 % past a threshold
# Durations that shape the alert rather than bound a value: `for` is mutated on its own;
# `window` (the range of an increase or rate) and `keep_firing_for` (how long a resolved
# condition keeps firing) are not thresholds and are left alone.
NOT_THRESHOLDS = frozenset({"for_", "window", "keep_firing_for"})
_DURATION = re.compile(r"^(0|(\d+(ms|[ywdhms]))+)$")
# A literal in a comparison: `> 85`, `>= 0.25`, `== 1`.
_COMPARED = r"(?:[<>]=?|[=!]=)\s*"
# String literals (skipped: a label value may hold `<`) and the four comparison operators.
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[<>]=?')
_TWIN = {">": ">=", ">=": ">", "<": "<=", "<=": "<"}
WORKERS = min(4, os.cpu_count() or 2)

# Thresholds and `for` values unlike the defaults, on a multi-cluster setup: a case that only
# works for the default numbers fails here.
UNLIKE_DEFAULTS = """
selectors:
  exporter: 'job=~"gpu-exporter|kube-gpu-exporter", env="prod"'
  cluster_view: 'job="gpu-scheduling", env="prod"'

labels: {node: node, cluster: cluster}
alerts:
  GPUAllocatedIdle: {threshold: 0.25, for: 45m}
  GPUMemoryNearFull: {threshold: 0.5, for: 0m}
  GPUMemoryLeaked: {threshold: 3GiB, for: 2m}
  GPUTemperatureHigh: {threshold: 90.5, for: 90s}
  GPUThermalThrottling: {duty: 0.4, window: 10m, for: 3m}
  GPUHardwareSlowdown: {for: 0s}
  GPUPowerBrake: {for: 2m}
  GPUXidErrors: {window: 1h, for: 5m, xids: [79]}
  GPUXidApplicationErrors: {window: 20m, for: 1m}
  GPUEccUncorrectable: {window: 3m, for: 2m}
  GPULost: {for: 0m}
  GPURowRemapPending: {for: 0m}
  GPUPcieReplayErrors: {threshold: 100, window: 5m, for: 1m}
  GPUNotAdvertised: {for: 2m}
  GPUDriverVersionMismatch: {for: 0m}
  KubeGpuExporterDown: {for: 0m}
  KubeGpuExporterAbsent: {for: 3m}
  KubeGpuExporterStale: {threshold: 45s, for: 0m}
  GPUPodPendingTooLong: {threshold: 2h, for: 0m, ignore_reasons: [gated, awaiting_preemption]}
  GPUFragmentation: {for: 7m}
  GPUQuotaExhausted: {threshold: 5, window: 30m, for: 2m}
  GPUPreemptionRate: {threshold: 10, window: 2h, for: 3m, reasons: [preempted, evicted]}
  KubeGpuWorkloadPendingTooLong: {threshold: 3h, for: 0m}
  KubeGpuFlavorCannotFit: {for: 7m}
  KubeGpuQueueQuotaExhaustedWhileIdle: {idle_gpus: 2, for: 4m}
"""
CONFIGS = {"defaults": "", "unlike-defaults": UNLIKE_DEFAULTS}

# Mutants no series can tell from the rule, each with the reason; matched on the alert and the
# start of the mutation's description, so a new mutant of the same alert still counts.
UNDECIDABLE: dict[tuple[str, str], str] = {
    ("GPUMemoryFillingUp", "comparison 1/2 `<` → `<=`"): (
        "the time to full is headroom over a regression slope: no series puts it exactly on "
        "the horizon in floating point (the case probes 1 % inside and outside it instead)"
    ),
}


def undecidable(alert: str, change: str) -> bool:
    return any(alert == a and change.startswith(prefix) for a, prefix in UNDECIDABLE)


RuleKey = tuple[int, int]  # (group, rule) position in the rules file


@dataclass(frozen=True, slots=True)
class Mutant:
    alert: str
    change: str  # what was mutated, as the report names it
    exprs: Mapping[RuleKey, str]  # the rules whose expression changes, and to what
    for_: str  # the alert's `for`


@dataclass(frozen=True, slots=True)
class Threshold:
    field: str
    number: float  # as the expression compares it (a Duration in seconds)
    kind: Literal["int", "float", "duration"]


def thresholds(settings: AlertSettings) -> list[Threshold]:
    """The alert's numeric settings other than those in NOT_THRESHOLDS."""
    found = []
    for name in type(settings).model_fields:
        value = getattr(settings, name)
        if name in NOT_THRESHOLDS or isinstance(value, bool):
            continue
        if isinstance(value, int):
            found.append(Threshold(name, value, "int"))
        elif isinstance(value, float):
            found.append(Threshold(name, value, "float"))
        elif isinstance(value, str) and _DURATION.fullmatch(value):
            found.append(Threshold(name, duration_seconds(value), "duration"))
    return found


def nudged(t: Threshold, up: bool) -> tuple[object, float] | None:
    """(the setting's nudged value, the number the expression then compares with); None for a
    duration nudged below zero, which no thresholds file can write."""
    sign = 1 if up else -1
    if t.kind == "int":
        number = t.number + sign * max(1, round(abs(t.number) * NUDGE))
        return int(number), number
    number = t.number + sign * (abs(t.number) * NUDGE or NUDGE)
    if t.kind == "float":
        return number, number
    if number < 0:
        return None
    ms = round(number * 1000)
    return f"{ms}ms", ms / 1000


def rule_exprs(cfg: Config) -> dict[RuleKey, tuple[str, str]]:
    """(name, expression) of every rule, by its position in the rules file."""
    groups = (*recording_groups(cfg), *alert_groups(cfg))
    return {
        (g, r): (rule.name if isinstance(rule, AlertRule) else rule.record, rule.expr)
        for g, group in enumerate(groups)
        for r, rule in enumerate(group.rules)
    }


def _with_setting(cfg: Config, alert: str, field: str, value: object) -> Config:
    settings = getattr(cfg.alerts, alert).model_copy(update={field: value})
    return cfg.model_copy(update={"alerts": cfg.alerts.model_copy(update={alert: settings})})


def _forms(t: Threshold) -> list[Callable[[float], str]]:
    """How rules/promql.py (or a plain f-string, for integers) writes the number."""
    forms: list[Callable[[float], str]] = [fmt_number]
    if t.kind == "int":
        forms += [lambda v: str(int(v)), lambda v: fmt_bytes(int(v))]
    return forms


def _located(
    expr: str, t: Threshold, number: float, expected: str
) -> tuple[list[tuple[int, int]], str] | None:
    """Where `expr` compares with the literal of `t` — the occurrence (or, for a threshold
    compared twice, the occurrences) whose replacement by `number` gives `expected` — and the
    replacement, written as the original is."""
    for form in _forms(t):
        old, new = form(t.number), form(number)
        spans = [m.span(1) for m in re.finditer(rf"{_COMPARED}({re.escape(old)})(?![\w.])", expr)]
        for chosen in [*([span] for span in spans), spans]:
            if chosen and _replaced(expr, chosen, new) == expected:
                return chosen, new
    return None


def _replaced(expr: str, spans: list[tuple[int, int]], text: str) -> str:
    for start, end in reversed(spans):
        expr = expr[:start] + text + expr[end:]
    return expr


def threshold_mutants(spec: AlertSpec[Any], cfg: Config, own: RuleKey) -> Iterator[Mutant]:
    """Each threshold nudged up and down where it is compared: in the alert's expression or in
    a recording rule the alert reads (GPUAllocatedIdle's idle series). There, the comparison
    with it also gets its twin, since no mutant of the alert's own expression reaches it."""
    settings = spec.of(cfg)
    for_ = settings.for_
    before = rule_exprs(cfg)
    for t in thresholds(settings):
        show = (lambda v: str(int(v))) if t.kind == "int" else fmt_number
        was = show(t.number)
        for up in (True, False):
            change = nudged(t, up)
            if change is None:
                continue
            value, number = change
            after = rule_exprs(_with_setting(cfg, spec.name, t.field, value))
            changed = {k: e for k, (_, e) in after.items() if e != before[k][1]}
            assert changed, (
                f"{spec.name}: setting {t.field} changes no rule; if it is not a threshold, "
                "add it to NOT_THRESHOLDS with the reason"
            )
            exprs = {}
            for key, expected in changed.items():
                name, expr = before[key]
                located = _located(expr, t, number, expected)
                assert located is not None, (
                    f"{spec.name}: {t.field}={was} is not a literal after a comparison in "
                    f"rule {name}:\n{expr}"
                )
                spans, literal = located
                exprs[key] = _replaced(expr, spans, literal)
                if up and key != own:
                    yield from _comparisons_before(spec.name, name, key, expr, spans, for_)
            where = (
                "" if set(changed) == {own} else f" (in {', '.join(before[k][0] for k in changed)})"
            )
            yield Mutant(spec.name, f"{t.field} {was} → {show(number)}{where}", exprs, for_)


def _comparisons_before(
    alert: str, rule: str, key: RuleKey, expr: str, spans: list[tuple[int, int]], for_: str
) -> Iterator[Mutant]:
    """The comparison before each located threshold literal turned into its twin."""
    for start, _ in spans:
        op = re.search(r"([<>]=?)\s*$", expr[:start])
        if op:
            twin = _TWIN[op.group(1)]
            mutated = expr[: op.start(1)] + twin + expr[op.end(1) :]
            change = f"`{op.group(1)}` → `{twin}` before the threshold in {rule}"
            yield Mutant(alert, change, {key: mutated}, for_)


def comparison_mutants(spec: AlertSpec[Any], cfg: Config, own: RuleKey) -> Iterator[Mutant]:
    """Each comparison the alert's spec writes turned into its strict/non-strict twin. The
    spec's expression is mutated and then built into the rule as `AlertSpec.alert` builds it,
    so a comparison the build repeats (the two arms of `Query.with_holder`) changes in both,
    as an author's slip in the spec would."""
    q = Query(cfg)
    text = spec.rule(spec.of(cfg), q)
    ops = [m for m in _TOKENS.finditer(text.expr) if not m.group().startswith('"')]
    for i, m in enumerate(ops, 1):
        twin = _TWIN[m.group()]
        mutated = AlertText(text.expr[: m.start()] + twin + text.expr[m.end() :], text.description)
        rule = replace(spec, rule=lambda _a, _q, t=mutated: t).alert(q)
        around = " ".join(text.expr[max(0, m.start() - 40) : m.end() + 12].split())
        change = f"comparison {i}/{len(ops)} `{m.group()}` → `{twin}` in `…{around}…`"
        yield Mutant(spec.name, change, {own: rule.expr}, spec.of(cfg).for_)


def _duration(seconds: float) -> str:
    whole = int(seconds)
    return f"{whole // 60}m" if whole % 60 == 0 and whole else f"{whole}s"


def for_mutants(alert: str, for_: str) -> Iterator[Mutant]:
    """The alert's `for` a minute shorter (down to none) and a minute longer."""
    seconds = duration_seconds(for_)
    for other in (max(0.0, seconds - 60) if seconds else None, seconds + 60):
        if other is not None:
            yield Mutant(alert, f"for {for_} → {_duration(other)}", {}, _duration(other))


def mutants(cfg: Config) -> list[Mutant]:
    """Every mutant of every enabled alert in `cfg`."""
    found: list[Mutant] = []
    for key, (name, _) in rule_exprs(cfg).items():
        if name not in BY_NAME:  # a recording rule
            continue
        spec = BY_NAME[name]
        for_ = spec.of(cfg).for_
        found += threshold_mutants(spec, cfg, key)
        found += comparison_mutants(spec, cfg, key)
        found += for_mutants(name, for_)
    return found


def generated(cfg: Config) -> tuple[str, str]:
    """The rules file and its promtool tests, as `generate` writes them."""
    groups = (*recording_groups(cfg), *alert_groups(cfg))
    return rules_file(cfg, groups), promtool_tests.tests_file(cfg, groups, "rules.yaml")


def mutated_rules(rules: dict[str, Any], m: Mutant) -> dict[str, Any]:
    """The rules file with `m` applied, every other rule as generated."""
    groups = []
    for g, group in enumerate(rules["groups"]):
        out = []
        for r, rule in enumerate(group["rules"]):
            rule = {**rule, "expr": m.exprs.get((g, r), rule["expr"])}
            if rule.get("alert") == m.alert:
                rule = {k: v for k, v in rule.items() if k != "for"}
                if duration_seconds(m.for_):
                    rule["for"] = m.for_
            out.append(rule)
        groups.append({**group, "rules": out})
    return {"groups": groups}


def reduced(rules: dict[str, Any], alert: str) -> str:
    """The rules file cut down to `alert` and the recording rules it reads (transitively), in
    their groups and order. Other rules cannot change the alert's result, and promtool
    evaluating every rule over every mutant's timeline is what would make this test slow."""
    records = {r["record"]: r["expr"] for g in rules["groups"] for r in g["rules"] if "record" in r}
    exprs = [r["expr"] for g in rules["groups"] for r in g["rules"] if r.get("alert") == alert]
    needed: set[str] = set()
    while exprs:
        expr = exprs.pop()
        for name, body in records.items():
            if name not in needed and re.search(rf"(?<![\w:]){re.escape(name)}(?![\w:])", expr):
                needed.add(name)
                exprs.append(body)
    groups = [
        {**g, "rules": kept}
        for g in rules["groups"]
        if (kept := [r for r in g["rules"] if r.get("alert") == alert or r.get("record") in needed])
    ]
    return dump_yaml({"groups": groups})


def promtool_test(
    promtool: str, folder: Path, rules: str, tests: dict[str, Any]
) -> subprocess.CompletedProcess[str]:
    """`promtool test rules` on `tests` against `rules`, in a folder of their own."""
    folder.mkdir()
    (folder / "rules.yaml").write_text(rules)
    # The cut-down file keeps some of the groups: promtool refuses an order naming others.
    present = {g["name"] for g in yaml.safe_load(rules)["groups"]}
    order = [name for name in tests.get("group_eval_order", ()) if name in present]
    tests = {**tests, "group_eval_order": order}
    (folder / "tests.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    return subprocess.run(
        [promtool, "test", "rules", "tests.yaml"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def verdict(m: Mutant, result: subprocess.CompletedProcess[str]) -> str | None:
    """None when the alert's tests fail on `m` (killed); otherwise why not."""
    output = result.stdout + result.stderr
    if result.returncode == 0:
        return "survives"
    if f"alertname: {m.alert}, time:" not in output:  # a broken file, not a failed check
        return f"broke the run rather than the tests:\n{output[-1500:]}"
    return None


def test_the_mutants_are_the_slips_they_name() -> None:
    """The mutation machinery itself, on a few alerts whose rules are known: thresholds are
    found in their formats (a float, a Duration in seconds, one compared in a recording rule)
    and only they change; comparisons and `for` get their twins."""
    cfg = Config()
    by_change = {(m.alert, m.change.split(" (")[0]): m for m in mutants(cfg)}
    rules = {name: expr for name, expr in rule_exprs(cfg).values()}
    hot = by_change["GPUTemperatureHigh", "threshold 85 → 86.7"]
    assert list(hot.exprs.values()) == [rules["GPUTemperatureHigh"].replace("> 85", "> 86.7")]
    stale = by_change["KubeGpuExporterStale", "threshold 120 → 117.6"]
    assert list(stale.exprs.values()) == [rules["KubeGpuExporterStale"].replace("> 120", "> 117.6")]
    idle = by_change["GPUAllocatedIdle", "threshold 0.1 → 0.102"]
    (recorded,) = idle.exprs
    assert rule_exprs(cfg)[recorded][0].endswith(":nvidia_gpu_idle_gpus:share")
    (strict,) = [
        m for (a, c), m in by_change.items() if a == "GPUThermalThrottling" and "`>=` → `>`" in c
    ]
    assert list(strict.exprs.values()) == [
        rules["GPUThermalThrottling"].replace(">= 0.25", "> 0.25")
    ]
    assert {c for a, c in by_change if a == "GPULost" and c.startswith("for")} == {
        "for 1m → 0s",
        "for 1m → 2m",
    }


@pytest.mark.parametrize("config", list(CONFIGS))
def test_every_mutant_fails_its_alerts_tests(
    config: str, tmp_path: Path, generation: Generation
) -> None:
    cfg = parse_config(CONFIGS[config])
    rules, tests = generated(cfg)
    rules_doc, tests_doc = yaml.safe_load(rules), yaml.safe_load(tests)
    groups: dict[str, list[dict[str, Any]]] = {}
    for group in tests_doc["tests"]:
        for check in group.get("alert_rule_test", [])[:1]:
            groups.setdefault(check["alertname"], []).append(group)
    found = mutants(cfg)
    assert {m.alert for m in found} == set(groups), "every enabled alert is mutated"
    # Each alert's tests first pass on its rules as generated (cut down as the mutants are).
    unchanged = [Mutant(a, "none", {}, BY_NAME[a].of(cfg).for_) for a in groups]

    def run(item: tuple[int, Mutant]) -> subprocess.CompletedProcess[str]:
        i, m = item
        own = {**tests_doc, "tests": groups[m.alert]}
        rules = reduced(mutated_rules(rules_doc, m), m.alert)
        return promtool_test(generation.promtool, tmp_path / str(i), rules, own)

    with ThreadPoolExecutor(WORKERS) as pool:
        results = list(pool.map(run, enumerate([*unchanged, *found])))
    failing = [r.stdout + r.stderr for r in results[: len(unchanged)] if r.returncode]
    assert not failing, "the generated tests fail on the generated rules:\n" + "\n".join(failing)
    verdicts = {
        (m.alert, m.change): verdict(m, r)
        for m, r in zip(found, results[len(unchanged) :], strict=True)
    }
    broken = [f"{a}: {c}: {v}" for (a, c), v in verdicts.items() if v not in (None, "survives")]
    assert not broken, "\n".join(broken)
    survivors = sorted(k for k, v in verdicts.items() if v == "survives" and not undecidable(*k))
    report = "\n".join(f"  {a}: {c}" for a, c in survivors)
    assert not survivors, f"{len(survivors)} of {len(found)} mutants survive ({config}):\n{report}"
