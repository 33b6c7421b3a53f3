"""The value types of the thresholds file and the parsers behind them: Prometheus durations,
label matchers, Kubernetes quantities and names, byte sizes.

Each type validates as the file is read, so a bad value fails `generate` with one line naming
the key; the parsers (`duration_seconds`, `parse_matchers`, `quantity_value`) then read
already-valid values for the generators.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from kube_gpu_exporter.exporter.units import parse_size
from kube_gpu_exporter.rules.settings import go_regexp
from kube_gpu_exporter.rules.settings.promql_string import unquote


class FrozenModel(BaseModel):
    """Every section of the file: unknown keys are errors (a typo must not silently leave a
    default in place) and the validated config cannot be changed by its readers."""

    model_config = ConfigDict(extra="forbid", frozen=True)


# --- durations -----------------------------------------------------------------------------------

_DURATION = re.compile(r"^(0|(\d+y)?(\d+w)?(\d+d)?(\d+h)?(\d+m)?(\d+s)?(\d+ms)?)$")
_DURATION_SECONDS = {"y": 365 * 86400, "w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1}


def _check_duration(value: str) -> str:
    if not value or not _DURATION.fullmatch(value):
        raise ValueError("must be a non-negative Prometheus duration such as 30m or 1h30m")
    return value


def duration_seconds(value: str) -> float:
    """`1h30m` → 5400.0 (the value is already validated)."""
    seconds = 0.0
    for number, unit in re.findall(r"(\d+)(ms|[ywdhms])", value):
        seconds += int(number) * (0.001 if unit == "ms" else _DURATION_SECONDS[unit])
    return seconds


def _check_positive_duration(value: str) -> str:
    if duration_seconds(value) <= 0:
        raise ValueError("must be a positive Prometheus duration such as 30s")
    return value


# --- label matchers ------------------------------------------------------------------------------

# PromQL's spaces are these four (a form feed or a no-break space between matchers fails the
# rule file), and a comma only separates: the queries append their own matchers after it.
_SPACE = r"[ \t\n\r]*"
_MATCHER = re.compile(
    rf"{_SPACE}([a-zA-Z_][a-zA-Z0-9_]*){_SPACE}(=~|=){_SPACE}"
    r'"((?:[^"\\]|\\.)*)"'
    rf"{_SPACE}(,(?!{_SPACE}\Z)|\Z)"
)


def parse_matchers(text: str) -> list[tuple[str, str, str]]:
    """`job="a", env=~"p.*"` → [("job", "=", "a"), ("env", "=~", "p.*")]; [] if not matchers.
    Values are as written, escapes and all: they go into queries and test series verbatim.

    Only `=` and `=~` are accepted: the generated promtool tests must be able to build input
    series that the selector selects, which needs a value for every matched label.
    """
    out: list[tuple[str, str, str]] = []
    pos = 0
    while pos < len(text):
        match = _MATCHER.match(text, pos)
        if not match:
            return []
        out.append((match.group(1), match.group(2), match.group(3)))
        pos = match.end()
    return out


def check_matcher(name: str, op: str, value: str) -> None:
    """Raise ValueError, naming the matcher, for anything in `name<op>"value"` that would make
    Prometheus refuse the rules: the metric name set twice, a string PromQL cannot read, a
    regex that Go's regexp refuses (go_regexp.py: the real RE2 engine and Go's differences)."""
    if name == "__name__":
        raise ValueError("must not match on __name__: every query names its metric itself")
    try:
        unquoted = unquote(value)
    except ValueError as exc:
        raise ValueError(f"the value of {name}{op} {exc}") from None
    if op == "=~" and (refused := go_regexp.problem(unquoted)):
        raise ValueError(f"the regex of {name}=~ {refused}")


def selector_labels(matchers: str) -> dict[str, str]:
    """Labels that a series needs to be selected by `matchers`: the value of each `=`, the
    first alternative of each `=~` (which must be a plain word, and so matches the regex: it
    is a whole branch of its top-level alternation). The generated promtool tests build their
    input series with these."""
    labels: dict[str, str] = {}
    for name, op, value in parse_matchers(matchers):
        check_matcher(name, op, value)
        if op == "=":
            labels[name] = value
            continue
        first = value.split("|")[0]
        if not re.fullmatch(r"[A-Za-z0-9_.:/-]+", first):
            raise ValueError(f"the regex of {name}=~ must start with a plain alternative")
        labels[name] = first
    return labels


def _check_matchers(value: str) -> str:
    if not parse_matchers(value):
        raise ValueError(
            'must be label matchers separated by commas, such as job="kube-gpu-exporter"'
        )
    selector_labels(value)
    return value


# --- Kubernetes quantities -----------------------------------------------------------------------

# A Kubernetes resource quantity in the forms people write: 50m, 0.5, 96Mi, 1G (no exponents).
_QUANTITY = re.compile(r"^(?P<number>\d+(\.\d+)?)(?P<suffix>m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_QUANTITY_FACTORS = {
    None: 1, "m": 0.001, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
    "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50, "Ei": 1 << 60,
}  # fmt: skip


def quantity_value(value: str) -> float:
    """`96Mi` → 100663296.0, `50m` → 0.05 (the value is already validated)."""
    match = _QUANTITY.fullmatch(value)
    assert match, value
    return float(match["number"]) * _QUANTITY_FACTORS[match["suffix"]]


def _check_quantity(value: str) -> str:
    if not _QUANTITY.fullmatch(value) or quantity_value(value) <= 0:
        raise ValueError("must be a positive Kubernetes quantity such as 50m, 0.5, 96Mi or 1Gi")
    return value


def _number_to_str(value: Any) -> Any:
    """`cpu: 1` and `cpu: 0.5` in YAML are numbers; Kubernetes takes them as quantities."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return value


