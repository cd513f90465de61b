"""Probe methods: how a domain's frozen features are evaluated, registered by name in the one method table
(:mod:`cog_pl.methods`).

A method is a function that runs a domain's whole grid (seeds x shot counts) on its train/test feature stores,
appends one result row per cell to the results file and returns the rows it wrote::

    run(root, results, *, model, domain, storage, protocol=None, plan=None, seeds=None, shots=None,
        device="cpu", overwrite=False) -> list[dict]

Built-in: ``linear``, the tuned linear probe (:func:`cog_pl.probe.protocol_run.run_protocol`), ``knn``, the
weighted k-NN classifier (:func:`cog_pl.probe.knn_protocol.run_knn_protocol`; arguments it has no use for, such as
``storage``, are ignored), ``linear_text_init``, the linear probe started from the zero-shot text classifier
(:func:`cog_pl.probe.text_init.run_text_init`), ``attentive`` and ``mlp``, the attentive and MLP probes
(:func:`cog_pl.probe.attentive.run_head_protocol`), and ``zeroshot``, a vision-language model's text classifier on
the test features (:func:`cog_pl.probe.zeroshot.run_zeroshot`). A new method registers itself with
:func:`register_probe_method`; its name is the ``method`` of its rows, which the results store takes as it takes any
identifier, and its ``label`` and ``order`` place its rows in the report. A method's ``check`` (optional, the same
arguments) refuses, before any work, rows an earlier run made with other values, so ``cog-pl run`` checks every
method's grid before the first probe. This module imports nothing heavy: a method's own modules load when it runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import cog_pl.methods as _table
from cog_pl.methods import Method, RunMethod, get_method, list_methods, register_method, unknown_method

__all__ = ["ProbeMethod", "RunMethod", "get_probe_method", "list_probe_methods", "register_probe_method",
           "unregister_probe_method"]

#: One registered method (:class:`cog_pl.methods.Method`): its name, run, report label and order, check and flags.
ProbeMethod = Method


def register_probe_method(name: str, *, description: str = "", replace: bool = False,
                          check: RunMethod | None = None, label: str = "", order: float = 100.0,
                          options: type | None = None, shares_grid: bool = False,
                          noise_predictions: bool = False,
                          takes_rows: bool = False, tokens: bool = False) -> Callable[[RunMethod], RunMethod]:
    """Decorator registering a method's run function as ``name``.

    Args:
        name: the method's name (a Python identifier): ``--methods`` of ``cog-pl run`` and the ``method`` of its rows.
        description: one line for listings (``cog-pl run --methods``).
        replace: replace a method already registered as ``name``.
        check: its grid check (the run function's arguments), which refuses rows of other values before any work.
        label: its name in the report's tables (default: ``name``).
        order: its place in the report (lower first; the built-ins: linear 0, text-initialised linear 1, zero-shot 3,
            attentive 5, MLP 6, fine-tuning 10, k-NN 20).
        options: the type of its options, if any.
        shares_grid: worker processes share its grid through the claims file (the run takes ``workers`` and
            ``wait``), as the linear probe's.
        noise_predictions: its IN-1K all-data row is made again for the report's label-noise check.
        takes_rows: its run and check take ``rows``, the model's rows read once by ``cog-pl run``
            (:class:`cog_pl.results.StoredRows`; :func:`cog_pl.results.identity.cells_todo` uses them).
        tokens: it reads token stores (``[N, T, D]``); the linear probe and k-NN refuse them, naming such methods.

    Returns:
        The decorator; it returns the function unchanged.

    Example:
        Nearest class mean: each test feature goes to the class whose mean train feature is the closest by cosine.

        >>> import torch
        >>> from cog_pl.probe.protocol_run import Splits
        >>> from cog_pl.results import append_row, has_row, row_key
        >>> @register_probe_method("ncm", label="nearest class mean", order=30)  # doctest: +SKIP
        ... def ncm(root, results, *, model, domain, seeds=(0,), overwrite=False, **kwargs):
        ...     s = Splits.load(root)
        ...     means = torch.stack([s.train_x[s.train_y == c].mean(0) for c in range(int(s.train_y.max()) + 1)])
        ...     cos = torch.nn.functional.normalize(s.test_x, dim=1) @ torch.nn.functional.normalize(means, dim=1).T
        ...     top1 = 100.0 * float((cos.argmax(1) == s.test_y).float().mean())
        ...     rows = [{"model": model, "method": "ncm", "domain": domain, "shots": None, "seed": seed,
        ...              "test_top1": top1} for seed in seeds]
        ...     rows = [r for r in rows if overwrite or not has_row(results, row_key(r))]  # resumed
        ...     for row in rows:
        ...         append_row(results, row)
        ...     return rows
    """
    def add(fn: RunMethod) -> RunMethod:
        register_method(Method(name, fn, label=label, order=order, description=description, check=check,
                               options=options, shares_grid=shares_grid, noise_predictions=noise_predictions,
                               takes_rows=takes_rows, tokens=tokens),
                        replace=replace)
        return fn
    return add


def get_probe_method(name: str) -> ProbeMethod:
    """The probe method ``name``; an unknown name (fine-tuning included: ``--finetune`` runs it) is an
    :class:`~cog_pl.errors.UnknownNameError` suggesting the closest and listing the known ones."""
    known = list_probe_methods()
    if name not in known:
        raise unknown_method(name, known)
    return get_method(name)


def list_probe_methods() -> tuple[str, ...]:
    """Registered probe method names (those ``--methods`` takes) in report order.

    Returns:
        The names, the built-ins first.

    Example:
        >>> list_probe_methods()
        ('linear', 'linear_text_init', 'zeroshot', 'attentive', 'mlp', 'knn')
    """
    return list_methods(probe=True)


def unregister_probe_method(name: str) -> ProbeMethod:
    """Remove a registered method (tests, plugins)."""
    return _table.unregister_method(name)


def _check_linear(root: Any, results: Any, *, protocol: Any = None, plan: Any = None, seeds: Any = None,
                  shots: Any = None, device: Any = "cpu", **kwargs: Any) -> Any:
    from cog_pl.features.pair import open_pair, vectors_only
    from cog_pl.probe.protocol_run import grid_todo
    from cog_pl.probe.tuner import SearchPlan
    from cog_pl.protocol import ProbeProtocol

    protocol, plan = protocol or ProbeProtocol(), plan or SearchPlan()
    seeds, shots = protocol.grid(seeds, shots)
    kwargs.pop("storage", None)
    pair = vectors_only(open_pair(root), "linear")
    return grid_todo(pair, results, protocol=protocol, plan=plan, seeds=seeds, shots=shots, device=device,
                     announce=False, **kwargs)  # the run that follows says which rows it skips


@register_probe_method("linear", check=_check_linear, label="linear probe", order=0, shares_grid=True,
                       noise_predictions=True, takes_rows=True,
                       description="linear probe tuned with Optuna (lr, wd), retrained, tested")
def linear(root: Any, results: Any, **kwargs: Any) -> list[dict[str, Any]]:
    """The tuned linear probe of every (seed, shots) cell (:func:`~cog_pl.probe.protocol_run.run_protocol`)."""
    from cog_pl.probe.protocol_run import run_protocol

    return run_protocol(root, results, **kwargs)


def _check_linear_text_init(root: Any, results: Any, **kwargs: Any) -> Any:
    from cog_pl.probe.text_init import check_text_init_grid

    return check_text_init_grid(root, results, **kwargs)


@register_probe_method("linear_text_init", check=_check_linear_text_init, label="linear probe (text-initialised)",
                       order=1, shares_grid=True, takes_rows=True,
                       description="the linear probe with every head starting from the zero-shot text classifier "
                                   "(ELEVATER's INIT_HEAD_WITH_TEXT_ENCODER; --zeroshot-names, --zeroshot-templates)")
def linear_text_init(root: Any, results: Any, **kwargs: Any) -> list[dict[str, Any]]:
    """The text-initialised linear probe of every (seed, shots) cell (:func:`~cog_pl.probe.text_init.run_text_init`)."""
    from cog_pl.probe.text_init import run_text_init

    return run_text_init(root, results, **kwargs)


def _check_knn(root: Any, results: Any, **kwargs: Any) -> Any:
    from cog_pl.probe.knn_protocol import check_knn_grid

    return check_knn_grid(root, results, **kwargs)


@register_probe_method("knn", check=_check_knn, label="k-NN", order=20, takes_rows=True,
                       description="weighted k-NN (DINO's rule), k chosen on validation, on the linear probe's samples")
def knn(root: Any, results: Any, **kwargs: Any) -> list[dict[str, Any]]:
    """The k-NN classifier of every (seed, shots) cell (:func:`~cog_pl.probe.knn_protocol.run_knn_protocol`)."""
    from cog_pl.probe.knn_protocol import run_knn_protocol

    return run_knn_protocol(root, results, **kwargs)


def _check_attentive(root: Any, results: Any, **kwargs: Any) -> Any:
    from cog_pl.probe.attentive import check_head_grid

    return check_head_grid(root, results, **{"kind": "attentive", **kwargs})


@register_probe_method("attentive", check=_check_attentive, label="attentive probe", order=5, takes_rows=True,
                       tokens=True,
                       description="attentive pooler on the store's tokens (--attentive-preset), tuned like the linear "
                                   "probe, a batch of trials trained as one bank of heads")
def attentive(root: Any, results: Any, **kwargs: Any) -> list[dict[str, Any]]:
    """The attentive probe of every (seed, shots) cell (:func:`~cog_pl.probe.attentive.run_head_protocol`)."""
    from cog_pl.probe.attentive import run_head_protocol

    return run_head_protocol(root, results, **{"kind": "attentive", **kwargs})


def _check_mlp(root: Any, results: Any, **kwargs: Any) -> Any:
    from cog_pl.probe.attentive import check_head_grid

    return check_head_grid(root, results, **{"kind": "mlp", **kwargs})


@register_probe_method("mlp", check=_check_mlp, label="MLP probe", order=6, takes_rows=True, tokens=True,
                       description="BatchNorm + hidden layer (--mlp-hidden) on the class token or vector, tuned like "
                                   "the linear probe, a batch of trials trained as one bank of heads")
def mlp(root: Any, results: Any, **kwargs: Any) -> list[dict[str, Any]]:
    """The MLP probe of every (seed, shots) cell (:func:`~cog_pl.probe.attentive.run_head_protocol`)."""
    from cog_pl.probe.attentive import run_head_protocol

    return run_head_protocol(root, results, **{"kind": "mlp", **kwargs})


def _check_zeroshot(root: Any, results: Any, **kwargs: Any) -> Any:
    from cog_pl.probe.zeroshot import check_zeroshot_grid

    return check_zeroshot_grid(root, results, **kwargs)


@register_probe_method("zeroshot", check=_check_zeroshot, label="zero-shot", order=3, takes_rows=True,
                       description="a vision-language model's text classifier of the concepts' names and prompts "
                                   "(--zeroshot-names, --zeroshot-templates); one row per domain")
def zeroshot(root: Any, results: Any, **kwargs: Any) -> list[dict[str, Any]]:
    """The zero-shot row of a domain (:func:`~cog_pl.probe.zeroshot.run_zeroshot`)."""
    from cog_pl.probe.zeroshot import run_zeroshot

    return run_zeroshot(root, results, **kwargs)
