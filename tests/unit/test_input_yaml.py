"""The one reader of the input files (input_yaml.py) and the bounds on error messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from kube_gpu_exporter.exporter.input_errors import MAX_MESSAGE, InputError, one_line, quoted
from kube_gpu_exporter.exporter.input_yaml import MAX_BYTES, MAX_DEPTH, load_yaml, parse_yaml


def problem(data: bytes | str) -> str:
    with pytest.raises(InputError) as caught:
        parse_yaml(data, "f.yaml")
    message = str(caught.value)
    assert message.startswith("f.yaml: ") and "\n" not in message
    return message.removeprefix("f.yaml: ")


def test_plain_documents_read_as_safe_load_would() -> None:
    assert parse_yaml(b"a: [1, 2.5, x, null, true]\n", "f") == {"a": [1, 2.5, "x", None, True]}
    assert parse_yaml("", "f") is None
    assert parse_yaml("\ufeffa: 1", "f") == {"a": 1}  # a UTF-8 byte-order mark is allowed


def test_aliases_and_merges_are_fair_use() -> None:
    text = "base: &b {x: 1, y: 2}\nover: {<<: *b, x: 3}\nagain: [*b, *b]\n"
    assert parse_yaml(text, "f") == {
        "base": {"x": 1, "y": 2},
        "over": {"x": 3, "y": 2},  # a merged key may be overridden: not a duplicate
        "again": [{"x": 1, "y": 2}, {"x": 1, "y": 2}],
    }


def test_what_aliases_stand_for_is_bounded() -> None:
    def wide(aliases: int) -> str:  # each alias stands for 101 nodes: the list and its items
        return "a: &a [" + ", ".join(["x"] * 100) + "]\nb: [" + ", ".join(["*a"] * aliases) + "]"

    assert len(parse_yaml(wide(99), "f")["b"]) == 99  # 9,999 nodes
    assert problem(wide(100)) == (
        "not valid YAML at line 2, column 401: aliases stand for more than 10000 nodes "
        "(an alias bomb?)"
    )


def test_depth_is_bounded_through_aliases_too() -> None:
    assert parse_yaml("[" * MAX_DEPTH + "]" * MAX_DEPTH, "f") is not None
    assert problem("[" * (MAX_DEPTH + 1)) == (
        f"not valid YAML at line 1, column {MAX_DEPTH + 1}: nested deeper than 64 levels"
    )
    # Each anchor nests 40 deep and holds the one before: 3 × 40 levels from 40 in the text.
    deep = "".join(
        f"a{i}: &a{i} " + "[" * 40 + (f"*a{i - 1}" if i else "x") + "]" * 40 + "\n"
        for i in range(3)
    )
    assert "nested deeper than 64 levels" in problem(deep)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: &x [1, *x]", "alias *x is inside the node it names"),
        ("a: &x {k: *x}", "alias *x is inside the node it names"),
        ("a: *nowhere", "found undefined alias 'nowhere'"),
        ("a: 1\nb: 2\na: 3", "line 3, column 1: duplicate key 'a'"),
        ("{[1]: 2}", "found unhashable key"),
        ("a: !!int", "cannot read !!int value"),
        ("a: !!bool maybe", "cannot read !!bool value"),
        ("a: 2001-02-30", "cannot read !!timestamp value: day is out of range for month"),
        ("a: !!python/object:os.system {}", "could not determine a constructor"),
        ("a: \x07", "line 1: character U+0007 is not allowed"),
    ],
)
def test_bad_documents_are_one_line_with_a_place(text: str, expected: str) -> None:
    assert expected in problem(text)


def test_bytes_must_be_utf8() -> None:
    assert problem(b"a: 1\nb: caf\xe9\n") == "not UTF-8 text: byte 0xe9 at offset 11 (line 2)"
    assert "not UTF-8" in problem("a: 1".encode("utf-16"))


def test_files(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    path.write_bytes(b"a: 1\n")
    assert load_yaml(path, "scenario") == {"a": 1}
    with pytest.raises(InputError, match=f"^cannot read scenario {tmp_path}: Is a directory$"):
        load_yaml(tmp_path, "scenario")
    with pytest.raises(InputError, match=r"^cannot read .*: embedded null byte"):
        load_yaml("a\0b")
    path.write_bytes(b"#" * (MAX_BYTES + 1))
    with pytest.raises(InputError, match=f"^{path}: larger than 1 MiB"):
        load_yaml(path)


def test_messages_are_one_bounded_line() -> None:
    assert one_line("a\nb\r\n  c\u2028d\x85e") == "a b c d e"
    assert len(one_line("x" * 10_000)) == MAX_MESSAGE and one_line("x" * 10_000).endswith("…")
    assert quoted("y" * 1000) == repr("y" * 1000)[:79] + "…"
    assert str(InputError("one\ntwo " + "z" * 10_000)).startswith("one two zzz")
    assert len(str(InputError("z" * 10_000))) == MAX_MESSAGE
    long_key = "k" * 5000
    assert len(problem(f"{long_key}: 1\n{long_key}: 2")) < MAX_MESSAGE
