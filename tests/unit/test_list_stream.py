"""The default decoder's list pages, items decoded one at a time (list_stream.py), read exactly
as `json.loads` reads the same bytes: the same items, token and version, or the same error."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kube_gpu_exporter.exporter.kubernetes.decoding import EMPTY, JSON
from kube_gpu_exporter.exporter.kubernetes.list_stream import streamed

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8))
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
METADATA = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "resourceVersion": st.one_of(st.text(max_size=5), st.integers(), st.none()),
            "continue": st.one_of(st.text(max_size=5), st.none()),
        },
    ),
    VALUES,
)
ITEMS = st.one_of(st.lists(VALUES, max_size=5), VALUES)


def _whole(data: bytes) -> Any:
    """The page as the decoder read it before streaming: json.loads, then the same rules."""
    try:
        body = json.loads(data)
        body = body if isinstance(body, Mapping) else EMPTY
        items = [o if isinstance(o, Mapping) else EMPTY for o in body.get("items") or []]
        metadata = body.get("metadata")
        metadata = metadata if isinstance(metadata, Mapping) else EMPTY
        return items, metadata.get("continue"), str(metadata.get("resourceVersion", ""))
    except Exception as exc:  # a wrong-typed page: TypeError on either path
        return type(exc)


def _decoded(data: bytes) -> Any:
    try:
        page = JSON.page(data)
        return list(page.items), page.token, page.version
    except Exception as exc:  # a wrong-typed page: TypeError on either path
        return type(exc)


@settings(max_examples=400, deadline=None)
@given(
    metadata=METADATA,
    items=ITEMS,
    metadata_first=st.booleans(),
    extra=st.dictionaries(st.sampled_from(["kind", "apiVersion", "x"]), VALUES, max_size=2),
    indent=st.sampled_from([None, 0, 2]),
)
def test_a_page_reads_as_json_loads_reads_it(
    metadata: Any, items: Any, metadata_first: bool, extra: dict[str, Any], indent: int | None
) -> None:
    body = {**extra, "metadata": metadata, "items": items}
    if not metadata_first:
        body = {**extra, "items": items, "metadata": metadata}
    data = json.dumps(body, indent=indent).encode()
    assert _decoded(data) == _whole(data)


@pytest.mark.parametrize(
    "text",
    [
        '{"metadata": {"resourceVersion": "5"}, "items": [{"a": 1}, 2, {"b": [1, 2]}]}',
        '{"metadata": {}, "items": []}',
        '{"metadata": {}, "items": [], "kind": "PodList"}',
        '{"metadata": {}, "items": [{"a": 1},]}',  # a trailing comma
        '{"metadata": {}, "items": [{"a": 1} {"b": 2}]}',  # no comma
        '{"metadata": {}, "items": [{"a": 1}]',  # the page cut short
        '{"metadata": {}, "items": [{"a": 1}]} x',  # something after the page
        '{"metadata": {}, "items": [{"a": 1}], "k": }',
        '{"metadata": {}, "items": [{"a": 1}], 5: 1}',
        '{"metadata": {}, "items": null}',
        '{"metadata": {}, "items": {"a": 1}}',
        '{"items": [{"a": 1}], "metadata": {"continue": "c"}}',
        '[{"metadata": {}}]',
        "",
        '\ufeff{"metadata": {}, "items": [{"a": 1}]}',
        '{"metadata": {}, "items": [{"a": "\\ud800"}]}',
    ],
)
def test_pages_of_every_shape(text: str) -> None:
    data = text.encode()
    assert _decoded(data) == _whole(data)


def test_invalid_utf8_is_the_error_json_loads_gives() -> None:
    data = b'{"metadata": {}, "items": [{"a": "\xff"}]}'
    assert _decoded(data) == _whole(data)


def test_items_are_decoded_only_as_they_are_read() -> None:
    text = '{"metadata": {"resourceVersion": "9"}, "items": [{"a": 1}, {"b": 2}, oops]}'
    stream = streamed(text, EMPTY)
    assert stream is not None
    items, metadata = stream
    assert metadata == {"resourceVersion": "9"}
    assert next(items) == {"a": 1}  # read before the broken third item is reached
    assert next(items) == {"b": 2}
    with pytest.raises(json.JSONDecodeError):
        next(items)
