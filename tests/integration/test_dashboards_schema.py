"""Every generated dashboard is an instance of Grafana's own `Dashboard` type.

`@grafana/schema` publishes the dashboard JSON model as TypeScript types, the ones Grafana's
code reads dashboards with. Each dashboard is written as a typed constant,
`export const d: DashboardJson = {…}`, and `tsc --strict --noEmit` checks them all in
one run: a required key missing (a link's `tooltip`), a wrong shape (`current: {}`), a key the
type does not know (an object literal is checked for extra keys) or a value outside an enum
fails, naming the dashboard, the line of its JSON and the compiler's message. `DashboardJson`
(tests/dashboard_schema/dashboard_json.ts) is `Dashboard` with string enums read as the
strings a JSON file holds.

The committed dashboards are checked, and the three built with a cluster label, whose
`cluster` variable is a query instead of a constant. The pinned packages live outside the
checkout (`make npm-deps`, which `make test` runs); without them the test fails and says so.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from kube_gpu_exporter.grafana.dashboards import build_all
from kube_gpu_exporter.grafana.render import dashboard_json
from kube_gpu_exporter.rules.config import parse_config

REPO = Path(__file__).resolve().parents[2]
FOLDER = REPO / "deploy" / "dashboards"
PINS = REPO / "tests" / "dashboard_schema"
INSTALL = "make npm-deps"  # npm ci of tests/dashboard_schema/package-lock.json into npm_dir()
HEADER = 'import type { DashboardJson } from "./dashboard_json"; export const d: DashboardJson ='
ERROR = re.compile(r"^(?P<file>d\d+)\.ts\((?P<line>\d+),(?P<col>\d+)\): (?P<message>.*)$")


def npm_dir() -> Path:
    """Where `make npm-deps` installs: $NPM_DIR, else the user's cache folder."""
    if os.environ.get("NPM_DIR"):
        return Path(os.environ["NPM_DIR"])
    cache_home = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache_home) / "kube-gpu-exporter" / "npm"


def dashboards() -> dict[str, str]:
    """Every dashboard JSON to check, by a name that says where it comes from."""
    out = {f"deploy/dashboards/{p.name}": p.read_text() for p in sorted(FOLDER.glob("*.json"))}
    with_cluster = parse_config("labels: {cluster: k8s_cluster}")
    for dashboard in build_all(with_cluster):
        out[f"{dashboard.uid} with labels.cluster"] = dashboard_json(dashboard)
    return out


DASHBOARDS = dashboards()


def toolchain() -> Path:
    """The installed packages, at the versions the committed lock pins; else fail loudly."""
    folder = npm_dir()
    node = shutil.which("node")
    tsc = folder / "node_modules" / "typescript" / "bin" / "tsc"
    installed = folder / "package-lock.json"
    pinned = (PINS / "package-lock.json").read_text()
    if not node or not tsc.is_file() or not installed.is_file():
        pytest.fail(
            f"@grafana/schema and typescript are not installed in {folder}: run `{INSTALL}`"
        )
    if installed.read_text() != pinned:
        pytest.fail(f"{folder} holds other versions than {PINS}/package-lock.json: run `{INSTALL}`")
    return folder


KEY = re.compile(r'^"((?:[^"\\]|\\.)*)":')


def json_path(text: str, line: int) -> str:
    """Where in the dashboard line `line` (1-based) of its indented JSON lies, as
    `panels[3] ("Lost GPUs").fieldConfig.defaults`: read from the indentation json.dumps
    writes, naming a panel or variable by its title or name."""
    document = json.loads(text)
    stack: list[tuple[str, list[int]]] = []  # (the step into a container, its item count)
    step = ""
    for number, raw in enumerate(text.splitlines()[:line], start=1):
        stripped = raw.strip()
        if stripped[:1] in "}]":
            stack.pop()
            continue
        if stack and stack[-1][1]:  # inside an array: the item's index
            counter = stack[-1][1]
            step = f"[{counter[0]}]"
            counter[0] += 1
        else:
            key = KEY.match(stripped)
            step = "." + json.loads('"' + key.group(1) + '"') if key else ""
        opens = stripped.rstrip(",")[-1:] in "{[" and number < line
        if opens:
            stack.append((step, [0] if stripped.endswith("[") else []))
    steps = [s for s, _ in stack if s] + ([step] if step else [])
    out, node = "", document
    for s in steps:
        if s.startswith("["):
            node = node[int(s[1:-1])]
            label = node.get("title") or node.get("name") if isinstance(node, dict) else None
            out += f"{s} ({json.dumps(label)})" if label else s
        else:
            node = node[s[1:]] if isinstance(node, dict) and s[1:] in node else None
            out += s
    return out.lstrip(".") or "the dashboard"


