"""``CoGEvaluationCallback``: watch concept generalization while a representation trains.

Every ``every_n_epochs`` epochs (and/or at the end of fit) the callback takes the module's current backbone (an
attribute name or a callable mapping images to features), extracts features of a fixed subset of IN-1K and the CoG
levels (``concepts`` per domain, ``train_images`` and ``test_images`` per concept), trains a fast probe per domain
and logs ``cog/in1k/top1``, ``cog/l1/top1`` .. ``cog/l5/top1`` through the module's logger.

The probe: K linear heads with learning rates ``lrs`` trained side by side for ``epochs`` epochs (the protocol's
SGD and cosine rule on L2-normalised features); the head with the best accuracy on a 20 % validation split of the
train images is tested. Cost per call, bounded by the sizes: one forward pass over
``len(domains) * concepts * (train_images + test_images)`` images plus ``len(domains)`` probes on at most that many
features (seconds on a CPU for the defaults).

With ``methods=("linear", "knn")`` (or ``("knn",)``) the weighted k-NN classifier of the protocol
(:mod:`cog_pl.probe.knn_protocol`: k of ``knn_ks`` chosen on the same 20 % validation split, then the train images
vote) is logged too, as ``cog/<domain>/knn_top1``: no training, two similarity products per domain, cheaper than
the probes (``("knn",)`` alone skips them). Rank zero extracts and probes under DDP; the other ranks wait and
receive the numbers. The module's train/eval mode is restored afterwards and no gradient is computed.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import lightning as L
import numpy as np
import torch
import torch.nn.functional as F

from cog_pl.protocol import DOMAINS, FeatureProtocol, ProbeProtocol, check_domains

logger = logging.getLogger(__name__)
#: What the callback can log per domain.
METHODS = ("linear", "knn")


def metric_key(domain: str) -> str:
    """The name a domain's accuracy is logged under: ``in1k``, ``l1`` .. ``l5``."""
    return domain.removeprefix("cog_")


