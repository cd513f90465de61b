"""Replicas of the files the paper's model authors publish, built in the tests from each publisher's saving code.

Each ``publish_<model>(path, seed)`` writes, with random tensors, the file exactly as its publisher saved it (the
container, the key names, the extra heads, networks and pickled objects it really holds; cited in each module) and
returns a :class:`Replica`: the reference forward of the paper's feature definition, written independently of
``cog_pl.models`` (the publisher's own model code from PyPI where it exists), which the package's features must equal.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass
class Replica:
    """A published file written by a test, and what the paper computed from it."""

    #: images (B, 3, S, S), RGB, normalised with the model's mean and std -> the paper's features (B, D)
    reference: Callable[[torch.Tensor], torch.Tensor]
    image_size: int
    feature_dim: int
    #: the file cannot be read with ``torch.load(weights_only=True)`` (TorchScript, dill): needs the opt-in
    needs_trust: bool = False
    #: a vision-language model's file: token ids (N, L) -> its text tower's embeddings (N, E), None for others
    text_reference: Callable[[torch.Tensor], torch.Tensor] | None = None
