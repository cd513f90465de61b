"""The ImageNet-21K WordNet subgraph: IN-21K concepts and all their ancestors up to ``entity.n.01``.

Nodes are indexed ``0..n-1``; ancestry is kept as sorted index arrays so that similarity measures can be computed
in bulk with numpy. Information content follows the paper (A.2): ``IC(c) = -log p(c)``, ``p(c)`` = number of corpus
concepts under ``c`` (``c`` included) divided by the number of concepts in the corpus.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from cog_pl.errors import CogError, NotFoundError
from cog_pl.resources import is_wnid


def wnid_of(synset) -> str:
    """``n02123159`` for ``tiger_cat.n.02``."""
    return f"{synset.pos()}{synset.offset():08d}"


def synset_of(wn, wnid: str):
    """NLTK synset for a wnid, with an error that names the wnid."""
    if not is_wnid(wnid):
        raise CogError(f"malformed wnid {wnid!r}: expected 'n' followed by 8 digits, e.g. n02123159")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            synset = wn.synset_from_pos_and_offset("n", int(wnid[1:]))
        except Exception:  # NLTK raises on some bad offsets and returns None on others
            synset = None
    if synset is None:
        raise CogError(f"unknown wnid {wnid}: no noun synset at offset {wnid[1:]} in WordNet 3.0")
    return synset


def parents(synset, instance: bool = True) -> list:
    """Direct hypernyms (and instance hypernyms), as NLTK's ``common_hypernyms`` walks them, sorted by offset: NLTK
    keeps a synset's pointers in a set, whose order changes with ``PYTHONHASHSEED``, and node numbering (hence the
    demo's images) follows this order."""
    return sorted(synset.hypernyms() + (synset.instance_hypernyms() if instance else []), key=lambda s: s.offset())


@dataclass
class Ontology:
    """A WordNet subgraph closed under ancestry, with information content and depths.

    ``ancestors[i]`` holds the sorted indices of node ``i``'s ancestors (``i`` included) and ``anc_dist[i]`` the
    length of the shortest upward path to each, as NLTK's ``shortest_path_distance`` walks it.
    """

    wnids: list[str]
    index: dict[str, int]
    parent_idx: list[list[int]]
    ancestors: list[np.ndarray]
    anc_dist: list[np.ndarray]
    under: np.ndarray  # number of corpus concepts under each node, the node included
    max_depth: np.ndarray
    min_depth: np.ndarray
    names: list[str]
    synsets: list = field(repr=False, default_factory=list)

    @classmethod
    def build(cls, wn, concepts: Iterable[str], instance: bool = True) -> Ontology:
        """Subgraph of ``concepts`` and all their ancestors (hypernyms and, by default, instance hypernyms)."""
        wnids: list[str] = []
        index: dict[str, int] = {}
        synsets: list = []
        stack = [synset_of(wn, w) for w in concepts]
        while stack:
            s = stack.pop()
            w = wnid_of(s)
            if w in index:
                continue
            index[w] = len(wnids)
            wnids.append(w)
            synsets.append(s)
            stack.extend(parents(s, instance))
        parent_idx = [[index[wnid_of(p)] for p in parents(s, instance)] for s in synsets]
        n = len(wnids)
        # Process nodes parents-first so each node merges its parents' finished ancestor tables.
        order = _topological_order(parent_idx)
        dist: list[dict[int, int]] = [{} for _ in range(n)]
        max_depth = np.zeros(n, dtype=np.int64)
        min_depth = np.zeros(n, dtype=np.int64)
        for i in order:
            d = {i: 0}
            for p in parent_idx[i]:
                for a, k in dist[p].items():
                    if k + 1 < d.get(a, 1 << 30):
                        d[a] = k + 1
            dist[i] = d
            if parent_idx[i]:
                max_depth[i] = 1 + max(max_depth[p] for p in parent_idx[i])
                min_depth[i] = 1 + min(min_depth[p] for p in parent_idx[i])
        ancestors, anc_dist = [], []
        under = np.zeros(n, dtype=np.int64)
        for d in dist:
            keys = np.fromiter(sorted(d), dtype=np.int64, count=len(d))
            ancestors.append(keys)
            anc_dist.append(np.array([d[k] for k in keys], dtype=np.int64))
            under[keys] += 1  # each concept counts once under each of its distinct ancestors and itself
        names = [s.name() for s in synsets]
        return cls(wnids, index, parent_idx, ancestors, anc_dist, under, max_depth, min_depth, names, synsets)

    def __len__(self) -> int:
        return len(self.wnids)

    @property
    def ic(self) -> np.ndarray:
        """Information content ``-log(under / corpus size)`` of every node."""
        return -np.log(self.under / len(self.wnids))

    def idx(self, wnids: Sequence[str]) -> np.ndarray:
        """Node indices of ``wnids``; an unknown one raises an error that names it."""
        out = np.empty(len(wnids), dtype=np.int64)
        for k, w in enumerate(wnids):
            try:
                out[k] = self.index[w]
            except KeyError:
                raise NotFoundError(f"{w} is not in the ontology (not an IN-21K concept or an ancestor of "
                                         "one)") from None
        return out

    def ancestor_path_lengths(self, i: int) -> np.ndarray:
        """NLTK's ``shortest_path_distance`` from node ``i`` to each of its ancestors.

        That is the shortest path through any common ancestor, which under multiple inheritance can be shorter
        than the shortest upward path (``anc_dist``).
        """
        di = dict(zip(self.ancestors[i].tolist(), self.anc_dist[i].tolist()))
        out = np.empty(len(self.ancestors[i]), dtype=np.int64)
        for k, s in enumerate(self.ancestors[i].tolist()):
            out[k] = min(di[x] + d for x, d in zip(self.ancestors[s].tolist(), self.anc_dist[s].tolist()))
        return out

    def ancestors_of(self, nodes: np.ndarray) -> np.ndarray:
        """Sorted union of the ancestors of ``nodes`` (node indices), the nodes included."""
        return np.unique(np.concatenate([self.ancestors[i] for i in nodes]))

    def ancestor_set(self, wnid: str) -> set[str]:
        """Proper ancestors of a concept."""
        i = self.index[wnid]
        return {self.wnids[a] for a in self.ancestors[i] if a != i}

    def nltk_ic(self) -> dict:
        """This IC in NLTK's ``ic`` format, so that NLTK's own similarity functions can use it."""
        noun = {int(w[1:]): float(c) for w, c in zip(self.wnids, self.under)}
        noun[0] = float(len(self.wnids))
        return {"n": noun, "v": {0: 1.0}, "a": {0: 1.0}, "r": {0: 1.0}, "s": {0: 1.0}}


def _topological_order(parent_idx: list[list[int]]) -> list[int]:
    """Node indices with every parent before its children."""
    n = len(parent_idx)
    children: list[list[int]] = [[] for _ in range(n)]
    missing = np.zeros(n, dtype=np.int64)
    for i, ps in enumerate(parent_idx):
        missing[i] = len(ps)
        for p in ps:
            children[p].append(i)
    ready = [i for i in range(n) if missing[i] == 0]
    order = []
    while ready:
        i = ready.pop()
        order.append(i)
        for c in children[i]:
            missing[c] -= 1
            if missing[c] == 0:
                ready.append(c)
    if len(order) != n:
        raise RuntimeError("WordNet hypernym graph has a cycle")
    return order
