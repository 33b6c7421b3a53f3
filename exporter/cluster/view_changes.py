"""What a watch changed since the view last looked: handed from a watch thread to the
cluster loop's thread, consistent per resource.

Each of the `cluster` command's watches (nodes, pods, quotas) runs in its own thread and keeps
its resource's objects in one dict (`ListWatch`); the loop's thread reads them once a cycle.
Rebuilding the view from every object each cycle cost too much at the targets' scale
(bench/README.md), so the loop now updates only what changed (incremental_view.py), and for
that it must know exactly what changed between two of its reads. `HeldObjects` is the one place
where the two threads meet:

- the watch thread applies each event through `store` (ListWatch's per-event hook): under
  the object's lock it changes the dict and notes the change, keyed like the dict, as the
  value the key had at the loop's last read and the value it has now (a key changed ten
  times between two reads is one change; one added and deleted again is none);
- a (re)list publishes a new dict (`publish`): every object in it is new and the changes
  noted against the old dict are void, so `lists` counts up and the notes are dropped;
- the loop's thread calls `take` once a cycle: under the same lock it copies the values
  and swaps the notes for an empty dict.

What `take` returns is therefore one moment of the resource: the objects, and the changes
that lead from the previous `take`'s objects to these. The loop applies them to its running
sums, or rebuilds from the objects when `lists` moved, and its view is as consistent as the
copy of every value it was built from before. The lock is held for one dict operation per
event and for the copy (a millisecond at 150,000 pods) per cycle; nothing else is shared,
and the loop's sums are touched by the loop's thread alone.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Generic, NamedTuple, TypeVar

T = TypeVar("T")


class Change(NamedTuple, Generic[T]):
    """One key's change between two reads: None is absent (added: old None; deleted: new
    None)."""

    old: T | None
    new: T | None


@dataclass(frozen=True)
class Taken(Generic[T]):
    """One resource at one moment: its objects, the (re)lists so far, and what changed
    since the previous `take` (empty after a relist, which voids them). `held` is the
    watch's own mapping, live: for `in` only (never iterated while the watch runs) — a copy
    of its 150,000 keys each cycle held the GIL for milliseconds for a few lookups."""

    held: Mapping[str, T]
    values: tuple[T, ...]
    lists: int
    changes: Mapping[str, Change[T]] = field(default_factory=dict)


class HeldObjects(Generic[T]):
    """One resource's objects by key, as its watch keeps them, and the changes since the
    loop last took them. See the module docstring for who calls what from which thread."""

    def __init__(self) -> None:
        self.items: Mapping[str, T] = {}
        self.listed = False
        self.lists = 0  # how many times it was (re)listed: each time all its objects are new
        self._lock = threading.Lock()
        self._changes: dict[str, Change[T]] = {}

    def publish(self, items: Mapping[str, T]) -> None:
        """After a list (a new dict: its objects replace every held one) and after each
        event (the same dict, already changed through `store`)."""
        with self._lock:
            if items is not self.items:
                self.items = items
                self.lists += 1
                self._changes = {}
            self.listed = True

    def store(self, items: dict[str, T], key: str, value: T | None) -> None:
        """One event's change to the watch's dict: `value` None removes the key."""
        with self._lock:
            old = items.pop(key, None) if value is None else items.get(key)
            if value is not None:
                items[key] = value
            if items is self.items and old is not value:
                self._note(key, old, value)

    def _note(self, key: str, old: T | None, new: T | None) -> None:
        noted = self._changes.get(key)
        if noted is not None:
            old = noted.old  # what the loop last saw
        if old is None and new is None:
            self._changes.pop(key, None)  # came and went between two reads
        else:
            self._changes[key] = Change(old, new)

    def take(self) -> Taken[T]:
        """The objects now and the changes since the last take (which are handed over)."""
        with self._lock:
            changes, self._changes = self._changes, {}
            items = self.items
            return Taken(MappingProxyType(items), tuple(items.values()), self.lists, changes)

    def values(self) -> tuple[T, ...]:
        with self._lock:
            return tuple(self.items.values())
