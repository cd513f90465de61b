"""Synthetic images whose visual similarity follows WordNet: every node has a motif, a concept shows its ancestors'.

Traits. Every WordNet node gets a small coloured motif (two smooth random shapes, each in its own colour) from its
own seeded generator, blended with its parents' motifs (weight ``inherit``): a child resembles its parents, siblings
resemble each other, and nodes far apart in WordNet look unrelated.

Images. An image of a concept scatters copies of the motifs of every node on its hypernym paths (itself included):
a node's expected share of the ``instances`` copies is proportional to its information content to the power
``ic_power``, so specific nodes dominate and ``entity.n.01`` (IC 0) never shows. Two concepts thus share the
motifs of their common ancestors in proportion to how specific those are: the IC that Lin similarity, and the CoG
levels, are built from. Every image also holds ``clutter`` motifs of random WordNet nodes (background objects).
Per-image nuisance: positions (periodic), counts, amplitudes, whether a node shows at all, brightness, contrast,
pixel noise.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from cog_pl.wordnet.ontology import Ontology


@dataclass(frozen=True)
class TraitStyle:
    """How images are drawn from traits (the knobs that set how hard the benchmark is)."""

    motif_size: int = 9
    inherit: float = 0.8  # weight of the parents' motifs in a node's motif
    instances: float = 6.0  # expected copies per image of the concept's nodes' motifs, all nodes together
    ic_power: float = 0.5
    keep: float = 0.8  # probability that a node's motifs appear at all in an image
    clutter: float = 6.0  # expected copies per image of motifs of random WordNet nodes
    clutter_bank: int = 512  # how many random nodes the clutter is drawn from
    noise: float = 0.04
    contrast: float = 0.8


def node_motif(wnid: str, seed: int, size: int) -> np.ndarray:
    """A node's own motif (before inheritance): ``[size, size, 3]`` float in [-1, 1]."""
    rng = np.random.default_rng([seed, int(wnid[1:])])
    yy, xx = np.mgrid[0:size, 0:size] / (size - 1) * 2 - 1
    motif = np.zeros((size, size, 3))
    for _ in range(2):
        cy, cx = rng.uniform(-0.6, 0.6, 2)
        sy, sx = rng.uniform(0.25, 0.8, 2)
        theta = rng.uniform(0, np.pi)
        u = (xx - cx) * np.cos(theta) + (yy - cy) * np.sin(theta)
        v = -(xx - cx) * np.sin(theta) + (yy - cy) * np.cos(theta)
        shape = np.exp(-0.5 * ((u / sx) ** 2 + (v / sy) ** 2)) * np.cos(rng.uniform(0, 2.5) * np.pi * u)
        motif += shape[..., None] * rng.uniform(-1, 1, 3)
    return motif / (np.abs(motif).max() + 1e-8)


def motifs(onto: Ontology, nodes: Iterable[int], seed: int, style: TraitStyle,
           cache: dict[int, np.ndarray] | None = None) -> np.ndarray:
    """Motifs of ``nodes`` (ontology indices): ``inherit`` * the parents' mean + the rest from the node's own."""
    cache = {} if cache is None else cache

    def get(i: int) -> np.ndarray:
        if i not in cache:
            own = node_motif(onto.wnids[i], seed, style.motif_size)
            if onto.parent_idx[i] and style.inherit > 0:
                up = np.mean([get(p) for p in onto.parent_idx[i]], axis=0)
                own = style.inherit * up + np.sqrt(1 - style.inherit ** 2) * own
                own /= np.abs(own).max() + 1e-8
            cache[i] = own
        return cache[i]

    return np.stack([get(int(i)) for i in nodes])


def clutter_bank(onto: Ontology, seed: int, style: TraitStyle = TraitStyle(),
                 cache: dict[int, np.ndarray] | None = None) -> np.ndarray:
    """Motifs of ``style.clutter_bank`` random WordNet nodes, the background objects of every image."""
    rng = np.random.default_rng([seed, 0xB6])
    return motifs(onto, rng.choice(len(onto), min(style.clutter_bank, len(onto)), replace=False), seed, style, cache)


def render(node_motifs: np.ndarray, weights: np.ndarray, n: int, size: int, rng: np.random.Generator,
           style: TraitStyle = TraitStyle(), clutter: np.ndarray | None = None) -> np.ndarray:
    """``n`` images ``[n, size, size, 3]`` uint8 from a concept's ``node_motifs`` ``[A, k, k, 3]``.

    ``weights`` ``[A]``: each node's share of the motif copies (normalised here).
    """
    a, k = len(node_motifs), node_motifs.shape[1]
    share = np.asarray(weights, dtype=float) / np.sum(weights)
    counts = rng.poisson(style.instances * share[None, :], (n, a)) * (rng.random((n, a)) < style.keep)
    spikes = np.zeros((n, a, size, size))
    for i, j in zip(*np.nonzero(counts)):
        m = counts[i, j]
        np.add.at(spikes[i, j], (rng.integers(0, size, m), rng.integers(0, size, m)), rng.uniform(0.6, 1.4, m))
    kernel = np.zeros((a, 3, size, size))
    kernel[:, :, :k, :k] = node_motifs.transpose(0, 3, 1, 2)
    canvas = np.fft.irfft2(np.einsum("najk,acjk->ncjk", np.fft.rfft2(spikes), np.fft.rfft2(kernel)),
                           s=(size, size)).transpose(0, 2, 3, 1)  # periodic placement, [n, S, S, 3]
    if clutter is not None and style.clutter > 0:
        kc = clutter.shape[1]
        for i, m in enumerate(rng.poisson(style.clutter, n)):
            for j, y, x in zip(rng.integers(0, len(clutter), m), rng.integers(0, size, m), rng.integers(0, size, m)):
                patch = np.zeros((size, size, 3))
                patch[:kc, :kc] = clutter[j] * rng.uniform(0.6, 1.4)
                canvas[i] += np.roll(patch, (y, x), axis=(0, 1))
    gain = style.contrast * rng.uniform(0.7, 1.3, (n, 1, 1, 1))
    base = 0.5 + rng.uniform(-0.1, 0.1, (n, 1, 1, 1))
    img = base + gain * canvas + rng.normal(0, style.noise, canvas.shape)
    return (np.clip(img, 0, 1) * 255).round().astype(np.uint8)


def concept_images(onto: Ontology, wnid: str, n: int, size: int, seed: int, image_seed: Sequence[int],
                   style: TraitStyle = TraitStyle(), clutter: np.ndarray | None = None,
                   cache: dict[int, np.ndarray] | None = None) -> np.ndarray:
    """``n`` images of a concept: its nodes' traits depend on ``seed``, the draws on ``image_seed`` too."""
    nodes = onto.ancestors[onto.index[wnid]]
    rng = np.random.default_rng([seed, int(wnid[1:]), *image_seed])
    return render(motifs(onto, nodes, seed, style, cache), onto.ic[nodes] ** style.ic_power, n, size, rng, style,
                  clutter)