def typecheck(named: dict[str, str]) -> dict[str, list[str]]:
    """Per dashboard (name → JSON text), tsc's errors, each with the line of the JSON it
    points at; one tsc run for all."""
    folder = toolchain()
    errors: dict[str, list[str]] = {name: [] for name in named}
    with tempfile.TemporaryDirectory(prefix="dashboard-schema-") as tmp:
        work = Path(tmp)
        shutil.copy(PINS / "dashboard_json.ts", work)
        files = {}
        for i, (name, text) in enumerate(named.items()):
            # The JSON starts on the first line: a line tsc names is that line of the JSON.
            (work / f"d{i}.ts").write_text(f"{HEADER} {text.rstrip()};\n")
            files[f"d{i}"] = name
        config = {
            "compilerOptions": {
                "strict": True,
                "noEmit": True,
                "skipLibCheck": True,
                "target": "es2022",
                "module": "esnext",
                "moduleResolution": "bundler",
                "types": [],
                "paths": {"@grafana/schema": [str(folder / "node_modules/@grafana/schema")]},
            },
            "files": ["dashboard_json.ts", *(f"{stem}.ts" for stem in files)],
        }
        (work / "tsconfig.json").write_text(json.dumps(config, indent=2))
        tsc = folder / "node_modules" / "typescript" / "bin" / "tsc"
        result = subprocess.run(
            ["node", str(tsc), "-p", "tsconfig.json", "--pretty", "false"],
            cwd=work,
            capture_output=True,
            text=True,
            timeout=300,
        )
    others = []
    for line in result.stdout.splitlines():
        match = ERROR.match(line)
        if match and match["file"] in files:
            name = files[match["file"]]
            where = json_path(named[name], int(match["line"]))
            errors[name].append(f"line {match['line']}, {where}:\n    {match['message']}")
        elif line.strip() and not line.startswith(" "):
            others.append(line)
    # Errors outside the dashboards (the helper type, the package not found) mean a broken
    # check, which must not pass for a clean one.
    assert not others, "\n".join(others)
    assert result.returncode == 0 or any(errors.values()), result.stdout + result.stderr
    return errors


@cache
def compile_errors() -> dict[str, list[str]]:
    return typecheck(DASHBOARDS)


@pytest.mark.parametrize("name", DASHBOARDS)
def test_dashboard_is_a_grafana_schema_dashboard(name: str) -> None:
    errors = compile_errors()[name]
    assert not errors, f"{name} is not a @grafana/schema Dashboard:\n" + "\n".join(errors)


def test_dashboards_are_at_the_schema_version_of_the_type() -> None:
    """Grafana migrates a dashboard below its current schemaVersion on every load; ours are
    already in the current form, so they say so."""
    folder = toolchain()
    entry = folder / "node_modules" / "@grafana" / "schema" / "dist" / "esm" / "index.mjs"
    script = (
        f"import {{ defaultDashboard }} from {json.dumps(str(entry))};"
        "console.log(defaultDashboard.schemaVersion)"
    )
    result = subprocess.run(
        ["node", "--input-type=module", "-e", script], capture_output=True, text=True, check=True
    )
    current = int(result.stdout)
    versions = {name: json.loads(text)["schemaVersion"] for name, text in DASHBOARDS.items()}
    assert versions == dict.fromkeys(DASHBOARDS, current)


def _broken(change: Callable[[dict[str, Any]], object]) -> str:
    dashboard = json.loads(DASHBOARDS["deploy/dashboards/kube-gpu-node.json"])
    change(dashboard)
    return json.dumps(dashboard, indent=2)


def test_the_check_catches_what_grafana_would_not_read() -> None:
    """The check itself: each defect alone, deep in a real dashboard, is named; the string
    enums pass as the strings JSON holds."""
    link = {
        "title": "x",
        "type": "dashboards",
        "tags": [],
        "asDropdown": True,
        "includeVars": True,
        "keepTime": True,
        "icon": "external link",
        "targetBlank": False,
    }
    stat = {
        "type": "stat",
        "id": 1,
        "fieldConfig": {
            "overrides": [],
            "defaults": {
                "color": {"mode": "thresholds"},
                "thresholds": {"mode": "absolute", "steps": [{"color": "green", "value": None}]},
                "mappings": [{"type": "value", "options": {"0": {"text": "none", "index": 0}}}],
            },
        },
    }
    cases = {
        "valid": json.dumps({"schemaVersion": 42, "links": [link | {"tooltip": ""}],
                             "panels": [stat]}),
        "unknown key": _broken(lambda d: d["panels"][3].update(colour="red")),
        "link without tooltip": _broken(lambda d: d.update(links=[link])),
        "empty current": _broken(lambda d: d["templating"]["list"][2].update(current={})),
        "enum": _broken(lambda d: d["panels"][3]["fieldConfig"]["defaults"]["thresholds"]
                        .update(mode="absolut")),
        "numeric enum": _broken(lambda d: d["templating"]["list"][2].update(hide=7)),
    }  # fmt: skip
    errors = typecheck(cases)
    assert errors.pop("valid") == []
    expected = {
        "unknown key": "'\"colour\"' does not exist",
        "link without tooltip": "Property 'tooltip' is missing",
        "empty current": "missing the following properties",
        "enum": "'\"absolut\"' is not assignable",
        "numeric enum": "'7' is not assignable",
    }
    for case, text in expected.items():
        assert any(text in e for e in errors[case]), (case, errors[case])
