"""Bad operator input: the one error type, and one-line messages for bad input files.

Every flag, file or setting the operator must fix raises `InputError`, which the CLI reports
as one line with exit status 2. pyyaml's and pydantic's own messages span several lines and
quote their internals; an operator needs the key (or line), what is wrong, and the value
given, on one line — `yaml_problem` and `validation_problem` make that line for scenarios,
thresholds and the web config.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import yaml

if TYPE_CHECKING:  # pydantic is loaded only by the files that validate with it
    from pydantic import ValidationError


class InputError(ValueError):
    """A flag, file or setting the operator must fix; the message says which and why."""


def yaml_problem(exc: yaml.YAMLError) -> str:
    """`not valid YAML at line L, column C: <problem>`."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        problem = exc.problem or exc.context or "syntax error"
        return f"not valid YAML at line {mark.line + 1}, column {mark.column + 1}: {problem}"
    return "not valid YAML: " + " ".join(str(exc).split())


def validation_problem(exc: ValidationError) -> str:
    """The first error: the dotted key path, what is wrong, and the value that was given."""
    err = exc.errors()[0]
    path = ""
    for part in err["loc"]:
        if isinstance(part, int):
            path += f"[{part}]"
        elif "[" not in str(part):  # a union's branch ("function-after[...]") is not a key
            path += f".{part}" if path else str(part)
    value = err.get("input")
    message = err["msg"].removeprefix("Value error, ")
    if err["type"] == "missing":
        return f"{path}: required key is missing"
    if err["type"] == "extra_forbidden":
        message = "unknown key"
    if err["type"] == "value_error" and isinstance(value, dict):
        # A check across keys (a model validator) names the key it blames and its value itself.
        return f"{path}.{message}" if path else message
    return f"{path or 'top level'}: {message} (got {value!r})"
