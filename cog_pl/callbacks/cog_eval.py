"""``CoGEvaluationCallback``: watch concept generalization while a representation trains.

Every ``every_n_epochs`` epochs (and/or at the end of fit) the callback takes the module's current backbone (an
attribute name or a callable mapping images to features), extracts features of a fixed subset of IN-1K and the CoG
levels (``concepts`` per domain, ``train_images`` and ``test_images`` per concept), trains a fast probe per domain
and logs ``cog/in1k/top1``, ``cog/l1/top1`` .. ``cog/l5/top1`` through the module's logger, as fractions in [0, 1]
(the unit of every accuracy the package's LightningModules log; the results store keeps percent).

The probe: K linear heads with learning rates ``lrs`` trained side by side for ``epochs`` epochs (the protocol's
SGD and cosine rule on L2-normalised features); the head with the best accuracy on a 20 % validation split of the
train images is tested. Cost per call, bounded by the sizes: one forward pass over
``len(domains) * concepts * (train_images + test_images)`` images (3,600 for the defaults) on the module's device, in
the backbone's dtype (``precision="bf16-true"`` casts the weights, the images follow), plus ``len(domains)`` probes on
at most that many features, with the process's threads (``benchmarks/bench_callback.py`` times a call at any sizes).

With ``methods=("linear", "knn")`` (or ``("knn",)``) the weighted k-NN classifier of the protocol
(:mod:`cog_pl.probe.knn_protocol`: k of ``knn_ks`` chosen on the same 20 % validation split, then the train images
vote) is logged too, as ``cog/<domain>/knn_top1``: no training, two similarity products per domain, cheaper than
the probes (``("knn",)`` alone skips them).

As a Lightning user expects (docs/lightning.md): the data roots, the backbone attribute and the strategy are checked
at ``setup``, before the first epoch; rank zero extracts and probes under DDP, the other ranks wait and receive the
numbers, and every rank logs them (``sync_dist`` with ``max`` of equal values: exact, no warning); strategies that
shard the model (FSDP, DeepSpeed) are refused, since a forward on rank zero alone would wait forever for the others;
the ``training`` flag of every submodule is restored as it was found and no gradient is computed; ``history`` (one
dict per call) is saved in checkpoints and restored on resume. It works under ``lightning.Trainer`` and
``pytorch_lightning.Trainer`` alike; a ``pytorch_lightning`` LightningCLI takes it as
:class:`cog_pl.callbacks.pytorch_lightning.CoGEvaluationCallback`.

On the console, on rank zero, where the Trainer's package prints its own messages: at setup one line saying how the
images are read (size, resize, normalisation, and where ``transform="auto"`` found them), a warning when the first
training batch's images have another size, and one line of top-1s per call.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from cog_pl.callbacks.eval_input import declared_transform, describe, image_size, px
from cog_pl.data.transforms import TransformConfig, protocol_transform
from cog_pl.errors import CogError, MissingFileError
from cog_pl.protocol import DOMAINS, FeatureProtocol, ProbeProtocol, check_domains

logger = logging.getLogger(__name__)
#: What the callback can log per domain.
METHODS = ("linear", "knn")
#: Strategies that shard the model's parameters across processes: a forward needs every rank (names, so that the
#: check needs neither DeepSpeed installed nor one of the two Lightning packages).
SHARDED_STRATEGIES = ("FSDPStrategy", "DeepSpeedStrategy", "ModelParallelStrategy")
Transform = TransformConfig | Callable[[Any], torch.Tensor]


def metric_key(domain: str) -> str:
    """The name a domain's accuracy is logged under: ``in1k``, ``l1`` .. ``l5``."""
    return domain.removeprefix("cog_")


def domain_id(name: str) -> str:
    """A domain given by its id (``in1k``, ``cog_l1``) or by its metric key (``l1`` .. ``l5``, any case)."""
    return f"cog_{name.lower()}" if f"cog_{name.lower()}" in DOMAINS else name


