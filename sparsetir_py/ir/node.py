"""Base of every IR node: frozen, slotted dataclasses with a `replace` that keeps identity."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Self


@dataclass(frozen=True, slots=True)
class Node:
    """An immutable IR node. A change is `node.replace(field=...)`."""

    def replace(self, **changes: Any) -> Self:
        """A copy with `changes` applied; the same object when nothing changes."""
        if all(getattr(self, k) is v for k, v in changes.items()):
            return self
        return dataclasses.replace(self, **changes)

    def fields(self) -> Iterator[tuple[str, Any]]:
        for f in dataclasses.fields(self):
            yield f.name, getattr(self, f.name)


class FrozenDict(Mapping):
    """An immutable, hashable mapping for attributes and annotations (keys keep insertion order)."""

    __slots__ = ("_items", "_map")

    def __init__(self, items: Mapping | tuple = ()):
        pairs = tuple(items.items()) if isinstance(items, Mapping) else tuple(items)
        self._map = dict(pairs)
        self._items = tuple(self._map.items())

    def __getitem__(self, key):
        return self._map[key]

    def __iter__(self):
        return iter(self._map)

    def __len__(self) -> int:
        return len(self._map)

    def __hash__(self) -> int:
        return hash(tuple(sorted((k, _hashable(v)) for k, v in self._items)))

    def __eq__(self, other) -> bool:
        if isinstance(other, Mapping):
            return self._map == dict(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"FrozenDict({self._map!r})"

    def set(self, key, value) -> FrozenDict:
        return FrozenDict({**self._map, key: value})


def _hashable(v):
    try:
        hash(v)
    except TypeError:
        return repr(v)
    return v
