"""A selector that `generate` accepts is one Prometheus accepts, and one it refuses is refused
in one line: held against Debian's promtool, the judge of the rules file.

The listed cases each end in exit 2 and one line naming the key and the problem, and promtool
refuses each of them too. The fuzz test builds selector regexes from fragments, valid and not
(RE2's and Go's differences, PromQL's string escapes, the separators between matchers), runs
each through the CLI, and checks with one promtool run over all of them that `generate` accepts
a selector exactly when promtool accepts the rules file it writes with it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from inprocess_cli import assert_one_line, offline_cli, run_cli

from kube_gpu_exporter.rules.alerts import alert_groups
from kube_gpu_exporter.rules.config import Config, load_config
from kube_gpu_exporter.rules.recording import recording_groups
from kube_gpu_exporter.rules.render import rules_file
from support import exporter_command

PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(
    PROMTOOL is None, reason="Debian's promtool (make test installs it)"
)

# (the exporter selector as the file's value, what the one line says about it)
REFUSED = [
    ('job=~"kube|(?#note)"', "the regex of job=~ is not valid: invalid perl operator: (?#"),
    ('job=~"kube|x\\\\Z"', "the regex of job=~ is not valid: invalid escape sequence: \\Z"),
    ('job=~"kube|(?(1)a|b)"', "the regex of job=~ is not valid: invalid perl operator: (?("),
    (
        'job=~"a|b{99999999999}"',
        "the regex of job=~ is not valid: invalid repeat count {99999999999}",
    ),
    (
        'job=~"a|b{1,99999999999}"',
        "the regex of job=~ is not valid: invalid repeat count {1,99999999999}",
    ),
    ('job=~"kube|x{1001}"', "the regex of job=~ is not valid: invalid repetition size: {1001}"),
    ('job=~"kube|\\\\C"', "the regex of job=~ uses \\C"),
    ('job=~"kube|(?<n>x)"', "the regex of job=~ uses (?<name>…)"),
    ('job=~"kube|\\\\p{Kawi}"', "the regex of job=~ uses \\p{Kawi}"),
    ('job=~"kube|[\\\\p{Tangsa}]"', "the regex of job=~ uses \\p{Tangsa}"),
    ('job=~"kube|\\\\Qx"', "the regex of job=~ is not valid: missing ): ^(?:kube|\\Qx)$"),
    ('job=~"kube|x)|(y"', "the regex of job=~ is not valid: unexpected ): kube|x)|(y"),
    ('job=~"kube|x**"', "the regex of job=~ is not valid: bad repetition operator: **"),
    ('job=~"kube|(k)\\\\1"', "the regex of job=~ is not valid: invalid escape sequence: \\1"),
    ('job=~"kube|(?P=n)"', "the regex of job=~ is not valid: invalid perl operator: (?P"),
    ('job=~"kube|\\\\e"', "the regex of job=~ is not valid: invalid escape sequence: \\e"),
    ('job=~"kube|\\xff"', "the regex of job=~ is not valid: invalid UTF-8"),
    (
        'job=~"kube|(' + "(" * 999 + "x" + ")" * 1000 + '"',
        "the regex of job=~ nests groups 1000 deep",
    ),
    ('job=~"kube|(?:' + "x" * 3400 + '){1000}"', "the regex of job=~ is too large for Go's regexp"),
    ('job=~"kube|\\d"', "the value of job=~ has an unknown escape sequence \\d"),
    ('job=~"kube|(' + "x" * 3000 + '"', "the regex of job=~ is not valid: missing ): kube|(xxx"),
    ('job=~"a|b{' + "9" * 5000 + '}"', "the regex of job=~ is not valid: invalid repeat count"),
    ('job="kube\\q"', "the value of job= has an unknown escape sequence \\q"),
    ('job="kube\\400"', "the value of job= has an escape sequence past the code points: \\400"),
    ('job="kube\\x4"', "the value of job= has an escape sequence that is cut short: \\x4"),
    ('job="kube\nx"', "the value of job= has a line break inside its quotes"),
    ('job="kube",', "must be label matchers separated by commas"),
    ('job="kube"\f', "must be label matchers separated by commas"),
    ('__name__="up", job="kube"', "must not match on __name__"),
]
# Accepted, and so by promtool: Go reads `a{,3}` as the text "a{,3}", as RE2 does.
ACCEPTED = [
    'job=~"kube|a{,3}"',
    'job=~"kube|\\\\p{Greek}\\\\pN(?P<n>x)"',
    'job=~"kube|(?i:x)[[:alpha:]]{2,5}\\\\Q.*\\\\E"',
    'job=~"kube|\\\\x{263a}\\u00e9"',
    'job=~"kube|(?:' + "x" * 1000 + '){1000}"',
    'job="kube\\"x\\\\"',
]


@pytest.fixture(autouse=True)
def _offline() -> Iterator[None]:
    with offline_cli(render=False):
        yield


def thresholds(folder: Path, selector: str) -> Path:
    path = folder / "t.yaml"
    path.write_text(yaml.safe_dump({"selectors": {"exporter": selector}}))
    return path


def generate(folder: Path, config: Path) -> tuple[int, str]:
    return run_cli(["generate", "--config", config, "--out", folder / "out"])


def rules_text(cfg: Config) -> str:
    """rules.yaml as `generate` writes it (outputs.render_outputs), without the dashboards."""
    return rules_file(cfg, (*recording_groups(cfg), *alert_groups(cfg)))


def selecting(selector: str) -> str:
    """A rules file that selects with `selector` as every generated query does: alone between
    {}, and followed by the query's own matchers."""
    rules = [
        {"record": "selected", "expr": f"up{{{selector}}}"},
        {"record": "selected_with_more", "expr": f'up{{{selector}, instance="a"}}'},
    ]
    return yaml.safe_dump({"groups": [{"name": "g", "rules": rules}]}, allow_unicode=True)


