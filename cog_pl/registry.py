"""A table of named entries that users extend: the one rule for registering, looking up and refusing names.

Similarity measures (:mod:`cog_pl.levels.measures`), image sources (:mod:`cog_pl.data.sources`) and probe methods
(:mod:`cog_pl.probe.methods`) each keep one :class:`Registry` and expose timm-style functions over it
(``register_...``, ``get_...``, ``list_...``). Entries keep their registration order, which is the order of
choices on the command line and in reports.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Entries of one kind by name; ``kind`` names them in errors (``"similarity measure"``)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}

    def add(self, name: str, entry: T, *, replace: bool = False) -> T:
        """Register ``entry`` as ``name``; a taken name is refused unless ``replace``."""
        if not name or not isinstance(name, str):
            raise ValueError(f"a {self.kind} needs a non-empty name, got {name!r}")
        if name in self._entries and not replace:
            raise ValueError(f"{self.kind} {name!r} is already registered; pass replace=True to replace it")
        self._entries[name] = entry
        return entry

    def decorator(self, name: str, *, replace: bool = False) -> Callable[[T], T]:
        """``@registry.decorator("name")`` registers what it decorates and returns it unchanged."""
        return lambda entry: self.add(name, entry, replace=replace)

    def remove(self, name: str) -> T:
        """Unregister ``name`` (tests, plugins replaced at run time); returns the entry."""
        return self._entries.pop(self._known(name))

    def get(self, name: str) -> T:
        """The entry of ``name``; an unknown name is a ``ValueError`` listing the known ones."""
        return self._entries[self._known(name)]

    def names(self) -> tuple[str, ...]:
        """Registered names in registration order."""
        return tuple(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def _known(self, name: str) -> str:
        if name not in self._entries:
            raise ValueError(f"unknown {self.kind} {name!r}; known: {', '.join(self._entries) or 'none'}")
        return name
