"""Probe methods: how a domain's frozen features are evaluated, looked up by name in one table.

A method is a function that runs a domain's whole grid (seeds x shot counts) on its train/test feature stores,
appends one result row per cell to the results file and returns the rows it wrote::

    run(root, results, *, model, domain, storage, protocol=None, plan=None, seeds=None, shots=None,
        device="cpu", overwrite=False) -> list[dict]

Built-in: ``linear``, the tuned linear probe (:func:`cog_pl.probe.protocol_run.run_protocol`). A new method (a
k-NN classifier) registers itself with :func:`register_probe_method`; its name is the ``method`` of its rows (the
result methods and their report labels: :data:`cog_pl.results.METHODS`). This module imports nothing heavy: a
method's own modules load when it runs.
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


_METHODS: Registry[ProbeMethod] = Registry("probe method")


def register_probe_method(name: str, *, description: str = "",
                          replace: bool = False) -> Callable[[RunMethod], RunMethod]:
    """Decorator registering a method's run function as ``name``."""
    def add(fn: RunMethod) -> RunMethod:
        _METHODS.add(name, ProbeMethod(name, fn, description), replace=replace)
        return fn
    return add


def get_probe_method(name: str) -> ProbeMethod:
    """The method ``name``; an unknown name is a ``ValueError`` listing the known ones."""
    return _METHODS.get(name)


def list_probe_methods() -> tuple[str, ...]:
    """Registered method names in registration order."""
    return _METHODS.names()


def unregister_probe_method(name: str) -> ProbeMethod:
    """Remove a registered method (tests, plugins)."""
    return _METHODS.remove(name)


@register_probe_method("linear", description="linear probe tuned with Optuna (lr, wd), retrained, tested")
def linear(root: Any, results: Any, **kwargs: Any) -> list[dict[str, Any]]:
    """The tuned linear probe of every (seed, shots) cell (:func:`~cog_pl.probe.protocol_run.run_protocol`)."""
    from cog_pl.probe.protocol_run import run_protocol

    return run_protocol(root, results, **kwargs)