class CoGEvaluationCallback(L.Callback):
    """Every ``every_n_epochs`` epochs (and at the end of fit), the CoG top-1 of the module's current backbone on a
    fixed subset of each domain, logged as ``cog/<domain>/top1`` (and ``cog/<domain>/knn_top1`` with ``knn`` among
    ``methods``); ``history`` keeps every call's numbers. See the module's docstring for the probe and its cost."""

    def __init__(self, in1k_root: str | None = None, in21k_root: str | None = None, benchmark: str | None = None,
                 backbone: str | Callable[[torch.Tensor], torch.Tensor] = "backbone",
                 domains: Sequence[str] = DOMAINS, every_n_epochs: int = 1, at_fit_end: bool = True,
                 concepts: int = 20, train_images: int = 20, test_images: int = 10, transform: Any = "protocol",
                 lrs: Sequence[float] = (0.3, 3.0, 30.0), weight_decay: float = 1e-6, epochs: int = 30,
                 batch_size: int = FeatureProtocol().batch_size, seed: int = 0,
                 methods: Sequence[str] = ("linear",), knn_ks: Sequence[int] = (10, 20, 100, 200),
                 knn_precision: str = "auto") -> None:
        super().__init__()
        check_domains(domains, "CoGEvaluationCallback: ")  # refused now rather than at the end of the first epoch
        unknown = [m for m in methods if m not in METHODS]
        if unknown or not methods:
            raise ValueError(f"CoGEvaluationCallback: methods {list(methods)}; choose one or more of "
                             f"{', '.join(METHODS)}")
        from cog_pl.probe.knn import KNNSettings
        from cog_pl.probe.knn_protocol import resolve_knn_precision

        self.methods, self.knn = tuple(dict.fromkeys(methods)), KNNSettings(ks=tuple(knn_ks))
        self.knn_precision = resolve_knn_precision(knn_precision, "cpu")  # the features are on the host
        if not in1k_root and "in1k" in domains:
            raise ValueError("CoGEvaluationCallback: in1k needs in1k_root (or leave in1k out of domains)")
        if not in21k_root and any(d != "in1k" for d in domains):
            raise ValueError("CoGEvaluationCallback: the CoG levels need in21k_root")
        self.roots = {"in1k_root": in1k_root, "in21k_root": in21k_root, "benchmark": benchmark}
        self.backbone, self.domains = backbone, tuple(domains)
        self.every_n_epochs, self.at_fit_end = every_n_epochs, at_fit_end
        self.sizes = (concepts, train_images, test_images)
        self.transform, self.batch_size, self.seed = transform, batch_size, seed
        self.lrs, self.weight_decay, self.epochs = tuple(lrs), weight_decay, epochs
        self._data: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]] | None = None
        self.history: list[dict[str, float]] = []

    # -- data: a fixed subset of each domain, decoded once ------------------------------------------------------
    def _subset(self, labels: Sequence[int], per_concept: int) -> list[int]:
        picked: dict[int, list[int]] = {}
        for i, y in enumerate(labels):
            if y < self.sizes[0] and len(picked.setdefault(y, [])) < per_concept:
                picked[y].append(i)
        return [i for y in sorted(picked) for i in picked[y]]

    def _load(self) -> dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]:
        from cog_pl.extract.datamodule import ExtractionDataModule

        dm = ExtractionDataModule(domains=self.domains, transform=self.transform, num_workers=0, **self.roots)
        out = {}
        for domain in self.domains:
            sets = dm.datasets(domain)
            tensors = []
            for split, n in (("train", self.sizes[1]), ("test", self.sizes[2])):
                ds = sets[split][0]
                rows = self._subset(ds.labels, n)
                items = [ds[i] for i in rows]
                items = [it for it in items if it is not None]
                tensors += [torch.stack([it["image"] for it in items]), torch.tensor([it["label"] for it in items])]
            out[domain] = tuple(tensors)
        return out

    # -- one evaluation -----------------------------------------------------------------------------------------
    def _features_fn(self, pl_module: L.LightningModule) -> Callable[[torch.Tensor], torch.Tensor]:
        if callable(self.backbone):
            return self.backbone
        fn = getattr(pl_module, self.backbone, None)
        if fn is None or not callable(fn):
            raise AttributeError(f"CoGEvaluationCallback: the module has no callable attribute {self.backbone!r}; "
                                 "pass backbone= an attribute name or a callable mapping images to features")
        return fn

    @torch.no_grad()
    def _features(self, fn, images: torch.Tensor, device: torch.device) -> torch.Tensor:
        parts = [fn(images[i:i + self.batch_size].to(device)).float().flatten(1).cpu()
                 for i in range(0, len(images), self.batch_size)]
        return F.normalize(torch.cat(parts), dim=1)

    def _probe(self, xtr: torch.Tensor, ytr: torch.Tensor, xte: torch.Tensor, yte: torch.Tensor) -> float:
        from cog_pl.data.sampling import val_split
        from cog_pl.probe.data import ProbeData
        from cog_pl.probe.tuner import train_probe

        classes = int(max(ytr.max(), yte.max())) + 1
        protocol = dataclasses.replace(ProbeProtocol(), epochs=self.epochs, batch_size=256)
        k = len(self.lrs)
        fit, val = val_split(ytr.numpy(), protocol.val_fraction, self.seed)
        kw = {"protocol": protocol, "seeds": [self.seed + i for i in range(k)], "perm_seed": self.seed}
        tuned = train_probe(ProbeData(xtr[fit], ytr[fit], xtr[val], ytr[val], classes), list(self.lrs),
                            [self.weight_decay] * k, **kw)
        best = int(np.argmax(tuned.top1.numpy()))
        final = train_probe(ProbeData(xtr, ytr, xte, yte, classes), [self.lrs[best]], [self.weight_decay],
                            protocol=protocol, seeds=[self.seed], perm_seed=self.seed)
        return float(final.top1[0])

    def _knn(self, xtr: torch.Tensor, ytr: torch.Tensor, xte: torch.Tensor, yte: torch.Tensor) -> float:
        """Test top-1 of the weighted k-NN, k chosen on the 20 % validation split of the train images."""
        from cog_pl.probe.knn_protocol import KNNData, score_test, validate

        data = KNNData.place(xtr, ytr, int(max(ytr.max(), yte.max())) + 1, "cpu")
        k = validate(data, self.seed, [None], self.knn, ProbeProtocol().val_fraction, self.knn_precision)[None]["k"]
        return score_test(data, xte, yte, {(None, self.seed): k}, self.knn, self.knn_precision)[None, self.seed][
            "test_top1"]

    def evaluate(self, pl_module: L.LightningModule) -> dict[str, float]:
        """Extract and probe every domain now; returns ``{"cog/<domain>/top1": percent, ...}`` (and
        ``cog/<domain>/knn_top1`` with the k-NN among the methods)."""
        if self._data is None:
            self._data = self._load()
        fn = self._features_fn(pl_module)
        was_training = pl_module.training
        pl_module.eval()
        start = time.perf_counter()
        try:
            metrics = {}
            for domain, (xtr, ytr, xte, yte) in self._data.items():
                ftr = self._features(fn, xtr, pl_module.device)
                fte = self._features(fn, xte, pl_module.device)
                if "linear" in self.methods:
                    metrics[f"cog/{metric_key(domain)}/top1"] = self._probe(ftr, ytr, fte, yte)
                if "knn" in self.methods:
                    metrics[f"cog/{metric_key(domain)}/knn_top1"] = self._knn(ftr, ytr, fte, yte)
        finally:
            pl_module.train(was_training)
        metrics["cog/seconds"] = time.perf_counter() - start
        return metrics

    # -- Lightning hooks ----------------------------------------------------------------------------------------
    def _run(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        metrics = self.evaluate(pl_module) if trainer.is_global_zero else None
        metrics = trainer.strategy.broadcast(metrics, src=0)
        self.history.append({"epoch": trainer.current_epoch, **metrics})
        for name, value in metrics.items():
            pl_module.log(name, value, rank_zero_only=True)
        logger.info("epoch %d: %s", trainer.current_epoch,
                    ", ".join(f"{k} {v:.2f}" for k, v in metrics.items()))

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        last = trainer.max_epochs is not None and trainer.current_epoch + 1 >= trainer.max_epochs
        if self.every_n_epochs and (trainer.current_epoch + 1) % self.every_n_epochs == 0:
            self._run(trainer, pl_module)
        elif self.at_fit_end and last:
            self._run(trainer, pl_module)