class CoGEvaluationCallback(L.Callback):
    """Probe the module's backbone on small fixed subsets of IN-1K and the CoG levels during training.

    Args:
        in1k_root: IN-1K's image root (as for extraction).
        in21k_root: IN-21K's image root.
        benchmark: a benchmark file, else the official levels.
        backbone: the module's attribute mapping normalised images to features, or such a callable.
        domains: the domains to probe, by id (``cog_l5``) or metric key (``l5``).
        every_n_epochs: evaluate every this many epochs (0 disables the periodic calls).
        at_fit_end: evaluate once more at the end of fit.
        concepts: concepts per domain in the subset.
        train_images: train images per concept.
        test_images: test images per concept.
        transform: how images are read: ``"auto"`` (the default: what the datamodule or the module declares, a
            ``transform_config``, an input size or a torchvision transform, else the protocol's 224 px:
            :func:`~cog_pl.callbacks.eval_input.declared_transform`), ``"protocol"``, a zoo model name, an
            image size S (resize = crop = S), a dict of :class:`TransformConfig` fields, a :class:`TransformConfig`,
            or any callable from a PIL image to a normalised tensor (a torchvision ``Compose``).
        lrs: the probe's learning rates (the best on the validation split is kept).
        weight_decay: the probe's weight decay.
        epochs: the probe's epochs.
        batch_size: the probe's batch size.
        seed: the subset's and the probe's seed.
        methods: ``linear``, ``knn`` or both.
        knn_ks: the k-NN's candidate k.
        knn_precision: the k-NN's similarity precision (``auto``, ``float32``, ...).

    Example:
        >>> import lightning as L
        >>> cog = CoGEvaluationCallback(in1k_root="/data/in1k", in21k_root="/data/in21k", backbone="encoder",
        ...                             every_n_epochs=5)  # doctest: +SKIP
        >>> L.Trainer(max_epochs=100, callbacks=[cog]).fit(my_module, my_data)  # doctest: +SKIP

    The accuracies are logged as ``cog/{key}/top1`` and ``cog/{key}/knn_top1``, ``key`` being ``in1k``, ``l1`` ..
    ``l5`` (:func:`metric_key`).
    """

    def __init__(self, in1k_root: str | None = None, in21k_root: str | None = None, benchmark: str | None = None,
                 backbone: str | Callable[[torch.Tensor], torch.Tensor] = "backbone",
                 domains: Sequence[str] = DOMAINS, every_n_epochs: int = 1, at_fit_end: bool = True,
                 concepts: int = 20, train_images: int = 20, test_images: int = 10, transform: Any = "auto",
                 lrs: Sequence[float] = (0.3, 3.0, 30.0), weight_decay: float = 1e-6, epochs: int = 30,
                 batch_size: int = FeatureProtocol().batch_size, seed: int = 0,
                 methods: Sequence[str] = ("linear",), knn_ks: Sequence[int] = (10, 20, 100, 200),
                 knn_precision: str = "auto") -> None:
        super().__init__()
        domains = tuple(domain_id(d) for d in domains)
        check_domains(domains, "CoGEvaluationCallback: ")  # refused now rather than at the end of the first epoch
        unknown = [m for m in methods if m not in METHODS]
        if unknown or not methods:
            raise CogError(f"CoGEvaluationCallback: methods {list(methods)}; choose one or more of "
                           f"{', '.join(METHODS)}")
        from cog_pl.probe.knn import KNNSettings
        from cog_pl.probe.knn_protocol import resolve_knn_precision

        self.methods, self.knn = tuple(dict.fromkeys(methods)), KNNSettings(ks=tuple(knn_ks))
        self.knn_precision = resolve_knn_precision(knn_precision, "cpu")  # the features are on the host
        if not in1k_root and "in1k" in domains:
            raise CogError("CoGEvaluationCallback: in1k needs in1k_root (or leave in1k out of domains)")
        if not in21k_root and any(d != "in1k" for d in domains):
            raise CogError("CoGEvaluationCallback: the CoG levels need in21k_root")
        self.roots = {"in1k_root": in1k_root, "in21k_root": in21k_root, "benchmark": benchmark}
        self.backbone, self.domains = backbone, domains
        self.every_n_epochs, self.at_fit_end = every_n_epochs, at_fit_end
        self.sizes = (concepts, train_images, test_images)
        self.transform = _check_transform(transform)
        self.batch_size, self.seed = batch_size, seed
        self.lrs, self.weight_decay, self.epochs = tuple(lrs), weight_decay, epochs
        self._data: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]] | None = None
        self.history: list[dict[str, float]] = []
        self.last_seconds: float | None = None
        self._size_checked = False

    # -- checkpointed state: the history of a run survives a resume --------------------------------------------
    @property
    def state_key(self) -> str:
        return self._generate_state_key(domains=self.domains, methods=self.methods)

    def state_dict(self) -> dict[str, Any]:
        return {"history": [dict(h) for h in self.history]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.history = [dict(h) for h in state_dict.get("history", [])]

    # -- data: a fixed subset of each domain, decoded once ------------------------------------------------------
    def eval_transform(self, trainer: Any = None, pl_module: Any = None) -> Transform:
        """The transform images are read with (``"auto"`` resolved against the run's datamodule and module:
        :func:`~cog_pl.callbacks.eval_input.declared_transform`)."""
        return self._resolved_transform(trainer, pl_module)[0]

    def _resolved_transform(self, trainer: Any, pl_module: Any) -> tuple[Transform, str]:
        if self.transform != "auto":
            return self.transform, "transform="
        return declared_transform(getattr(trainer, "datamodule", None), pl_module)

    def _load_resolved(self, trainer: Any, pl_module: Any) -> str:
        """Decode the subsets with the resolved transform; the line that says which."""
        transform, source = self._resolved_transform(trainer, pl_module)
        self._data = self._load(transform)
        return f"CoGEvaluationCallback: images read at {describe(transform, self.image_size)}; from {source}"

    @property
    def image_size(self) -> tuple[int, int] | None:
        """Height and width of the decoded images (``None`` before they are)."""
        return tuple(next(iter(self._data.values()))[0].shape[-2:]) if self._data else None

    def _subset(self, labels: Sequence[int], per_concept: int) -> list[int]:
        picked: dict[int, list[int]] = {}
        for i, y in enumerate(labels):
            if y < self.sizes[0] and len(picked.setdefault(y, [])) < per_concept:
                picked[y].append(i)
        return [i for y in sorted(picked) for i in picked[y]]

    def _load(self, transform: Transform) -> dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]:
        from cog_pl.extract.datamodule import ExtractionDataModule

        config = transform if isinstance(transform, TransformConfig) else protocol_transform()
        dm = ExtractionDataModule(domains=self.domains, transform=config, num_workers=0, **self.roots)
        out = {}
        for domain in self.domains:
            sets = dm.datasets(domain)
            tensors = []
            for split, n in (("train", self.sizes[1]), ("test", self.sizes[2])):
                ds = sets[split][0]
                if not isinstance(transform, TransformConfig):  # the user's own callable
                    getattr(ds, "base", ds).transform = transform
                rows = self._subset(ds.labels, n)
                items = [ds[i] for i in rows]
                items = [it for it in items if it is not None]
                tensors += [torch.stack([it["image"] for it in items]), torch.tensor([it["label"] for it in items])]
            out[domain] = tuple(tensors)
        return out

    # -- Lightning hooks ----------------------------------------------------------------------------------------
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Refuse what would fail at the first evaluation (a sharding strategy, no backbone, a wrong root) now, and
        decode the subsets on rank zero."""
        if stage != "fit":
            return
        sharded = [c.__name__ for c in type(trainer.strategy).__mro__ if c.__name__ in SHARDED_STRATEGIES]
        if sharded:
            raise CogError(f"CoGEvaluationCallback: {sharded[0]} shards the model across processes, and the "
                           "callback runs the backbone on rank zero alone, which would wait forever for the "
                           "others; train with DDP, or call evaluate() yourself on a gathered copy")
        self._features_fn(pl_module)
        for option, path in self.roots.items():
            if path and not Path(path).exists():
                raise MissingFileError(f"CoGEvaluationCallback: {option} {path} does not exist")
        if trainer.is_global_zero and self._data is None:
            say(trainer, self._load_resolved(trainer, pl_module))  # names a missing synset or split

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        """Warn once when the training images' size is not the size the evaluation reads."""
        if self._size_checked or not trainer.is_global_zero or not self._data:
            return
        self._size_checked = True
        trained = image_size(batch)
        if trained and trained != self.image_size:
            warnings.warn(f"CoGEvaluationCallback: the evaluation reads images at {px(self.image_size)} but the "
                          f"training batches are {px(trained)}; pass transform={trained[-1]} (or declare "
                          "input_size on the module) to evaluate at the training size", UserWarning, stacklevel=2)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        last = trainer.max_epochs is not None and trainer.current_epoch + 1 >= trainer.max_epochs
        if self.every_n_epochs and (trainer.current_epoch + 1) % self.every_n_epochs == 0:
            self._run(trainer, pl_module)
        elif self.at_fit_end and last:
            self._run(trainer, pl_module)

    def _run(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        result = (self.evaluate(pl_module), self.last_seconds) if trainer.is_global_zero else None
        metrics, seconds = trainer.strategy.broadcast(result, src=0)
        self.last_seconds = seconds
        self.history.append({"epoch": trainer.current_epoch, **metrics, "seconds": seconds})
        for name, value in metrics.items():  # every rank holds the same numbers: max of equal values is exact
            pl_module.log(name, value, sync_dist=True, reduce_fx="max")
        if trainer.is_global_zero:
            say(trainer, summary_line(trainer.current_epoch, metrics, seconds))

    # -- one evaluation -----------------------------------------------------------------------------------------
    def _features_fn(self, pl_module: nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
        if callable(self.backbone):
            return self.backbone
        fn = getattr(pl_module, self.backbone, None)
        if fn is None or not callable(fn):
            raise AttributeError(f"CoGEvaluationCallback: the module has no callable attribute {self.backbone!r}; "
                                 "pass backbone= an attribute name or a callable mapping images to features")
        return fn

    @torch.no_grad()
    def _features(self, fn, images: torch.Tensor, device: torch.device,
                  dtype: torch.dtype | None = None) -> torch.Tensor:
        parts = [fn(images[i:i + self.batch_size].to(device=device, dtype=dtype)).float().flatten(1).cpu()
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
        return float(final.top1[0]) / 100

    def _knn(self, xtr: torch.Tensor, ytr: torch.Tensor, xte: torch.Tensor, yte: torch.Tensor) -> float:
        """Test top-1 of the weighted k-NN, k chosen on the 20 % validation split of the train images."""
        from cog_pl.probe.knn_protocol import KNNData, score_test, validate

        data = KNNData.place(xtr, ytr, int(max(ytr.max(), yte.max())) + 1, "cpu")
        k = validate(data, self.seed, [None], self.knn, ProbeProtocol().val_fraction, self.knn_precision)[None]["k"]
        return score_test(data, xte, yte, {(None, self.seed): k}, self.knn, self.knn_precision)[None, self.seed][
            "test_top1"] / 100

    def evaluate(self, pl_module: nn.Module) -> dict[str, float]:
        """Extract and probe every domain now; returns ``{"cog/<domain>/top1": fraction, ...}`` (and
        ``cog/<domain>/knn_top1`` with the k-NN among the methods); ``last_seconds`` is what it took."""
        if self._data is None:
            logger.info(self._load_resolved(None, pl_module))
        fn = self._features_fn(pl_module)
        modes = _modes(pl_module, fn)
        pl_module.eval()
        for module in _modules_of(fn):
            module.eval()
        device = getattr(pl_module, "device", None) or next(iter(pl_module.parameters()), torch.empty(0)).device
        dtype = _input_dtype(pl_module, fn)  # precision="bf16-true" / "16-true" casts the weights, not our images
        start = time.perf_counter()
        try:
            metrics = {}
            for domain, (xtr, ytr, xte, yte) in self._data.items():
                ftr = self._features(fn, xtr, device, dtype)
                fte = self._features(fn, xte, device, dtype)
                if "linear" in self.methods:
                    metrics[f"cog/{metric_key(domain)}/top1"] = self._probe(ftr, ytr, fte, yte)
                if "knn" in self.methods:
                    metrics[f"cog/{metric_key(domain)}/knn_top1"] = self._knn(ftr, ytr, fte, yte)
        finally:
            for module, training in modes:  # exactly as found: a frozen submodule stays in eval mode
                module.training = training
        self.last_seconds = time.perf_counter() - start
        return metrics


def say(trainer: Any, line: str) -> None:
    """A line on the console where the Trainer's own package prints its rank-zero messages (``GPU available``,
    ``ModelCheckpoint``'s): the ``utilities.rank_zero`` logger of ``lightning.pytorch`` or ``pytorch_lightning``,
    which each package shows unless the application configured logging itself. The caller is rank zero."""
    pl = sys.modules.get("pytorch_lightning")  # imported where a pytorch_lightning Trainer runs
    package = "pytorch_lightning" if pl is not None and isinstance(trainer, pl.Trainer) else "lightning.pytorch"
    logging.getLogger(f"{package}.utilities.rank_zero").info(line)


def summary_line(epoch: int, metrics: dict[str, float], seconds: float) -> str:
    """One evaluation in a short line: each domain's linear top-1 (the k-NN's where no probe ran)."""
    keys = [k for k in metrics if k.endswith("/top1")] or list(metrics)
    shown = "  ".join(f"{k.split('/')[1]} {metrics[k]:.3f}" for k in keys)
    kind = "top-1" if keys and keys[0].endswith("/top1") else "k-NN top-1"
    return f"CoG {kind} at epoch {epoch}: {shown} ({seconds:.1f} s)"


def _input_dtype(pl_module: nn.Module, fn: Any) -> torch.dtype:
    """The floating dtype of the backbone's weights (else the module's): the images are cast to it."""
    for module in (*_modules_of(fn), pl_module):
        for param in module.parameters():
            if param.is_floating_point():
                return param.dtype
    return torch.get_default_dtype()


def _check_transform(transform: Any) -> Any:
    """``"auto"`` and callables as given; anything else resolved now, so a bad value is refused at construction."""
    from cog_pl.models.transform import resolve_transform

    if transform == "auto" or (callable(transform) and not isinstance(transform, (str, TransformConfig))):
        return transform
    try:
        return resolve_transform(transform)
    except (TypeError, ValueError) as err:
        raise CogError(f"CoGEvaluationCallback: transform {err}") from err


def _modules_of(fn: Any) -> list[nn.Module]:
    """The modules a backbone callable runs: itself, or the module a bound method belongs to."""
    if isinstance(fn, nn.Module):
        return [fn]
    owner = getattr(fn, "__self__", None) if inspect.ismethod(fn) else None
    return [owner] if isinstance(owner, nn.Module) else []


def _modes(pl_module: nn.Module, fn: Any) -> list[tuple[nn.Module, bool]]:
    """The ``training`` flag of every module the evaluation may switch, each once."""
    seen: dict[int, tuple[nn.Module, bool]] = {}
    for root in (pl_module, *_modules_of(fn)):
        for module in root.modules():
            seen.setdefault(id(module), (module, module.training))
    return list(seen.values())
