"""A table of named entries that users extend: the one rule for registering, looking up and refusing names, and the
one place the package imports by a name it holds as text (:func:`load_object`, :func:`plugins`).

Similarity measures (:mod:`cog_pl.levels.measures`), image sources (:mod:`cog_pl.data.sources`) and probe methods
(:mod:`cog_pl.evaluate`) each keep one :class:`Registry` and expose timm-style functions over it
(``register_...``, ``get_...``, ``list_...``), and so do backbones (:mod:`cog_pl.models.registry`). Entries keep their
registration order, which is the order of choices on the command line and in reports. An unknown name is a
:class:`~cog_pl.errors.UnknownNameError` that suggests the closest known one.
"""

from __future__ import annotations

import difflib
import importlib
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, TypeVar

from cog_pl.errors import CogError, UnknownNameError

__all__ = ["Registry", "did_you_mean", "load_object", "plugins"]

T = TypeVar("T")


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``"did you mean 'x'? "`` for the known name closest to ``name`` (difflib's), or ``""`` when none is close.

    Example:
        >>> did_you_mean("resnet51", ["resnet50", "vgg19"])
        "did you mean 'resnet50'? "
    """
    close = difflib.get_close_matches(name, list(known), n=1)
    return f"did you mean {close[0]!r}? " if close else ""


class Registry(Generic[T]):
    """Entries of one kind by name; ``kind`` names them in errors (``"similarity measure"``).

    Example:
        >>> colours = Registry("colour")
        >>> colours.add("red", (255, 0, 0))
        (255, 0, 0)
        >>> colours.get("rde")
        Traceback (most recent call last):
        cog_pl.errors.UnknownNameError: unknown colour 'rde'; did you mean 'red'? known: red
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}

    def add(self, name: str, entry: T, *, replace: bool = False) -> T:
        """Register ``entry`` as ``name``; a taken name is refused unless ``replace``."""
        if not name or not isinstance(name, str):
            raise CogError(f"a {self.kind} needs a non-empty name, got {name!r}")
        if name in self._entries and not replace:
            raise CogError(f"{self.kind} {name!r} is already registered; pass replace=True to replace it")
        self._entries[name] = entry
        return entry

    def decorator(self, name: str, *, replace: bool = False) -> Callable[[T], T]:
        """``@registry.decorator("name")`` registers what it decorates and returns it unchanged."""
        return lambda entry: self.add(name, entry, replace=replace)

    def remove(self, name: str) -> T:
        """Unregister ``name`` (tests, plugins replaced at run time); returns the entry."""
        return self._entries.pop(self._known(name))

    def get(self, name: str) -> T:
        """The entry of ``name``; an unknown name is an :class:`~cog_pl.errors.UnknownNameError` (a ``ValueError``)
        suggesting the closest known name and listing them all."""
        return self._entries[self._known(name)]

    def names(self) -> tuple[str, ...]:
        """Registered names in registration order."""
        return tuple(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def unknown(self, name: str, also: str = "") -> UnknownNameError:
        """The error for an unknown ``name``: the closest known name, then all of them (``also``: what else is
        accepted, e.g. ``"or timm:<name>"``)."""
        known = ", ".join(self._entries) or "none"
        return UnknownNameError(f"unknown {self.kind} {name!r}; {did_you_mean(name, self._entries)}known: {known}"
                                f"{f'; {also}' if also else ''}")

    def _known(self, name: str) -> str:
        if name not in self._entries:
            raise self.unknown(name)
        return name


def plugins(group: str, what: str) -> Iterator[tuple[str, object]]:
    """(name, loaded object) of each installed entry point of ``group``; one that fails to load is named in a
    warning (``what``: the kind of plug-in) and skipped, so a broken plug-in never breaks a table."""
    from importlib.metadata import entry_points

    for point in entry_points(group=group):
        try:
            obj = point.load()
        except Exception as err:
            logging.getLogger(__name__).warning("cannot load the %s entry point %s = %s: %s", what, point.name,
                                                point.value, err)
            continue
        yield point.name, obj


def load_object(ref: str, package: str | None = None) -> Any:
    """The object ``ref`` names, imported: ``"module:attr"`` (an entry of a table written as text: a backbone's
    builder, a text tower's, a key conversion; an installed plug-in; a user's class path), or ``"module"``; a module
    name starting with a dot is relative to ``package``. The one import by a name held as text in cog_pl, so that the
    layer checker (import-linter) sees every other import: the lazy exports of the packages and of the face load
    through it too."""
    module, _, attr = ref.partition(":")
    loaded = importlib.import_module(module, package)
    return getattr(loaded, attr) if attr else loaded
