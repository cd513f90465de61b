"""A row's protocol in words, as every table of the report names it: ``paper (30 trials × 100 epochs, 5 seeds)``,
``quick (10 trials × 30 epochs, 1 seed)``, ``custom (2 trials × 1 epoch)``.

The words come from what the row records of how it was made (its identity, :mod:`cog_pl.results.identity`), never
from what a run was asked for:

- a tuned probe (the linear, attentive and MLP probes) records ``protocol``, the values of
  :class:`~cog_pl.protocol.ProbeProtocol` it ran (trials, epochs, seeds, shots, ``extra``): it is named by the named
  protocol (:data:`cog_pl.protocol.PROTOCOLS`: ``paper``, ``quick``) whose every value it has, ``extra.protocol``
  included (none for the paper's), else ``custom``, with its trials and epochs and what else differs from the paper's
  (:func:`cog_pl.protocol.protocol_words`, which the refusals of rows of another protocol use too);
- a method that keeps its values in its own record (``row[<method>]``: fine-tuning's ``epochs``,
  ``attentive_images``' ``trials`` and ``epochs``, the k-NN's ``ks``, the ridge probe's ``regs``) is named by them;
- a row that records neither (written by hand, or before rows recorded their protocol) is ``not recorded``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping
from typing import Any

from cog_pl.protocol import protocol_words
from cog_pl.results import method_of

__all__ = ["NOT_RECORDED", "protocol_line", "row_protocol"]

#: The words of a row that records no protocol.
NOT_RECORDED = "not recorded"


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def _own_words(own: Mapping[str, Any]) -> str:
    """The words of a method's own record: its trials and epochs, its epochs, or the ks it chooses among."""
    trials, epochs, ks = own.get("trials"), own.get("epochs"), own.get("ks")
    if trials and epochs:
        return f"{_count(trials, 'trial')} × {_count(epochs, 'epoch')}"
    if epochs:
        return _count(epochs, "epoch")
    if ks:
        return "k among " + ", ".join(str(k) for k in ks)
    regs = own.get("regs")
    if regs:
        return "L2 penalty among " + _values(regs)
    return "no trials or epochs"


def _values(values: Iterable[float]) -> str:
    """Penalties in words: ``2^-10, 2^-8, ..., 2^20 (16 values)`` for evenly spaced powers of two, else each
    (``0.01, 1, 100``)."""
    values = sorted(float(v) for v in values)
    exponents = [math.log2(v) if v > 0 else math.nan for v in values]
    steps = {b - a for a, b in itertools.pairwise(exponents)}
    if len(values) > 3 and all(e == round(e) for e in exponents) and len(steps) == 1:
        return f"2^{exponents[0]:.0f}, 2^{exponents[1]:.0f}, ..., 2^{exponents[-1]:.0f} ({len(values)} values)"
    return ", ".join(f"{v:g}" for v in values)


def row_protocol(row: Mapping[str, Any]) -> tuple[str | None, str]:
    """(name, words) of the protocol ``row`` was made under (the module's docstring): the name is ``paper``,
    ``quick``, ``custom`` for a tuned probe's row and None for any other; the words are what the tables show."""
    record = row.get("protocol")
    if isinstance(record, dict) and "trials" in record and "epochs" in record:
        return protocol_words(record)
    own = row.get(method_of(dict(row)))
    if isinstance(own, dict):
        return None, _own_words(own)
    return None, NOT_RECORDED


def protocol_line(entries: Iterable[tuple[str, str]]) -> str:
    """The line a table shows under its heading, from its ``entries`` (what the table's lines are called, ``dino`` or
    ``dino (k-NN)``, and their protocol's words): ``protocol: <words>`` where they share one, else ``protocols:
    <words> (dino, resnet50); <words> (demo)``; empty without entries."""
    by: dict[str, dict[str, None]] = {}
    for who, words in entries:
        by.setdefault(words or NOT_RECORDED, {})[who] = None  # in the table's order, each once
    if not by:
        return ""
    if len(by) == 1:
        return f"protocol: {next(iter(by))}"
    return "protocols: " + "; ".join(f"{words} ({', '.join(who)})" for words, who in by.items())