def promtool_accepts(files: list[Path]) -> dict[Path, bool]:
    """One `promtool check rules` over all `files`: which it accepts."""
    assert PROMTOOL
    result = subprocess.run(
        [PROMTOOL, "check", "rules", *map(str, files)],
        capture_output=True,
        text=True,
        errors="backslashreplace",
        timeout=120,
        check=False,
    )
    passed = set(re.findall(r"^Checking (.+)\n  SUCCESS: ", result.stdout, re.MULTILINE))
    return {path: str(path) in passed for path in files}


@pytest.mark.parametrize(("selector", "expected"), REFUSED)
def test_a_selector_prometheus_refuses_is_one_line(
    tmp_path: Path, selector: str, expected: str
) -> None:
    config = thresholds(tmp_path, selector)
    line = assert_one_line(*generate(tmp_path, config))
    assert f"{config}: selectors.exporter: {expected}" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("selector", ACCEPTED)
def test_a_selector_prometheus_accepts_is_accepted(tmp_path: Path, selector: str) -> None:
    status, stderr = generate(tmp_path, thresholds(tmp_path, selector))
    assert status == 0, stderr


def test_the_cli_process_refuses_and_writes_what_promtool_accepts(tmp_path: Path) -> None:
    """The installed command, as a process: a refused selector is one line and exit 2; an
    accepted one writes a rules.yaml that promtool accepts."""
    refused = subprocess.run(
        exporter_command(
            "generate", "--config", str(thresholds(tmp_path, 'job=~"a|b{99999999999}"')),
            "--out", str(tmp_path / "refused"),
        ),
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
    assert "invalid repeat count {99999999999}" in refused.stderr
    assert not (tmp_path / "refused").exists()
    out = tmp_path / "accepted"
    accepted = subprocess.run(
        exporter_command(
            "generate", "--config", str(thresholds(tmp_path, 'job=~"kube|a{,3}|\\\\pN"')),
            "--out", str(out),
        ),
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert accepted.returncode == 0, accepted.stderr
    assert 'job=~"kube|a{,3}|\\\\pN"' in (out / "rules.yaml").read_text()
    assert promtool_accepts([out / "rules.yaml"]) == {out / "rules.yaml": True}


def test_promtool_agrees_with_the_listed_cases(tmp_path: Path) -> None:
    """The cases above are promtool's verdicts, not ours: a rule selecting with each refused
    selector fails `promtool check rules`, and one with each accepted selector passes."""
    files = {}
    for i, selector in enumerate([s for s, _ in REFUSED] + ACCEPTED):
        path = tmp_path / f"rules-{i}.yaml"
        path.write_text(selecting(selector))
        files[path] = selector
    verdicts = promtool_accepts(list(files))
    wrong = [s for path, s in files.items() if verdicts[path] != (s in ACCEPTED)]
    assert not wrong, wrong


# Pieces of regexes. Each of the first on its own is a regex Prometheus accepts (though not
# every sequence of them is); the second are what RE2 or Go refuses, or RE2 alone accepts,
# PromQL's string escapes and breaks; the third what may follow the matcher.
FRAGMENTS = [
    *("kube", "a", "-", ".", ".*", "x+", "y?", "z*?", "[a-z]", "[^a]", "[]a]", "[[:alpha:]]"),
    *("\\d", "\\w", "\\S", "\\b", "\\pN", "\\p{Greek}", "\\PL", "\\p{^Latin}", "(?i)"),
    *("(?s:.)", "(?P<n>x)", "(?P<1>x)", "x{2}", "x{1,3}", "{,3}", "x{2,}", "{01}", "x{1000}"),
    *("\\Q.*\\E", "^", "$", "\\A", "\\z", "\\x41", "\\x{263a}", "\\101", "é", "|", "\\."),
    *("[\\d-z]", "\\-", "\\\\", '"', "\t", "(a|b)", "(?:c)", "x{0}"),
]
REFUSED_FRAGMENTS = [
    *("(", ")", "(?:", "*", "+", "?", "{1001}", "{99999999999}", "x{1,99999999999}", "\\Q"),
    *("\\E", "\\Z", "(?#c)", "(?(1)a|b)", "\\C", "(?<n>x)", "\\p{Kawi}", "\\p{Cn}", "(?=a)"),
    *("(?<=a)", "(?>a)", "(?P=n)", "\\1", "\\8", "\\e", "\\h", "\\G", "*+", "**", "[z-a]"),
    *("[", "]", "[]", "\\", "\\x", "\\x{110000}", "(?x)", "(?i-:a)", "\\N{x}", "\\u00e9"),
    *("[[:foo:]]", "\\xff", "\\377", "\\400", "\\ud800", "\n", "\\n", "{2}{3}"),
]
AFTER = ["", ', env="x"', ' ,\n env=~"prod|p.*"', '\r\n,instance="a"']
REFUSED_AFTER = [",", "\f", ', __name__="up"', "\xa0"]


def promql_quoted(regex: str) -> str:
    """A regex as a PromQL string's body: its backslashes and quotes escaped."""
    return regex.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


# Weighted to keep both verdicts common: six refused pieces in seven come from the first list.
PIECE = st.sampled_from(FRAGMENTS * 6 + REFUSED_FRAGMENTS)
SELECTORS = st.builds(
    lambda pieces, escape, after: (
        f'job=~"kube-gpu-exporter|{(promql_quoted if escape else str)("".join(pieces))}"{after}'
    ),
    st.lists(PIECE, min_size=1, max_size=4),
    st.sampled_from([True, True, True, False]),  # escaped for PromQL, or pasted as written
    st.sampled_from(AFTER * 6 + REFUSED_AFTER),
)


def test_generate_accepts_a_selector_exactly_when_promtool_does(tmp_path: Path) -> None:
    """Each example through the CLI (exit 0, or exit 2 and one line); then one promtool run
    over a rules file per example: the one generate writes where it accepted the selector,
    rules selecting with it as the generated queries do where it refused."""
    seen: dict[str, bool] = {}

    @settings(
        max_examples=150,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(selector=SELECTORS)
    def run(selector: str) -> None:
        if selector in seen:
            return
        config = thresholds(tmp_path, selector)
        status, stderr = generate(tmp_path, config)
        if status != 0:
            assert_one_line(status, stderr, "selectors.exporter: ")
        seen[selector] = status == 0

    run()
    files = {}
    for i, (selector, accepted) in enumerate(seen.items()):
        path = tmp_path / f"rules-{i}.yaml"
        if accepted:
            path.write_text(rules_text(load_config(thresholds(tmp_path, selector))))
        else:
            path.write_text(selecting(selector))
        files[path] = selector
    verdicts = promtool_accepts(list(files))
    wrong = [(s, seen[s], verdicts[path]) for path, s in files.items() if verdicts[path] != seen[s]]
    assert not wrong, f"(selector, generate accepts, promtool accepts): {wrong}"
    # Both verdicts occur, so the fuzz tests the boundary rather than one side of it.
    assert 0.2 < sum(seen.values()) / len(seen) < 0.8, sum(seen.values())
