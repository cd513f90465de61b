"""The evaluation methods' one table: each method's name, report label and order, options, grid check and run.

A method is how a backbone is evaluated on a domain: the tuned linear probe (``linear``), the weighted k-NN
classifier (``knn``), a user's nearest class mean, or fine-tuning (``finetune``). Its name is the ``method`` of its
result rows (:mod:`cog_pl.results`, which accepts any name that is a Python identifier), the ``--methods`` of
``cog-pl run``, and where the report puts and how it labels the method's rows. Nothing else keeps a list of method
names: the results store, the report, ``cog-pl run --methods`` and the docs read this table.

This module is light (it imports nothing but the registry), so the results store and the report can read it. The
built-in methods register themselves where they are defined (:mod:`cog_pl.probe.methods`,
:mod:`cog_pl.finetune.method`), and the methods of installed packages by an entry point of the group
:data:`ENTRY_POINT_GROUP` (a module that registers on import, or a :class:`Method`); the table loads both on first
use. Users register with :func:`cog_pl.probe.methods.register_probe_method`.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from cog_pl.errors import CogError, UnknownNameError
from cog_pl.registry import Registry, did_you_mean, plugins

__all__ = ["ENTRY_POINT_GROUP", "Method", "get_method", "is_frozen", "is_probe", "list_methods", "method_label",
           "method_sort_key", "register_method", "sort_methods", "token_methods", "unknown_method", "unregister_method"]

logger = logging.getLogger(__name__)

#: Entry points of this group register the methods of installed packages: ``ncm = my_pkg.methods`` (a module that
#: registers on import) or ``ncm = my_pkg.methods:NCM`` (a :class:`Method`).
ENTRY_POINT_GROUP = "cog_pl.probe_methods"
#: The modules defining the built-in methods, imported (and so registered) on the table's first use.
_BUILTIN_MODULES = ("cog_pl.probe.methods", "cog_pl.finetune.method")

#: ``(root, results, *, model, domain, storage, protocol, plan, seeds, shots, device, overwrite) -> rows written``.
RunMethod = Callable[..., list[dict[str, Any]]]


@dataclass(frozen=True)
class Method:
    """One evaluation method.

    Attributes:
        name: the ``method`` of its rows and its ``--methods`` name (a Python identifier).
        run: runs a model's domain: ``run(root, results, *, model, domain, storage, protocol, plan, seeds, shots,
            device, overwrite, **options)`` appends one row per (seed, shots) cell and returns the rows it wrote.
            For a probe method, ``root`` holds the domain's ``train`` and ``test`` feature stores.
        label: its name in the report's tables (default: ``name``).
        order: its place in the report and in listings (lower first; ties in registration order).
        description: one line for listings (``cog-pl run --methods``).
        check: the grid check (``run``'s arguments): refuses, before any work, rows an earlier run made with other
            values; ``cog-pl run`` calls every method's check before the first probe.
        options: the type of its options (a dataclass), if it takes any besides the run's arguments.
        probe: it runs on a model's frozen features (chosen by ``--methods``); False for fine-tuning, which reads
            images and is chosen by ``--finetune``.
        shares_grid: its grid is shared by worker processes through the claims file (``workers``/``wait``
            arguments; the run waits for cells other workers hold after every domain's pass).
        noise_predictions: its IN-1K all-data row is the one the label-noise check makes again on the levels.
        takes_rows: its run and check take ``rows``, the model's rows that ``cog-pl run`` reads once and hands to
            every domain's check and run (:class:`cog_pl.results.StoredRows`), instead of reading the results file.
        frozen: its rows evaluate the frozen backbone (a probe on stored features, or a head trained on images such
            as ``attentive_images``): the report's probe tables set them beside the linear probe; False for
            fine-tuning, which has its own.
        tokens: it reads token stores (``[N, T, D]`` features: a token definition, :mod:`cog_pl.models.definitions`);
            the methods that do not (the linear probe, k-NN) refuse them, naming those that do.
    """

    name: str
    run: RunMethod | None = None
    label: str = ""
    order: float = 100.0
    description: str = ""
    check: RunMethod | None = None
    options: type | None = None
    probe: bool = True
    shares_grid: bool = False
    noise_predictions: bool = False
    takes_rows: bool = False
    tokens: bool = False
    frozen: bool = True

    @property
    def title(self) -> str:
        """The report label: ``label``, else the name."""
        return self.label or self.name


_METHODS: Registry[Method] = Registry("probe method")
_loaded = False


def _load() -> None:
    """Import the built-in methods' modules and the entry points' methods, once."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for module in _BUILTIN_MODULES:
        importlib.import_module(module)
    for _, obj in plugins(ENTRY_POINT_GROUP, "probe method"):
        if isinstance(obj, Method) and obj.name not in _METHODS:
            _METHODS.add(obj.name, obj)


def register_method(method: Method, *, replace: bool = False) -> Method:
    """Add ``method`` to the table; a taken name is refused unless ``replace``, and a name must be an identifier."""
    if not isinstance(method.name, str) or not method.name.isidentifier():
        raise CogError(f"a probe method's name must be a Python identifier (letters, digits, _), "
                       f"got {method.name!r}")
    return _METHODS.add(method.name, method, replace=replace)


def unregister_method(name: str) -> Method:
    """Remove ``name`` from the table (tests, plugins replaced at run time)."""
    _load()
    return _METHODS.remove(name)


def get_method(name: str) -> Method:
    """The method ``name``; an unknown name is an :class:`~cog_pl.errors.UnknownNameError` suggesting the closest
    and listing the known ones."""
    _load()
    if name not in _METHODS:
        raise unknown_method(name, list_methods(), "method")
    return _METHODS.get(name)


def unknown_method(name: str, known: Iterable[str], kind: str = "probe method") -> UnknownNameError:
    """The error for an unknown method ``name``: the closest of ``known``, then all of them in report order."""
    known = list(known)
    return UnknownNameError(f"unknown {kind} {name!r}; {did_you_mean(name, known)}known: "
                            f"{', '.join(known) or 'none'}")


def list_methods(*, probe: bool | None = None) -> tuple[str, ...]:
    """Registered method names in report order (``probe``: only the probe methods, or only the others)."""
    _load()
    names = [n for n in _METHODS if probe is None or _METHODS.get(n).probe == probe]
    return tuple(sort_methods(names))


def token_methods() -> tuple[str, ...]:
    """The registered methods that read token stores (:attr:`Method.tokens`), in report order."""
    return tuple(n for n in list_methods() if _METHODS.get(n).tokens)


def method_sort_key(name: str) -> tuple[int, float, int, str]:
    """Where a method's rows go in the report: by ``order``, then registration; an unregistered name last, by
    name."""
    _load()
    names = _METHODS.names()
    if name not in names:
        return 1, 0.0, 0, name
    return 0, _METHODS.get(name).order, names.index(name), name


def sort_methods(names: Iterable[str]) -> list[str]:
    """``names`` in report order (:func:`method_sort_key`)."""
    return sorted(names, key=method_sort_key)


def method_label(name: str) -> str:
    """A method's label in the report; an unregistered method's rows (a plugin not installed here) keep its name."""
    _load()
    return _METHODS.get(name).title if name in _METHODS else name


def is_frozen(name: str) -> bool:
    """Whether ``name``'s rows evaluate the frozen backbone (the report's probe tables); an unregistered method's rows
    count as a probe's."""
    _load()
    return _METHODS.get(name).frozen if name in _METHODS else True


def is_probe(name: str) -> bool:
    """Whether ``name`` runs on frozen features; an unregistered method's rows count as a probe's."""
    _load()
    return _METHODS.get(name).probe if name in _METHODS else True
