"""The one reader of every input YAML file: the scenario (`--simulate`, the demo's
`--scenario`), the thresholds file (`generate --config`, the demo's `--thresholds`) and the
web config (`--web.config.file`).

Each file is read the same way, so a fix to one is a fix to all three:

- at most MAX_BYTES (1 MiB) are read. The files we ship are far smaller, and pure-Python
  pyyaml is slow (bench/README.md), so a bigger file is a wrong path (a log, an image), not a
  config, and would stall start-up for a long while before failing anyway;
- the bytes are decoded as UTF-8, and a bad byte is named by its offset and line;
- nesting deeper than MAX_DEPTH (64) is refused: pyyaml composes and constructs recursively,
  so 5,000 `[` ended in a RecursionError traceback;
- aliases are allowed (an anchored label set reused is fair use) but the nodes they stand for
  are counted, and more than MAX_ALIAS_NODES (10,000) are refused: nine anchors of nine aliases
  of the previous one are 600 bytes that stand for 9⁹ nodes, which validation walks and an
  error message prints, in one line of tens of megabytes. An alias also counts towards the
  depth;
- duplicate keys are refused, as Go's yaml.UnmarshalStrict does (exporter-toolkit reads the
  web config that way): a second `alerts:` would otherwise silently replace the first;
- Python's own errors from explicit tags (`!!timestamp 2001-13-01`, a 5,000-digit int)
  become YAML errors with a line and column instead of escaping as tracebacks.

Every problem is an InputError of one line that starts with the file's label.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, TypeVar

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError

from kube_gpu_exporter.exporter.input_errors import InputError, quoted, yaml_problem

MAX_BYTES: Final = 1 << 20
MAX_DEPTH: Final = 64
MAX_ALIAS_NODES: Final = 10_000
_STANDARD_TAG: Final = "tag:yaml.org,2002:"
_T = TypeVar("_T")

__all__ = [
    "MAX_ALIAS_NODES",
    "MAX_BYTES",
    "MAX_DEPTH",
    "load_yaml",
    "parse_yaml",
    "parse_yaml_all",
    "read_input",
]


def load_yaml(path: str | Path, what: str = "") -> Any:
    """The document in the file at `path` (None for an empty file). `what` ("scenario", "web
    config") starts the label that every message names the file by."""
    label = f"{what} {path}" if what else str(path)
    return parse_yaml(read_input(path, label), label)


def read_input(path: str | Path, label: str) -> bytes:
    """The bytes of an input file, at most MAX_BYTES: a larger one is refused before it is
    parsed (the pure-Python parser is slow: bench/README.md)."""
    try:
        if str(path) == "-":  # standard input, as kubectl's `-f -`
            data = _stdin()
        else:
            with open(path, "rb") as file:
                data = file.read(MAX_BYTES + 1)
    except OSError as exc:
        raise InputError(f"cannot read {label}: {exc.strerror or exc}") from None
    except ValueError as exc:  # a NUL in the path
        raise InputError(f"cannot read {label}: {exc}") from None
    if len(data) > MAX_BYTES:
        raise InputError(f"{label}: larger than {MAX_BYTES >> 20} MiB, too large for an input file")
    return data


@functools.cache
def _stdin() -> bytes:
    """Standard input, read once: a command may read its input twice (explain's `-f -`
    looks for a queued Job before the pod path reads the manifest)."""
    return sys.stdin.buffer.read(MAX_BYTES + 1)


def parse_yaml(data: bytes | str, label: str) -> Any:
    """The document in `data`, read with every limit above; InputError('<label>: …')."""
    return _load(_text(data, label), label, lambda loader: loader.get_single_data())


def parse_yaml_all(data: bytes | str, label: str, max_documents: int) -> list[Any]:
    """The first `max_documents` documents of a multi-document stream (`---`), with the same
    limits, counted over the whole stream (a manifest file of several objects)."""

    def documents(loader: _Loader) -> list[Any]:
        out: list[Any] = []
        while len(out) < max_documents and loader.check_data():  # type: ignore[no-untyped-call]
            out.append(loader.get_data())
        return out

    return _load(_text(data, label), label, documents)


def _text(data: bytes | str, label: str) -> str:
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = data.count(b"\n", 0, exc.start) + 1
            raise InputError(
                f"{label}: not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start} "
                f"(line {line})"
            ) from None
    else:
        text = data
    if len(text) > MAX_BYTES:
        raise InputError(f"{label}: larger than {MAX_BYTES >> 20} MiB, too large for an input file")
    return text


def _load(text: str, label: str, read: Callable[[_Loader], _T]) -> _T:
    loader = None
    try:
        loader = _Loader(text)  # pyyaml's Reader refuses control characters right here
        return read(loader)
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        raise InputError(
            f"{label}: not valid YAML at line {line}: character U+{exc.character:04X} "
            "is not allowed"
            if isinstance(exc.character, int)
            else f"{label}: {yaml_problem(exc)}"
        ) from None
    except yaml.YAMLError as exc:
        raise InputError(f"{label}: {yaml_problem(exc)}") from None
    finally:
        if loader is not None:
            loader.dispose()


class _Loader(yaml.SafeLoader):
    """SafeLoader with the limits above (no tag runs code; SafeLoader constructs only plain
    data). Composition is where depth and aliases are known, so that is where they are
    counted, before any Python object exists."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._alias_nodes = 0
        self._measured: dict[int, tuple[int, int]] = {}  # id(node) → (nodes, height)
        self._open: set[str] = set()  # anchors of the nodes being composed

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event: Any = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent):
            self._check_alias(event)
            return super().compose_node(parent, index)
        anchor: str | None = getattr(event, "anchor", None)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise ComposerError(None, None, self._too_deep(), event.start_mark)
            if anchor is not None:
                self._open.add(anchor)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1
            if anchor is not None:
                self._open.discard(anchor)

    def _check_alias(self, event: Any) -> None:
        """What the alias stands for counts towards the alias budget and the depth."""
        if event.anchor in self._open:  # a node holding itself never ends when walked
            raise ComposerError(
                None, None, f"alias *{event.anchor} is inside the node it names", event.start_mark
            )
        target = self.anchors.get(event.anchor)
        if target is None:  # undefined: pyyaml's composer says so
            return
        nodes, height = self._measure(target)
        self._alias_nodes += nodes
        if self._alias_nodes > MAX_ALIAS_NODES:
            raise ComposerError(
                None,
                None,
                f"aliases stand for more than {MAX_ALIAS_NODES} nodes (an alias bomb?)",
                event.start_mark,
            )
        if self._depth + height > MAX_DEPTH:
            raise ComposerError(None, None, self._too_deep(), event.start_mark)

    @staticmethod
    def _too_deep() -> str:
        return f"nested deeper than {MAX_DEPTH} levels"

    def _measure(self, node: yaml.Node) -> tuple[int, int]:
        """The nodes under `node` (itself included, aliases expanded) and its height. Memoised
        per node, so a chain of aliases costs one visit per distinct node; the recursion is no
        deeper than MAX_DEPTH, which every composed node already respects."""
        known = self._measured.get(id(node))
        if known is not None:
            return known
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        measured = [self._measure(child) for child in children]
        result = (1 + sum(n for n, _ in measured), 1 + max((h for _, h in measured), default=0))
        self._measured[id(node)] = result
        return result

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        """SafeConstructor's Python errors (a 13th month, an int beyond Python's 4,300 digits,
        an empty `!!int`, a bad `!!bool`) as ConstructorErrors with the value's line and
        column. Only plain-data constructors run here, so any such error is the value's."""
        try:
            return super().construct_object(node, deep)
        except (ArithmeticError, LookupError, ValueError, TypeError, AttributeError) as exc:
            raise ConstructorError(
                None,
                None,
                f"cannot read {node.tag.replace(_STANDARD_TAG, '!!')} value: {exc}",
                node.start_mark,
            ) from None


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> dict[Any, Any]:
    """A mapping whose own keys are distinct (a merged `<<` key may still be overridden)."""
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if key_node.tag == f"{_STANDARD_TAG}merge":
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in seen
        except TypeError:  # unhashable: construct_mapping reports it
            continue
        if duplicate:
            raise ConstructorError(None, None, f"duplicate key {quoted(key)}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=True)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
