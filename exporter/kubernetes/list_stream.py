"""A list page's items decoded one at a time, so that a big list never exists as objects whole.

`json.loads` of a list page builds every item's every field before the first is parsed. The
node's pod watch lists its pods unpaged (`resourceVersion=0`, from the API server's watch
cache, as the kubelet does), and on a node of many pods that page became several times its size
in dicts at once (bench/README.md): freed after parsing, but in the interpreter's small-object
arenas, so the process's RSS kept the peak for good. Here the page's top level is walked with
the C scanner of `json` (`raw_decode`), and each item is decoded only when the reader asks for
the next: what is alive at once is the page's text and one item.

Kubernetes writes a list's `metadata` before its `items` (Go encodes the ListMeta field
first), so the continue token and the resourceVersion are known before the first item. A page
that is not shaped so — not an object, `items` first or not an array, a byte-order mark —
gives None, and the caller decodes it whole as before. An error inside or after the items
raises the `json.JSONDecodeError` that `json.loads` would raise for the same text, but when
the reader reaches it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any, Final

_SPACE: Final = re.compile(r"[ \t\n\r]*")
_SCAN: Final = json.JSONDecoder().raw_decode  # the C scanner, from an offset


def streamed(text: str, empty: Mapping[str, Any]) -> tuple[Iterator[Any], Any] | None:
    """(the items, one decoded per step, a non-mapping read as `empty`; the list's metadata)
    of a page `{…, "metadata": …, "items": [ … ], …}`; None for any other shape."""
    i = _skip(text, 0)
    if text[i : i + 1] != "{":
        return None
    i = _skip(text, i + 1)
    metadata: Any = None
    while text[i : i + 1] == '"':
        key, i = _SCAN(text, i)
        i = _colon(text, i)
        if key == "items":
            if metadata is None or text[i : i + 1] != "[":
                return None
            return _items(text, i, empty), metadata
        value, i = _SCAN(text, i)
        if key == "metadata":
            metadata = value
        i = _skip(text, i)
        if text[i : i + 1] != ",":
            return None  # the object ends without items: nothing to stream
        i = _skip(text, i + 1)
    return None


def _items(text: str, i: int, empty: Mapping[str, Any]) -> Iterator[Any]:
    """The array's elements from `text[i] == "["`, then the rest of the page checked."""
    i = _skip(text, i + 1)
    if text[i : i + 1] == "]":
        i += 1
    else:
        while True:
            item, i = _SCAN(text, i)
            yield item if isinstance(item, Mapping) else empty
            i = _skip(text, i)
            if text[i : i + 1] == "]":
                i += 1
                break
            if text[i : i + 1] != ",":
                raise json.JSONDecodeError("Expecting ',' delimiter", text, i)
            i = _skip(text, i + 1)
    _rest(text, _skip(text, i))


def _rest(text: str, i: int) -> None:
    """The members after `items` and the end of the page, as json.loads would accept them."""
    while text[i : i + 1] == ",":
        i = _skip(text, i + 1)
        if text[i : i + 1] != '"':
            raise json.JSONDecodeError("Expecting property name enclosed in double quotes", text, i)
        _, i = _SCAN(text, i)
        _, i = _SCAN(text, _colon(text, i))
        i = _skip(text, i)
    if text[i : i + 1] != "}":
        raise json.JSONDecodeError("Expecting ',' delimiter", text, i)
    end = _skip(text, i + 1)
    if end != len(text):
        raise json.JSONDecodeError("Extra data", text, end)


def _colon(text: str, i: int) -> int:
    i = _skip(text, i)
    if text[i : i + 1] != ":":
        raise json.JSONDecodeError("Expecting ':' delimiter", text, i)
    return _skip(text, i + 1)


def _skip(text: str, i: int) -> int:
    match = _SPACE.match(text, i)
    return match.end() if match else i
