"""What `ListWatch` reads of a list page and of a watch event, and the default way to read it.

A list page is `{"metadata": {"continue", "resourceVersion"}, "items": [...]}` and a watch
event `{"type": …, "object": …}`; `ListWatch` needs of them only the objects to hand its
parser, the continue token, the resourceVersion to resume from and, for an ERROR event, the
Status's code and message. A `Decoder` turns the response's bytes into just that, so that a
watch which knows its objects (the cluster view's: cluster/decode.py) can decode them straight
into what its parser keeps, and skip the rest of the JSON unread.

`JSON` is the default: `json.loads` and the objects as mappings, read exactly as `ListWatch`
read them before decoders existed (a non-mapping item parses as `{}`, a list without
metadata resumes from ""), so the node path's watches are unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, Final, NamedTuple, Protocol

from kube_gpu_exporter.exporter.kubernetes.list_stream import streamed

EMPTY: Final[Mapping[str, Any]] = MappingProxyType({})


class Page(NamedTuple):
    """A list page: the objects for the parser, `continue` as sent, the list's version."""

    items: Iterable[Any]  # read once, in order (the default decoder decodes them as read)
    token: Any
    version: str


class Event(NamedTuple):
    """A watch event: its type, the object for the parser (for ERROR, the Status as a
    mapping), and the object's resourceVersion if it has one (else None)."""

    kind: Any
    obj: Any
    version: Any


class Decoder(Protocol):
    def page(self, data: bytes) -> Page: ...

    def token(self, data: bytes) -> Any:
        """The page's `continue` token before its items are decoded (for the prefetch of
        the next page); None when it has none or it cannot be read so. Never raises: `page`
        still reads the page and says what is wrong with it."""
        ...

    def event(self, line: bytes) -> Event: ...


class JsonDecoder:
    """json.loads; every object a mapping (anything else read as `{}`)."""

    def page(self, data: bytes) -> Page:
        """Items decoded one at a time as the list is read (list_stream.py), where the page
        has the shape Kubernetes writes; any other shape whole, as json.loads reads it."""
        try:
            stream = streamed(data.decode(), EMPTY)
        except ValueError:  # not UTF-8, or broken before the items: json.loads says how
            stream = None
        if stream is not None:
            lazy, metadata = stream
            metadata = metadata if isinstance(metadata, Mapping) else EMPTY
            version = str(metadata.get("resourceVersion", ""))
            return Page(lazy, metadata.get("continue"), version)
        body = json.loads(data)
        body = body if isinstance(body, Mapping) else EMPTY
        items = [obj if isinstance(obj, Mapping) else EMPTY for obj in body.get("items") or []]
        metadata = body.get("metadata")
        metadata = metadata if isinstance(metadata, Mapping) else EMPTY
        return Page(items, metadata.get("continue"), str(metadata.get("resourceVersion", "")))

    def token(self, data: bytes) -> Any:
        """The token as `page` reads it: the items are decoded only as they are read."""
        try:
            return self.page(data).token
        except Exception:  # a page of the wrong shape: `page` raises it again, where it counts
            return None

    def event(self, line: bytes) -> Event:
        event = json.loads(line)
        kind, obj = event.get("type"), event.get("object")  # not a mapping: the watch fails
        obj = obj if isinstance(obj, Mapping) else EMPTY
        metadata = obj.get("metadata")
        version = metadata.get("resourceVersion") if isinstance(metadata, Mapping) else None
        return Event(kind, obj, version)


JSON: Final = JsonDecoder()
