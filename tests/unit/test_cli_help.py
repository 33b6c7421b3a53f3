"""`--help` tells a user what the program and each command do, and what every flag is for.

The parsers are walked as the CLI builds them, so a command or flag added later is held to the
same rules: every option has help, the top-level help opens by saying what kube-gpu-exporter is
and lists each command on one line, each command's help opens with what it does (the same line
the top-level list shows), and no help text names a document the reader does not have.
"""

from __future__ import annotations

import argparse
import re

import pytest
from test_reader_facing_text import OUTSIDE_REFERENCES

from kube_gpu_exporter.exporter.cli import build_parser

PROG = "kube-gpu-exporter"


def _commands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:  # type: ignore[type-arg]
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return action


def _parsers() -> dict[str, argparse.ArgumentParser]:
    """The top-level parser ("") and every subcommand's, by name."""
    top = build_parser()
    return {"": top, **_commands(top).choices}


def _command_lines() -> dict[str, str]:
    """Each command's one-line help, as the top-level list shows it."""
    return {a.dest: str(a.help) for a in _commands(build_parser())._choices_actions}


def _opening(help_text: str) -> str:
    """The first paragraph after the usage, on one line."""
    paragraphs = [p for p in help_text.split("\n\n") if p.strip()]
    return " ".join(paragraphs[1].split())


def test_there_are_commands() -> None:
    assert {"serve", "cluster", "generate", "demo", "explain"} <= set(_command_lines())


@pytest.mark.parametrize("name", sorted(_parsers()))
def test_every_option_has_help(name: str) -> None:
    parser = _parsers()[name]
    missing = [
        "/".join(a.option_strings) or a.dest
        for a in parser._actions
        if not isinstance(a, argparse._SubParsersAction)
        and (a.help is None or a.help is argparse.SUPPRESS or not str(a.help).strip())
    ]
    assert not missing, f"{PROG} {name}: no help for {missing}"


def test_log_flags_say_what_they_take() -> None:
    for name in ("serve", "cluster"):
        text = _parsers()[name].format_help()
        for flag, values in (("--log.level", ("debug", "error")), ("--log.format", ("json",))):
            entry = text[text.index(f"\n  {flag} ") :].split("\n  --", 2)[1]
            assert all(value in entry for value in values), f"{name} {flag}: {entry!r}"


def test_top_level_help_says_what_the_program_is() -> None:
    text = build_parser().format_help()
    opening = _opening(text)
    assert opening.startswith(f"{PROG}: "), opening
    assert "Prometheus exporter" in opening and "GPU" in opening, opening
    assert not opening.startswith(("Command line", "Every bad input")), opening


def test_top_level_help_lists_every_command_on_one_line() -> None:
    text = build_parser().format_help()
    for name, line in _command_lines().items():
        listed = [row for row in text.splitlines() if re.match(rf"\s+{name}\s", row)]
        assert len(listed) == 1, f"{name}: {listed}"
        assert listed[0].split(None, 1)[1] == line, listed[0]


@pytest.mark.parametrize("name", sorted(_command_lines()))
def test_each_command_help_opens_with_what_it_does(name: str) -> None:
    opening = _opening(_parsers()[name].format_help())
    line = _command_lines()[name]
    assert line and line[0].islower(), f"{name}: the list's line {line!r}"
    assert opening.startswith(f"{line[0].upper()}{line[1:]}."), f"{name}: {opening!r}"
    assert not opening.startswith("`"), opening


@pytest.mark.parametrize("name", sorted(_parsers()))
def test_help_names_no_outside_document(name: str) -> None:
    text = _parsers()[name].format_help()
    assert not OUTSIDE_REFERENCES.search(text), OUTSIDE_REFERENCES.findall(text)
