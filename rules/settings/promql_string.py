"""What a PromQL double-quoted string stands for, read as Prometheus' lexer reads it.

A matcher's value in the thresholds file is pasted between `"…"` in every generated query, so
it must be a string the lexer accepts: Go's escapes (`\\n`, `\\"`, `\\\\`, octal `\\101`, `\\x41`,
`\\u00e9`, `\\U0001F600`) and no other, no line break, valid code points. `\\d` is not one of
them: a regex's backslash is written twice (`job=~"a\\\\d"`), and `\\d` alone fails the rule
file. The value is bytes because `\\xff` and `\\377` are single bytes, as in Go; a regex made of
them is then not UTF-8, which Go's regexp refuses.
"""

from __future__ import annotations

import re

_SIMPLE = {"a": 7, "b": 8, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11, "\\": 92, '"': 34}
# The digits each numeric escape takes, their base, and the largest value it may stand for.
_NUMERIC = {"x": (2, 16, 0xFF), "u": (4, 16, 0x10FFFF), "U": (8, 16, 0x10FFFF)}
_OCTAL = (3, 8, 0xFF)
_DIGITS = {8: re.compile(r"[0-7]+"), 16: re.compile(r"[0-9A-Fa-f]+")}


def unquote(body: str) -> bytes:
    """The bytes that `"body"` stands for in PromQL; ValueError naming the first problem, as
    promtool would (an unknown escape, a line break, an escape past the last code point)."""
    out = bytearray()
    i = 0
    while i < len(body):
        char = body[i]
        if char == "\n":
            raise ValueError("has a line break inside its quotes (write \\n)")
        if char != "\\":
            try:
                out += char.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError(f"is not UTF-8 (U+{ord(char):04X})") from None
            i += 1
            continue
        kind = body[i + 1 : i + 2]
        if kind in _SIMPLE:
            out.append(_SIMPLE[kind])
            i += 2
            continue
        if kind in _NUMERIC or kind in tuple("01234567"):
            count, base, largest = _NUMERIC.get(kind, _OCTAL)
            start = i + 1 if kind not in _NUMERIC else i + 2
            digits = body[start : start + count]
            found = _DIGITS[base].match(digits)
            if len(digits) < count or not found or found.end() != count:
                raise ValueError(
                    f"has an escape sequence that is cut short: \\{body[i + 1 : start + count]}"
                )
            value = int(digits, base)
            if value > largest or 0xD800 <= value < 0xE000:
                raise ValueError(
                    f"has an escape sequence past the code points: \\{body[i + 1 : start + count]}"
                )
            out += bytes([value]) if largest == 0xFF else chr(value).encode("utf-8")
            i = start + count
            continue
        raise ValueError(f"has an unknown escape sequence \\{kind} (a regex's \\ is written \\\\)")
    return bytes(out)