def _size(value: Any) -> Any:
    return parse_size(value) if isinstance(value, str) else value


# --- the types -----------------------------------------------------------------------------------

_LABEL_NAME = r"^[a-zA-Z_][a-zA-Z0-9_]*$"
# A label key or taint key: an optional DNS-subdomain prefix and a name of up to 63 characters.
QUALIFIED_NAME = (
    r"([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
)

Duration = Annotated[str, AfterValidator(_check_duration)]
PositiveDuration = Annotated[Duration, AfterValidator(_check_positive_duration)]
Ratio = Annotated[float, Field(strict=True, gt=0, lt=1)]
LabelName = Annotated[str, Field(pattern=_LABEL_NAME)]


def _routing_labels(value: dict[str, str]) -> dict[str, str]:
    reserved = sorted({"alertname", "severity"} & value.keys())
    if reserved:
        name = reserved[0]
        raise ValueError(f"{name}: is the alert's own label (got {value[name]!r})")
    return value


# Extra labels an alert carries for routing (team, channel, ...): names Prometheus accepts,
# never the alert's own alertname or severity.
AlertLabels = Annotated[dict[LabelName, str], AfterValidator(_routing_labels)]
Matchers = Annotated[str, AfterValidator(_check_matchers)]
Severity = Literal["critical", "warning", "info"]


def one_of(allowed: tuple[str, ...]) -> Callable[[str], str]:
    """A validator for a string setting that must be one of `allowed` (a label's values from
    the catalog, which a `Literal` cannot be written from)."""

    def check(value: str) -> str:
        if value not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}")
        return value

    return check


Bytes = Annotated[int, BeforeValidator(_size), Field(ge=0)]
Xid = Annotated[int, Field(strict=True, gt=0)]
K8sName = Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")]
QualifiedName = Annotated[str, Field(pattern=rf"^{QUALIFIED_NAME}$")]
LabelValue = Annotated[
    str, Field(max_length=63, pattern=r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
]
Quantity = Annotated[str, BeforeValidator(_number_to_str), AfterValidator(_check_quantity)]
