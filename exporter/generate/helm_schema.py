"""The chart's values.schema.json: the thresholds it holds, as the thresholds file's own pydantic
models (`Config.model_json_schema()`), and the chart's own keys (chart_keys.py), so that Helm
refuses an unknown key, a wrong type or a value out of range with a message naming it, and the
schema cannot drift from what `generate` accepts. Kubernetes structures passed through
(affinity, securityContext) are typed as objects and left to the API server.

Written as draft-07 (`definitions`, not 2020-12's `$defs`): Helm up to 3.17 validates with
gojsonschema, which knows drafts 4 to 7, and later Helm (santhosh-tekuri/jsonschema) reads
draft-07 too. What a JSON Schema cannot say (a duration's syntax, a PromQL matcher, requests
within limits) `generate` checks; the chart refuses thresholds that `generate` has not turned
into `rendered` values, so a value the schema lets through still has to pass `generate`.
"""

from __future__ import annotations

import json
from typing import Any, Final

from kube_gpu_exporter.exporter.generate.chart_keys import chart_schema
from kube_gpu_exporter.exporter.generate.helm_values import RENDERED, THRESHOLD_KEYS
from kube_gpu_exporter.rules.config import Config

DRAFT: Final = "http://json-schema.org/draft-07/schema#"
# What pydantic writes unchanged when a constraint follows a BeforeValidator (Bytes' ge=0),
# by the JSON Schema keyword that says it.
_RAW_CONSTRAINTS: Final = {
    "ge": "minimum",
    "gt": "exclusiveMinimum",
    "le": "maximum",
    "lt": "exclusiveMaximum",
}
# Keywords that draft-07 validators do not know: their constraint would silently not hold.
_NEWER_KEYWORDS: Final = frozenset(
    {"prefixItems", "unevaluatedProperties", "unevaluatedItems", "dependentSchemas", "$anchor"}
)

# Keywords whose value maps names to schemas, and keywords whose value is data.
_SCHEMA_MAPS: Final = frozenset({"properties", "patternProperties", "definitions"})
_DATA: Final = frozenset({"default", "enum", "const", "examples", "required"})

_CHART_PROPERTIES: Final = {
    RENDERED: {
        "description": "What `kube-gpu-exporter generate --helm-values FILE` computed from the "
        "thresholds: leave it to that command; {} means the chart's own, for the defaults.",
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "version": {"type": "string"},
            "thresholds": {"type": "object"},
            "files": {"type": "object", "additionalProperties": {"type": "string"}},
            "scrape": {"type": "object"},
        },
    },
    # The thresholds file's image keys, which the chart's values once were: still read, below
    # image.*, so that `--set deployment.image.tag=...` keeps working.
    "deployment": {
        "description": "Deprecated: image.repository and image.tag.",
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "image": {
                "type": "object",
                "additionalProperties": False,
                "properties": {"repository": {"type": "string"}, "tag": {"type": "string"}},
            }
        },
    },
    "global": {"description": "Helm's values shared with a parent chart.", "type": "object"},
}


def values_schema() -> dict[str, Any]:
    """The schema of the chart's values: the thresholds file's keys and the chart's own."""
    schema = Config.model_json_schema(ref_template="#/definitions/{model}")
    definitions = schema.pop("$defs", {})
    thresholds = schema["properties"]
    schema["properties"] = {key: thresholds[key] for key in THRESHOLD_KEYS}
    schema["properties"] |= chart_schema() | _CHART_PROPERTIES
    schema["description"] = (
        "The chart's values: thresholds (snake_case, the thresholds file's keys) and the "
        "chart's own keys (camelCase)."
    )
    used = _referenced(schema["properties"], definitions)
    definitions = {name: definitions[name] for name in sorted(used)}
    fixed: dict[str, Any] = _fixed({"$schema": DRAFT, **schema, "definitions": definitions})
    return fixed


def _referenced(node: Any, definitions: dict[str, Any]) -> set[str]:
    """The definitions `node` refers to, directly or through others: only those are written
    (the thresholds file's `deployment:` models are not the chart's)."""
    found: set[str] = set()
    pending = [node]
    while pending:
        item = pending.pop()
        if isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, dict):
            ref = item.get("$ref", "")
            name = ref.removeprefix("#/definitions/") if isinstance(ref, str) else ""
            if name and name not in found:
                found.add(name)
                pending.append(definitions[name])
            pending.extend(v for k, v in item.items() if k not in ("default", "examples"))
    return found


def schema_text() -> str:
    return json.dumps(values_schema(), indent=2, ensure_ascii=False) + "\n"


def _fixed(node: Any) -> Any:
    """Each schema as JSON Schema says what pydantic meant: a raw constraint by its keyword, and
    a mapping whose keys have a pattern closed to other keys (pydantic refuses a key that does
    not match; `patternProperties` alone would let it through). Property names and defaults
    are data, left as they are."""
    if isinstance(node, list):
        return [_fixed(item) for item in node]
    if not isinstance(node, dict):
        return node
    if found := _NEWER_KEYWORDS & node.keys():
        raise ValueError(f"values schema: draft-07 has no {sorted(found)}")
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _SCHEMA_MAPS:
            out[key] = {name: _fixed(schema) for name, schema in value.items()}
        elif key in _DATA:
            out[key] = value
        else:
            out[_RAW_CONSTRAINTS.get(key) or key] = _fixed(value)
    if "patternProperties" in out and "properties" not in out:
        out.setdefault("additionalProperties", False)
    return out
