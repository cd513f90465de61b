"""Mistake severity: how far in WordNet a wrong prediction lands from the true concept.

The severity of a wrong top-1 prediction is the height, above the true concept, of the lowest hypernym it shares with
the predicted one: the LCA distance of "LCA-on-the-Line" (Shi et al., ICML 2024, Sec. 3:
``D_LCA(y', y) = f(y) - f(N_LCA(y', y))`` for a true class ``y``, a prediction ``y'`` and a function ``f`` of the
tree's nodes) with ``f`` the depth (their code, github.com/ElvishElvis/LCA-on-the-line, ``linear_probe_utils.py``,
``tree_values='depth'``), the "height of the lowest common ancestor" the hierarchical-classification literature calls
mistake severity (Bertinetto et al., "Making Better Mistakes", CVPR 2020). Both compute it on a tree made from WordNet
(github.com/fiveai/making-better-mistakes, ``data/scripts_asis/compute_imagenet_hierarchy.py``: each class keeps one
longest path to the root, chosen by hand among ties; LCA-on-the-Line reuses that tree through Valmadre's
``hier.py``). WordNet's hypernym graph is not a tree (a concept may have several hypernyms), so here, on the graph
itself, with no path chosen by hand:

``severity(y, y') = min over c in H(y) ∩ H(y') of d(y, c)``

where ``H(x)`` is ``x`` and all its hypernyms (instance hypernyms included, as the levels are built:
:class:`~cog_pl.protocol.LevelProtocol`) and ``d(y, c)`` the number of hypernym steps on the shortest upward path from
``y`` to ``c`` (:attr:`~cog_pl.wordnet.ontology.Ontology.anc_dist`): the common hypernym reached in the fewest steps
from the true concept. On a tree it is ``depth(y) - depth(LCA(y, y'))``. Two siblings are 1 apart, a prediction one of
whose hypernyms is the true concept's grandparent 2, a prediction of a hypernym of ``y`` its distance above ``y``, and
a hyponym of ``y`` 0 (no step up: the prediction is a kind of the true concept).

An error is *within the same parent* when the two concepts share a direct hypernym. Pure functions of predictions, an
ontology and an explicit seed; the report's section is :mod:`cog_pl.report.severity`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from cog_pl.analysis.concepts import LEVEL, N_BOOT
from cog_pl.errors import CogError
from cog_pl.results.predictions import NONE, Predictions
from cog_pl.wordnet.ontology import Ontology

__all__ = ["ClassHierarchy", "Severity", "class_hierarchy", "mistake_severity"]


@dataclass(frozen=True)
class ClassHierarchy:
    """For classes ``classes`` (wnids, in label order): ``severity[i, j]``, the hypernym steps from class ``i`` up to
    the nearest hypernym it shares with class ``j`` (the module's docstring), and ``same_parent[i, j]``, whether the two
    share a direct hypernym."""

    classes: tuple[str, ...]
    severity: np.ndarray
    same_parent: np.ndarray


def _padded(rows: Sequence[np.ndarray], fill: int) -> np.ndarray:
    width = max((len(r) for r in rows), default=0) or 1
    out = np.full((len(rows), width), fill, dtype=np.int64)
    for k, r in enumerate(rows):
        out[k, :len(r)] = r
    return out


def class_hierarchy(onto: Ontology, classes: Sequence[str]) -> ClassHierarchy:
    """The pairwise severities and same-parent flags of ``classes`` in ``onto`` (a class not in it is refused by
    name, :meth:`~cog_pl.wordnet.ontology.Ontology.idx`)."""
    nodes = onto.idx(list(classes))
    n, far = len(onto), np.iinfo(np.int64).max // 4
    ancestors = _padded([onto.ancestors[i] for i in nodes], n)  # the slot n matches nothing
    parents = _padded([np.asarray(onto.parent_idx[i], dtype=np.int64) for i in nodes], n)
    severity = np.empty((len(nodes), len(nodes)), dtype=np.int64)
    same = np.empty((len(nodes), len(nodes)), dtype=bool)
    dist = np.full(n + 1, far, dtype=np.int64)
    mine = np.zeros(n + 1, dtype=bool)
    for k, i in enumerate(nodes):
        dist[onto.ancestors[i]] = onto.anc_dist[i]
        severity[k] = dist[ancestors].min(axis=1)  # every class shares the root: always finite within one ontology
        dist[onto.ancestors[i]] = far
        mine[onto.parent_idx[i]] = True
        same[k] = mine[parents].any(axis=1)
        mine[onto.parent_idx[i]] = False
    return ClassHierarchy(tuple(classes), severity, same)


@dataclass(frozen=True)
class Severity:
    """The wrong top-1 predictions of one (model, method, domain), pooled over ``seeds``: ``errors`` of them (those
    with a predicted class; ``unanswered``: wrong images with none), their ``mean`` severity (hypernym steps) with a
    ``level`` percentile bootstrap interval ``[low, high]`` over the test images (``n_boot`` resamples from ``seed``,
    each image's errors of every seed resampled together), and ``same_parent``, the share (%) of them within the same
    parent. Per class (the true concept, label order): ``concept_errors``, ``concept_mean`` (NaN without errors) and
    ``concept_same_parent`` (%)."""

    mean: float
    low: float
    high: float
    same_parent: float
    errors: int
    unanswered: int
    images: int
    seeds: tuple[int, ...]
    concept_errors: np.ndarray
    concept_mean: np.ndarray
    concept_same_parent: np.ndarray
    n_boot: int
    level: float
    seed: int


def _stack(by_seed: Mapping[int, Predictions]) -> tuple[tuple[int, ...], np.ndarray, np.ndarray]:
    """(seeds, labels, ``(seeds, images)`` first classes); seeds of other test images or labels are refused."""
    seeds = tuple(sorted(by_seed))
    if not seeds:
        raise CogError("mistake severity: no predictions")
    first = by_seed[seeds[0]]
    for s in seeds[1:]:
        other = by_seed[s]
        if not (np.array_equal(other.image, first.image) and np.array_equal(other.label, first.label)
                and other.classes == first.classes):
            raise CogError(f"mistake severity: seed {s}'s predictions hold other test images, labels or classes than "
                           f"seed {seeds[0]}'s")
    return seeds, np.asarray(first.label, dtype=np.int64), np.stack([by_seed[s].top5[:, 0] for s in seeds]).astype(
        np.int64)


def mistake_severity(by_seed: Mapping[int, Predictions], hierarchy: ClassHierarchy, *, n_boot: int = N_BOOT,
                     level: float = LEVEL, seed: int = 0) -> Severity:
    """The severity of the wrong top-1 predictions of ``by_seed`` (the same test images in every seed), whose class
    indices are ``hierarchy``'s classes."""
    seeds, label, first = _stack(by_seed)
    classes = by_seed[seeds[0]].classes
    if classes is not None and tuple(classes) != hierarchy.classes:
        raise CogError("mistake severity: the predictions name other classes than the hierarchy's")
    num = len(hierarchy.classes)
    wrong = first != label[None, :]
    answered = wrong & (first != NONE)
    pred = np.where(answered, first, 0)
    steps = np.where(answered, hierarchy.severity[label[None, :], pred], 0)
    same = answered & hierarchy.same_parent[label[None, :], pred]
    per_image = np.stack([steps.sum(0), answered.sum(0), same.sum(0)], axis=1)  # (images, 3)
    errors = int(per_image[:, 1].sum())
    tiled = np.tile(label, len(seeds))
    concept_errors = np.bincount(tiled, weights=answered.ravel(), minlength=num)
    with np.errstate(invalid="ignore", divide="ignore"):
        concept_mean = np.where(concept_errors > 0, np.bincount(tiled, weights=steps.ravel(), minlength=num)
                                / concept_errors, np.nan)
        concept_same = np.where(concept_errors > 0, 100.0 * np.bincount(tiled, weights=same.ravel(), minlength=num)
                                / concept_errors, np.nan)
    mean = float(per_image[:, 0].sum() / errors) if errors else float("nan")
    low, high = _interval(per_image, n_boot, level, seed) if errors else (float("nan"), float("nan"))
    return Severity(mean, low, high, 100.0 * float(per_image[:, 2].sum() / errors) if errors else float("nan"),
                    errors, int((wrong & ~answered).sum()), len(label), seeds, concept_errors.astype(np.int64),
                    concept_mean, concept_same, n_boot, level, seed)


def _interval(per_image: np.ndarray, n_boot: int, level: float, seed: int) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean severity (total steps over total errors) over images. The images
    fall into few kinds (their step total, error count and same-parent count over the seeds): a resample of the
    ``N`` images is a multinomial draw of ``N`` over the kinds, exactly, at the cost of the kinds, not the images."""
    kinds, counts = np.unique(per_image, axis=0, return_counts=True)
    n = int(counts.sum())
    draws = np.random.default_rng(seed).multinomial(n, counts / n, size=n_boot)
    totals = draws @ kinds
    reps = totals[totals[:, 1] > 0]
    reps = reps[:, 0] / reps[:, 1]
    tail = (1 - level) / 2
    low, high = np.quantile(reps, [tail, 1 - tail])
    return float(low), float(high)
