"""How :class:`~cog_pl.callbacks.cog_eval.CoGEvaluationCallback` scores a domain's features: one table,
:data:`EVAL_METHODS`, from a method's name to the key it is logged under, its words on the console and its score
function, and the settings those functions read (:class:`EvalSettings`).

A method added to the table (a function ``(settings, train features, train labels, test features, test labels) ->
top-1 as a fraction``, its key suffix and label; its own settings as :class:`EvalSettings` fields) is taken by the
callback's ``methods`` argument, the check of it, its metric keys, its console line and its checkpointed settings,
with no other change. The features are L2-normalised, on the host, as the callback extracts them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np
import torch

from cog_pl.errors import CogError
from cog_pl.probe.ridge import REGS
from cog_pl.protocol import ProbeProtocol


@dataclasses.dataclass(frozen=True)
class EvalSettings:
    """What the score functions read: the linear probe's learning rates, weight decay and epochs, the k-NN's ks and
    similarity precision (resolved: ``32-true`` on the host), the ridge probe's penalties, and the seed of the
    validation split and the probe."""

    lrs: tuple[float, ...] = (0.3, 3.0, 30.0)
    weight_decay: float = 1e-6
    epochs: int = 30
    seed: int = 0
    knn_ks: tuple[int, ...] = (10, 20, 100, 200)
    knn_precision: str = "32-true"
    ridge_regs: tuple[float, ...] = REGS


Score = Callable[[EvalSettings, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], float]


@dataclasses.dataclass(frozen=True)
class EvalMethod:
    """One way to score a domain: the key suffix it is logged under (``{name}/{domain}/{suffix}``), its words in
    the console line, and its score function."""

    suffix: str
    label: str
    score: Score


def linear_top1(settings: EvalSettings, xtr: torch.Tensor, ytr: torch.Tensor, xte: torch.Tensor,
                yte: torch.Tensor) -> float:
    """Test top-1 of the linear probe: K heads (``settings.lrs``) trained side by side with the protocol's SGD and
    cosine rule, the best on a 20 % validation split of the train images retrained on all of them and tested."""
    from cog_pl.data.sampling import val_split
    from cog_pl.probe.data import ProbeData
    from cog_pl.probe.tuner import train_probe

    classes = int(max(ytr.max(), yte.max())) + 1
    protocol = dataclasses.replace(ProbeProtocol(), epochs=settings.epochs, batch_size=256)
    k, seed, wd = len(settings.lrs), settings.seed, settings.weight_decay
    fit, val = val_split(ytr.numpy(), protocol.val_fraction, seed)
    tuned = train_probe(ProbeData(xtr[fit], ytr[fit], xtr[val], ytr[val], classes), list(settings.lrs), [wd] * k,
                        protocol=protocol, seeds=[seed + i for i in range(k)], perm_seed=seed)
    best = int(np.argmax(tuned.top1.numpy()))
    final = train_probe(ProbeData(xtr, ytr, xte, yte, classes), [settings.lrs[best]], [wd], protocol=protocol,
                        seeds=[seed], perm_seed=seed)
    return float(final.top1[0]) / 100


def knn_top1(settings: EvalSettings, xtr: torch.Tensor, ytr: torch.Tensor, xte: torch.Tensor,
             yte: torch.Tensor) -> float:
    """Test top-1 of the protocol's weighted k-NN (:mod:`cog_pl.probe.knn_protocol`), k of ``settings.knn_ks``
    chosen on the same 20 % validation split of the train images."""
    from cog_pl.probe.knn import KNNSettings
    from cog_pl.probe.knn_protocol import KNNData, score_test, validate

    knn, precision, seed = KNNSettings(ks=settings.knn_ks), settings.knn_precision, settings.seed
    data = KNNData.place(xtr, ytr, int(max(ytr.max(), yte.max())) + 1, "cpu")
    k = validate(data, seed, [None], knn, ProbeProtocol().val_fraction, precision)[None]["k"]
    return score_test(data, xte, yte, {(None, seed): k}, knn, precision)[None, seed]["test_top1"] / 100


def ridge_top1(settings: EvalSettings, xtr: torch.Tensor, ytr: torch.Tensor, xte: torch.Tensor,
               yte: torch.Tensor) -> float:
    """Test top-1 of the closed-form ridge probe (:mod:`cog_pl.probe.ridge`): the penalty of ``settings.ridge_regs``
    chosen on the same 20 % validation split of the train images (one eigendecomposition for all of them), the
    head of that penalty refitted on all of them (one Cholesky solve) and tested. No training: the cheap signal to
    watch every epoch."""
    from cog_pl.probe.ridge import RidgeProbe

    probe = RidgeProbe(xtr, ytr, int(max(ytr.max(), yte.max())) + 1, settings.ridge_regs)
    choice = probe.choose(settings.seed, None, ProbeProtocol().val_fraction)
    return probe.test_top1(settings.seed, None, choice.reg, xte, yte) / 100


#: The methods the callback can run, by the name ``methods=`` takes.
EVAL_METHODS: dict[str, EvalMethod] = {
    "linear": EvalMethod("top1", "top-1", linear_top1),
    "knn": EvalMethod("knn_top1", "k-NN top-1", knn_top1),
    "ridge": EvalMethod("ridge_top1", "ridge top-1", ridge_top1),
}


def check_methods(methods: Sequence[str] | str, what: str = "CoGEvaluationCallback") -> tuple[str, ...]:
    """The methods in the order given (one name alone as a sequence of it), each once; an unknown name or none at
    all refused in one line."""
    methods = (methods,) if isinstance(methods, str) else tuple(methods)
    unknown = [m for m in methods if m not in EVAL_METHODS]
    if unknown or not methods:
        raise CogError(f"{what}: methods {list(methods)}; choose one or more of {', '.join(EVAL_METHODS)}")
    return tuple(dict.fromkeys(methods))
