"""How `--help` reads: paragraphs kept, one line per command, each command opening with what
it does.

argparse folds a description into one paragraph and wraps the command list to the terminal, so
a command's line broke in two on an 80-column terminal and a second paragraph ran into the
first. And a command registered without a description showed only its flags. Here every
command's help opens with the line the top-level list gives it, so the two cannot disagree and
a command added later gets an opening without anyone remembering to write one.
"""

from __future__ import annotations

import argparse
import re
import textwrap
from typing import Any

__all__ = ["CommandListFormatter", "ParagraphFormatter", "open_with_summaries"]


class ParagraphFormatter(argparse.HelpFormatter):
    """argparse's formatter, with the description's and epilog's paragraphs kept apart, and
    lines never broken at a hyphen (`--web.listen-` / `address` is no flag anyone can type)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        paragraphs = [p for p in re.split(r"\n\s*\n", text.strip()) if p.strip()]
        return "\n\n".join(
            textwrap.fill(
                " ".join(p.split()),
                width,
                initial_indent=indent,
                subsequent_indent=indent,
                break_on_hyphens=False,
            )
            for p in paragraphs
        )

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


class CommandListFormatter(ParagraphFormatter):
    """The top-level help: each command's line is never wrapped, so the list reads (and greps)
    one command a line whatever the terminal's width."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return [" ".join(text.split())]

    def _format_action(self, action: argparse.Action) -> str:
        # The commands themselves, without argparse's line for the group's metavar above them.
        if isinstance(action, argparse._SubParsersAction):
            return "".join(self._format_action(a) for a in action._get_subactions())
        return super()._format_action(action)


def summary(line: str) -> str:
    """A command's list line ("serve the node's …") as the sentence that opens its help."""
    return f"{line[:1].upper()}{line[1:]}."


def open_with_summaries(commands: argparse._SubParsersAction[Any]) -> None:
    """Make each command's description start with its list line, before whatever description
    it was registered with."""
    for listed in commands._choices_actions:
        parser = commands.choices[listed.dest]
        opening = summary(str(listed.help))
        if not (parser.description or "").startswith(opening):
            parser.description = "\n\n".join(filter(None, (opening, parser.description)))
