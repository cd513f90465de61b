"""WordNet similarity measures computed in bulk over an :class:`~cog_pl.wordnet.ontology.Ontology`.

Each measure is defined exactly as NLTK computes it for one pair, with the ontology's information content:

- ``lin``: ``2 IC(lcs) / (IC(a) + IC(b))``. The lowest common subsumer is chosen by ``lcs``:
  ``"deepest"`` (default) takes ``a.lowest_common_hypernyms(b)[0]`` (the common hypernym of greatest
  ``max_depth``, first by name), the construction that reproduces the official CoG levels; ``"max-ic"`` takes the
  common hypernym of largest IC, which is NLTK's ``lin_similarity``. They differ only where multiple inheritance
  offers a deeper subsumer with less IC.
- ``jcn``: NLTK's ``jcn_similarity``, ``1 / (IC(a) + IC(b) - 2 IC(lcs))`` with the max-IC subsumer.
- ``wup``: NLTK's ``wup_similarity`` (subsumer by ``min_depth``, depth from ``max_depth``).
- ``path``: NLTK's ``path_similarity``, ``1 / (shortest path + 1)``.

The bulk kernel gathers, for a block of rows ``a`` and every column ``b``, a key over ``b``'s ancestors and takes
its maximum: a few numpy operations per block instead of ``len(a) * len(b)`` Python calls.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from cog_pl.errors import CogError
from cog_pl.wordnet.ontology import Ontology

MEASURES = ("lin", "wup", "jcn", "path")
LCS_RULES = ("deepest", "max-ic")
_NLTK_INF = 1e300  # NLTK's _INF for identical synsets under jcn


def _check(measure: str, lcs: str) -> None:
    if measure not in MEASURES:
        raise CogError(f"unknown similarity measure {measure!r}; choose one of {', '.join(MEASURES)}")
    if lcs not in LCS_RULES:
        raise CogError(f"unknown LCS rule {lcs!r}; choose one of {', '.join(LCS_RULES)}")


def _node_keys(onto: Ontology, measure: str, lcs: str) -> np.ndarray:
    """A strictly ordered key per node: the subsumer of a pair is its common ancestor of largest key."""
    n = len(onto)
    name_rank = np.empty(n, dtype=np.int64)
    name_rank[np.argsort(np.array(onto.names), kind="stable")] = np.arange(n)
    if measure == "wup":
        depth = onto.min_depth
    elif measure == "lin" and lcs == "deepest":
        depth = onto.max_depth
    else:  # max-IC subsumer; IC ties give equal values, the name only makes the key total
        depth = np.argsort(np.argsort(-onto.under, kind="stable"), kind="stable")
        return depth.astype(np.int64) + 1
    # deeper wins; among equally deep, the first name wins (NLTK sorts the candidates and takes [0])
    return (depth * (n + 1) + (n - 1 - name_rank)).astype(np.int64) + 1


def pairwise(onto: Ontology, rows: Sequence[str], cols: Sequence[str], measure: str = "lin",
             lcs: str = "deepest", block: int = 256) -> np.ndarray:
    """``len(rows) x len(cols)`` similarity matrix (float64)."""
    _check(measure, lcs)
    ri, ci = onto.idx(rows), onto.idx(cols)
    n = len(onto)
    ic = onto.ic
    keys = _node_keys(onto, measure, lcs)
    # Column side: the ancestors of every column node, padded with a sentinel slot that matches nothing.
    width = max(len(onto.ancestors[j]) for j in ci)
    col_anc = np.full((len(ci), width), n, dtype=np.int64)
    col_dist = np.full((len(ci), width), 1 << 30, dtype=np.int64)
    # wup measures path lengths to the subsumer as NLTK's shortest_path_distance does; path needs upward lengths
    lengths = onto.ancestor_path_lengths if measure == "wup" else (lambda i: onto.anc_dist[i])
    for k, j in enumerate(ci):
        col_anc[k, : len(onto.ancestors[j])] = onto.ancestors[j]
        col_dist[k, : len(onto.anc_dist[j])] = lengths(j)
    # Only nodes that are ancestors of some column matter: compress them to dense positions 0..U-1; U is the
    # sentinel slot (key 0, infinite distance) that padding and non-shared ancestors fall into.
    used = np.unique(onto.ancestors_of(ci))
    sentinel = len(used)
    pos = np.full(n + 1, sentinel, dtype=np.int64)
    pos[used] = np.arange(sentinel)
    g = pos[col_anc]  # (C, W)
    out = np.empty((len(ri), len(ci)), dtype=np.float64)
    for start in range(0, len(ri), block):
        rb = ri[start:start + block]
        row_key = np.zeros((len(rb), sentinel + 1), dtype=np.int64)
        row_dist = np.full((len(rb), sentinel + 1), 1 << 30, dtype=np.int64)
        for r, i in enumerate(rb):
            a = onto.ancestors[i]
            p = pos[a]
            ok = p < sentinel
            row_key[r, p[ok]] = keys[a[ok]]
            row_dist[r, p[ok]] = lengths(i)[ok]
            if measure == "wup" and pos[i] < sentinel:
                # NLTK takes "self if self in subsumers": self beats same-depth names but no deeper node
                row_key[r, pos[i]] = onto.min_depth[i] * (n + 1) + n + 1
        out[start:start + len(rb)] = _block(measure, row_key, row_dist, g, col_dist, ci, rb, used, onto, ic)
    return out


def _block(measure, row_key, row_dist, g, col_dist, ci, rb, used, onto, ic) -> np.ndarray:
    if measure == "path":
        d = row_dist[:, g] + col_dist[None, :, :]  # (B, C, W)
        return 1.0 / (d.min(axis=2) + 1.0)
    k = row_key[:, g]  # (B, C, W)
    best = k.argmax(axis=2)  # (B, C)
    has = np.take_along_axis(k, best[..., None], axis=2)[..., 0] > 0
    best_pos = g[np.arange(g.shape[0])[None, :], best]  # (B, C) dense position of the subsumer
    lcs_node = used[np.minimum(best_pos, len(used) - 1)]
    ic_a, ic_b = ic[rb][:, None], ic[ci][None, :]
    if measure == "lin":
        with np.errstate(invalid="ignore", divide="ignore"):
            val = 2.0 * ic[lcs_node] / (ic_a + ic_b)
        return np.where(has, np.nan_to_num(val, nan=0.0), 0.0)
    if measure == "jcn":
        diff = ic_a + ic_b - 2.0 * ic[lcs_node]
        with np.errstate(divide="ignore"):
            val = np.where(diff == 0, _NLTK_INF, 1.0 / diff)
        same = rb[:, None] == ci[None, :]
        val = np.where(same, _NLTK_INF, val)
        return np.where((ic_a == 0) | (ic_b == 0), 0.0, val)
    # wup: depth of the subsumer from max_depth, path lengths from each side to it
    depth = onto.max_depth[lcs_node] + 1.0
    len1 = np.take_along_axis(row_dist, best_pos, axis=1) + depth
    len2 = col_dist[np.arange(g.shape[0])[None, :], best] + depth
    return np.where(has, 2.0 * depth / (len1 + len2), 0.0)


def similarity_to_set(onto: Ontology, rows: Sequence[str], seen: Sequence[str], measure: str = "lin",
                      lcs: str = "deepest") -> tuple[np.ndarray, np.ndarray]:
    """For each row concept, the largest similarity to any ``seen`` concept and the index of that concept."""
    mat = pairwise(onto, rows, seen, measure, lcs)
    return mat.max(axis=1), mat.argmax(axis=1)


def pair(onto: Ontology, a: str, b: str, measure: str = "lin", lcs: str = "deepest") -> float:
    """Similarity of one pair of concepts."""
    return float(pairwise(onto, [a], [b], measure, lcs)[0, 0])
