"""The method table: every evaluation method by name, its report label and order, read by the run, the command
line, the report and the docs. Nothing else keeps a list of method names.

The built-in methods are the modules of this package, imported here by name on the table's first use; an installed
package adds its own through an entry point of the group :data:`ENTRY_POINT_GROUP` (a module that registers a
:class:`~cog_pl.evaluate.method.Method` on import, or a Method instance), and a user's code with
:func:`~cog_pl.evaluate.method.register_method`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from cog_pl.errors import UnknownNameError
from cog_pl.evaluate.method import Method, register_method, registered
from cog_pl.registry import did_you_mean, plugins

__all__ = ["ENTRY_POINT_GROUP", "get_method", "is_frozen", "is_probe", "list_methods", "method_label",
           "method_sort_key", "sort_methods", "token_methods", "unknown_method"]

logger = logging.getLogger(__name__)

#: Entry points of this group add the methods of installed packages: ``ncm = my_pkg.methods`` (a module that
#: registers on import) or ``ncm = my_pkg.methods:NCM`` (a :class:`~cog_pl.evaluate.method.Method` instance).
ENTRY_POINT_GROUP = "cog_pl.probe_methods"
_loaded = False


def _load() -> None:
    """Register the built-in methods and the entry points' methods, once."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    from cog_pl.evaluate import (  # noqa: F401 - each registers its methods on import
        attentive_images,
        finetune,
        heads,
        knn,
        linear,
        ridge,
        text_init,
        zeroshot,
    )

    for _, obj in plugins(ENTRY_POINT_GROUP, "evaluation method"):
        if isinstance(obj, Method) and obj.name not in registered():
            register_method(obj)


def get_method(name: str) -> Method:
    """The method ``name``; an unknown name is an :class:`~cog_pl.errors.UnknownNameError` suggesting the closest
    and listing the known ones."""
    _load()
    if name not in registered():
        raise unknown_method(name, list_methods(), "method")
    return registered().get(name)


def unknown_method(name: str, known: Iterable[str], kind: str = "probe method") -> UnknownNameError:
    """The error for an unknown method ``name``: the closest of ``known``, then all of them in report order."""
    known = list(known)
    return UnknownNameError(f"unknown {kind} {name!r}; {did_you_mean(name, known)}known: {', '.join(known) or 'none'}")


def list_methods(*, probe: bool | None = None) -> tuple[str, ...]:
    """Registered method names in report order (``probe``: only those on stored features, or only the others).

    Example:
        >>> list_methods(probe=False)
        ('finetune', 'attentive_images')
    """
    _load()
    table = registered()
    return tuple(sort_methods(n for n in table if probe is None or table.get(n).probe == probe))


def token_methods() -> tuple[str, ...]:
    """The registered methods that read token stores, in report order."""
    _load()
    return tuple(n for n in list_methods() if registered().get(n).tokens)


def method_sort_key(name: str) -> tuple[int, float, int, str]:
    """Where a method's rows go in the report: by ``order``, then registration; an unregistered name last, by
    name."""
    _load()
    table = registered()
    if name not in table:
        return 1, 0.0, 0, name
    return 0, table.get(name).order, table.names().index(name), name


def sort_methods(names: Iterable[str]) -> list[str]:
    """``names`` in report order (:func:`method_sort_key`)."""
    return sorted(names, key=method_sort_key)


def method_label(name: str) -> str:
    """A method's label in the report; an unregistered method's rows (a plugin not installed here) keep its name."""
    _load()
    return registered().get(name).title if name in registered() else name


def is_frozen(name: str) -> bool:
    """Whether ``name``'s rows evaluate the frozen backbone (the report's probe tables); an unregistered method's rows
    count as a probe's."""
    _load()
    return registered().get(name).frozen if name in registered() else True


def is_probe(name: str) -> bool:
    """Whether ``name`` evaluates stored features; an unregistered method's rows count as a probe's."""
    _load()
    return registered().get(name).probe if name in registered() else True
