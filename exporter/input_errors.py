"""Bad operator input: the one error type, and one-line messages for bad input files.

Every flag, file or setting the operator must fix raises `InputError`, which the CLI reports
as one line with exit status 2. pyyaml's and pydantic's own messages span several lines and
quote their internals; an operator needs the key (or line), what is wrong, and the value
given, on one line — `yaml_problem` and `validation_problem` make that line for scenarios,
thresholds and the web config.

A message is also bounded: a value quoted in it is cut at `MAX_QUOTED` characters and the
whole line at `MAX_MESSAGE`, so a 4 MiB scalar or an alias bomb (a 600-byte file that expands
to millions of nodes) cannot turn one error into megabytes of log.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:  # pyyaml and pydantic load only with the files that are read with them
    import yaml
    from pydantic import ValidationError

MAX_MESSAGE: Final = 400  # characters of one error line, before the CLI's prefix
MAX_QUOTED: Final = 80  # characters of one value quoted in a message

# Whatever str.splitlines() splits on, so "one line" holds for every reader of stderr.
_LINE_BREAKS: Final = re.compile(r"\s*[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]+\s*")


def one_line(text: str, limit: int = MAX_MESSAGE) -> str:
    """`text` with its line breaks folded into spaces, cut to `limit` characters."""
    text = _LINE_BREAKS.sub(" ", text).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def quoted(value: object, limit: int = MAX_QUOTED) -> str:
    """repr(value), cut to `limit` characters: how a message shows the value it refuses."""
    shown = repr(value)
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


class InputError(ValueError):
    """A flag, file or setting the operator must fix; the message says which and why, on one
    line of at most MAX_MESSAGE characters whatever its parts were."""

    def __init__(self, message: str = "") -> None:
        super().__init__(one_line(str(message)))


def yaml_problem(exc: yaml.YAMLError) -> str:
    """`not valid YAML at line L, column C: <problem>`."""
    import yaml

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
            key = one_line(str(part), MAX_QUOTED)  # an unknown key is the file's own text
            path += f".{key}" if path else key
    value = err.get("input")
    message = err["msg"].removeprefix("Value error, ")
    if err["type"] == "missing":
        return f"{path}: required key is missing"
    if err["type"] == "extra_forbidden":
        message = "unknown key"
    if err["type"] == "value_error" and isinstance(value, dict):
        # A check across keys (a model validator) names the key it blames and its value itself.
        return f"{path}.{message}" if path else message
    return f"{path or 'top level'}: {message} (got {quoted(value)})"
