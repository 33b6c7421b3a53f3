"""Whether Prometheus compiles a label matcher's regex: the real RE2 engine parses it, and a few
checks add what Go's regexp (the one Prometheus uses) refuses although RE2 accepts it.

Prometheus parses `name=~"re"` as `re` and compiles it anchored, `^(?:re)$`; both must parse
(`a)|(b` only parses anchored, `\\Qa` only bare: its `\\Q` swallows the closing `)$`).
google-re2 binds the C++ RE2 that Go's regexp/syntax was ported from: the same syntax, the
same refusals (lookaround, backreferences, `\\Z`, `(?#…)`, conditionals, possessive and
nested repetition), the same limit of 1000 on a repeat count and its nesting, and `a{,3}` read
as literal text by both. Where the two differ, Go is stricter, and this module says so:

- `\\C` (any byte) is RE2's alone.
- `(?<name>re)` came to Go in 1.22; Prometheus built with an older Go (Debian's 2.42 is)
  refuses it. `(?P<name>re)` works everywhere.
- `\\p{Kawi}` and the other scripts Unicode added after version 13: Go before 1.21 has
  Unicode 13's tables.
- a repeat count of nine digits or more (`a{99999999999}`): RE2 reads it as literal text, Go
  as a count over 1000.
- size: Go refuses a regexp whose tree is over 1000 high, whose compiled form is over
  128 MiB / 40 B ≈ 3.3 million instructions, or whose classes hold over 32 million runes
  (regexp/syntax's maxHeight, maxSize and maxRunes). RE2 measures size its own way (a
  memory budget for its compiled program, whose "pattern too large" only means the parse
  succeeded), so bounds that Go's counts cannot exceed stand in: each group adds at most 4
  levels to Go's tree (capture, repetition, alternation, concatenation); each character of
  the regex adds at most 3 instructions, times the repeat counts it sits under (at most 1000
  along any path, which both engines enforce; the product over the whole regex bounds it);
  each character adds at most 500 runes (`\\pC`, the densest class, holds 1,424 runes in 3).
  Only regexes far past anything a selector needs meet these bounds.
"""

from __future__ import annotations

import re

import re2

from kube_gpu_exporter.exporter.input_errors import one_line

_TOO_LARGE = b"pattern too large - compile failed"  # RE2's compile budget, not a parse error
# Scripts that Unicode added after version 13.0, the tables of Go before 1.21.
_NEWER_SCRIPTS = frozenset(
    {
        *("Cypro_Minoan", "Old_Uyghur", "Tangsa", "Toto", "Vithkuqi"),  # 14.0
        *("Kawi", "Nag_Mundari"),  # 15.0
        *("Garay", "Gurung_Khema", "Kirat_Rai", "Ol_Onal", "Sunuwar", "Todhri"),  # 16.0
        "Tulu_Tigalari",  # 16.0
        *("Beria_Erfe", "Chisoi", "Sidetic", "Tai_Yo", "Tolong_Siki"),  # 17.0
    }
)
_MAX_HEIGHT = 1000
_MAX_SIZE = (128 << 20) // 40
_MAX_RUNES = (128 << 20) // 4
_MAX_REPEAT = 1000
_LEVELS_PER_GROUP = 4
_SIZE_PER_CHAR = 3
_RUNES_PER_CHAR = 500
_ANCHORS = len("^(?:)$")
_MAX_SHOWN = 120  # characters of the regex a message quotes

# A counted repetition as both engines read one: numbers without leading zeros (`{01}` is text).
_COUNT = re.compile(r"\{(0|[1-9][0-9]*)(,(0|[1-9][0-9]*)?)?\}")
_CLASS_NAME = re.compile(r"\\[pP](?:\{\^?([^}]*)\}|(.))")


def _options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # the caller reports; RE2 would also print to stderr
    return options


def problem(pattern: bytes) -> str | None:
    """Why Prometheus would refuse the regex `pattern` (a matcher's value, unquoted), or None.
    The wording is RE2's for syntax errors, which names the same construct Go's does."""
    for form in (pattern, b"^(?:" + pattern + b")$"):
        try:
            re2.compile(form, _options())
        except re2.error as exc:
            message = exc.args[0] if exc.args else b""
            if message != _TOO_LARGE:
                text = message.decode("utf-8", "replace") if isinstance(message, bytes) else message
                return f"is not valid: {one_line(text, _MAX_SHOWN)}"  # RE2 quotes the regex
    return _go_refuses(pattern.decode("utf-8"))


def _go_refuses(text: str) -> str | None:
    """What Go's regexp refuses in `text`, which RE2 has parsed: one walk over it that skips
    `\\Q…\\E`, escapes and character classes, so `[(?<]` or `\\\\C` are not mistaken."""
    i, depth, deepest, repeats = 0, 0, 0, 1
    in_class = False
    while i < len(text):
        char = text[i]
        if char == "\\":
            kind = text[i + 1 : i + 2]
            if kind == "Q" and not in_class:
                end = text.find("\\E", i + 2)
                i = len(text) if end < 0 else end + 2
            elif kind == "C":
                return "uses \\C (any byte), which Go's regexp does not support"
            elif kind in ("p", "P") and (name := _CLASS_NAME.match(text, i)):
                script = name.group(1)
                if script in _NEWER_SCRIPTS:
                    return (
                        f"uses \\p{{{script}}}, a script newer than Unicode 13, which "
                        "Prometheus built with Go before 1.21 does not know"
                    )
                i = name.end()
            elif kind == "x" and text.startswith("{", i + 2):
                i = text.find("}", i) + 1 or len(text)
            else:
                i += 2
        elif in_class:
            end = text.find(":]", i + 2) if text.startswith("[:", i) else -1
            in_class = char != "]"
            i = end + 2 if end >= 0 else i + 1
        elif char == "[":
            in_class = True
            i += 1 + text.startswith("^", i + 1)
            i += text.startswith("]", i)  # a ] first in a class is a literal
        elif char == "(":
            if text.startswith("(?<", i):
                return (
                    "uses (?<name>…), which Prometheus built with Go before 1.22 refuses; "
                    "write (?P<name>…)"
                )
            depth += 1
            deepest = max(deepest, depth)
            i += 1
        elif char == ")":
            depth -= 1
            i += 1
        elif char == "{" and (count := _COUNT.match(text, i)):
            most = max(_number(count.group(1)), _number(count.group(3) or "0"))
            if most > _MAX_REPEAT:
                shown = one_line(count.group(), _MAX_SHOWN)
                return f"is not valid: invalid repeat count {shown} (at most 1000)"
            repeats = min(_MAX_REPEAT, repeats * max(most, 1))
            i = count.end()
        else:
            i += 1
    return _too_large(len(text), deepest, repeats)


def _number(digits: str) -> int:
    """A repeat count; past four digits only that it is over 1000 (int() refuses huge ones)."""
    return int(digits) if len(digits) <= 4 else _MAX_REPEAT + 1


def _too_large(length: int, deepest: int, repeats: int) -> str | None:
    """The bounds of the module's docstring against Go's three limits."""
    if _LEVELS_PER_GROUP * (deepest + 2) > _MAX_HEIGHT:
        return f"nests groups {deepest} deep, deeper than Go's regexp allows"
    if _SIZE_PER_CHAR * (length + _ANCHORS) * repeats > _MAX_SIZE:
        return (
            f"is too large for Go's regexp: {length} characters under repeat counts of "
            f"up to {repeats}"
        )
    if _RUNES_PER_CHAR * (length + _ANCHORS) > _MAX_RUNES:
        return f"is too large for Go's regexp: {length} characters"
    return None
