"""Probe methods: how a domain's frozen features are evaluated, looked up by name in one table.

A method is a function that runs a domain's whole grid (seeds x shot counts) on its train/test feature stores,
appends one result row per cell to the results file and returns the rows it wrote::

    run(root, results, *, model, domain, storage, protocol=None, plan=None, seeds=None, shots=None,
        device="cpu", overwrite=False) -> list[dict]

Built-in: ``linear``, the tuned linear probe (:func:`cog_pl.probe.protocol_run.run_protocol`), and ``knn``, the
weighted k-NN classifier (:func:`cog_pl.probe.knn_protocol.run_knn_protocol`; arguments it has no use for, such as
``storage``, are ignored). A new method registers itself with :func:`register_probe_method`; its name is the
``method`` of its rows (the result methods and their report labels: :data:`cog_pl.results.METHODS`). A method's
``check`` (optional, the same arguments) refuses, before any work, rows an earlier run made with other values, so
``cog-pl run`` checks every method's grid before the first probe. This module imports nothing heavy: a method's own
modules load when it runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cog_pl.registry import Registry

#: ``(root, results, *, model, domain, storage, ...) -> rows written``.
RunMethod = Callable[..., list[dict[str, Any]]]


@dataclass(frozen=True)
class ProbeMethod:
    """One registered method: its name (the ``method`` of its rows) and the function that runs it."""

    name: str
    run: RunMethod
    description: str = ""
    check: RunMethod | None = None  # same arguments as run; refuses rows of other values before any work


_METHODS: Registry[ProbeMethod] = Registry("probe method")


def register_probe_method(name: str, *, description: str = "", replace: bool = False,
                          check: RunMethod | None = None) -> Callable[[RunMethod], RunMethod]:
    """Decorator registering a method's run function as ``name``.

    Args:
        name: the method's name: ``--methods`` of ``cog-pl run`` and the ``method`` of its rows.
        description: one line for listings.
        replace: replace a method already registered as ``name``.
        check: its grid check (the run function's arguments), which refuses rows of other values before any work.

    Returns:
        The decorator; it returns the function unchanged.

    Example:
        >>> @register_probe_method("nearest_mean", description="nearest class mean")  # doctest: +SKIP
        ... def nearest_mean(root, results, *, model, domain, **kwargs):
        ...     return []  # one result row per (seed, shots) cell, appended to results
    """
    def add(fn: RunMethod) -> RunMethod:
        _METHODS.add(name, ProbeMethod(name, fn, description, check), replace=replace)
        return fn
    return add


def get_probe_method(name: str) -> ProbeMethod:
    """The method ``name``; an unknown name is an :class:`~cog_pl.errors.UnknownNameError` suggesting the closest
    and listing the known ones."""
    return _METHODS.get(name)


def list_probe_methods() -> tuple[str, ...]:
    """Registered method names in registration order.

    Returns:
        The names, the built-ins first.

    Example:
        >>> list_probe_methods()
        ('linear', 'knn')
    """
    return _METHODS.names()


def unregister_probe_method(name: str) -> ProbeMethod:
    """Remove a registered method (tests, plugins)."""
    return _METHODS.remove(name)


def _check_linear(root: Any, results: Any, *, protocol: Any = None, plan: Any = None, seeds: Any = None,
                  shots: Any = None, device: Any = "cpu", **kwargs: Any) -> Any:
    from cog_pl.features.pair import open_pair
    from cog_pl.probe.protocol_run import grid_todo
    from cog_pl.probe.tuner import SearchPlan
    from cog_pl.protocol import ProbeProtocol

    protocol, plan = protocol or ProbeProtocol(), plan or SearchPlan()
    seeds, shots = protocol.grid(seeds, shots)
    kwargs.pop("storage", None)
    return grid_todo(open_pair(root), results, protocol=protocol, plan=plan, seeds=seeds, shots=shots, device=device,
                     announce=False, **kwargs)  # the run that follows says which rows it skips


@register_probe_method("linear", check=_check_linear,
                       description="linear probe tuned with Optuna (lr, wd), retrained, tested")
def linear(root: Any, results: Any, **kwargs: Any) -> list[dict[str, Any]]:
    """The tuned linear probe of every (seed, shots) cell (:func:`~cog_pl.probe.protocol_run.run_protocol`)."""
    from cog_pl.probe.protocol_run import run_protocol

    return run_protocol(root, results, **kwargs)


def _check_knn(root: Any, results: Any, **kwargs: Any) -> Any:
    from cog_pl.probe.knn_protocol import check_knn_grid

    return check_knn_grid(root, results, **kwargs)


@register_probe_method("knn", check=_check_knn,
                       description="weighted k-NN (DINO's rule), k chosen on validation, on the linear probe's samples")
def knn(root: Any, results: Any, **kwargs: Any) -> list[dict[str, Any]]:
    """The k-NN classifier of every (seed, shots) cell (:func:`~cog_pl.probe.knn_protocol.run_knn_protocol`)."""
    from cog_pl.probe.knn_protocol import run_knn_protocol

    return run_knn_protocol(root, results, **kwargs)
