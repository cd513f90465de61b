"""``CoGEvaluationCallback``: watch concept generalization while a representation trains.

The callback takes the module's current backbone (an attribute name or a callable mapping images to features),
extracts features of a fixed subset of IN-1K and the CoG levels (``concepts`` per domain, ``train_images`` and
``test_images`` per concept), scores each domain with each of ``methods`` (:mod:`cog_pl.callbacks.eval_methods`: the
linear probe, the k-NN) and logs ``cog/in1k/top1``, ``cog/l1/top1`` .. ``cog/l5/top1`` (``cog/<domain>/knn_top1``
for the k-NN) through the module's logger, as fractions in [0, 1] (the unit of every accuracy the package's
LightningModules log; the results store keeps percent). ``cog`` is the callback's ``name``: a second instance in
the same Trainer takes another one, which prefixes its keys and names its checkpointed state.

When (:mod:`cog_pl.callbacks.eval_schedule`): at the end of every ``every_n_epochs``-th training epoch, and with
``at_fit_end`` once more after the last training epoch, whatever stopped the fit (``max_epochs``, ``max_steps``,
``max_time``, ``EarlyStopping``); in ``trainer.validate``, once, at the end of the validation epoch (its keys in
what ``validate`` returns); under ``fast_dev_run``, one tiny evaluation; ``test`` and ``predict`` run none and say
so. The keys are in ``trainer.callback_metrics`` only from the end of an epoch that evaluated until the start of the
next training epoch: ``EarlyStopping(check_on_train_epoch_end=True, strict=False)`` and
``ModelCheckpoint(every_n_epochs=every_n_epochs, save_on_train_epoch_end=True)`` compare evaluations, never an old
value again (docs/lightning.md). Lightning runs every other callback's ``on_train_epoch_end`` before those two, so
the order of the Trainer's callback list does not matter.

The probe: K linear heads with learning rates ``lrs`` trained side by side for ``epochs`` epochs (the protocol's
SGD and cosine rule on L2-normalised features); the head with the best accuracy on a 20 % validation split of the
train images is tested. Cost per call, bounded by the sizes: one forward pass over
``len(domains) * concepts * (train_images + test_images)`` images (3,600 for the defaults) on the module's device, in
the backbone's dtype (``precision="bf16-true"`` casts the weights, the images follow), plus ``len(domains)`` probes on
at most that many features, with the process's threads (``benchmarks/bench_callback.py`` times a call at any sizes).
The k-NN (``methods=("linear", "knn")`` or ``("knn",)``): k of ``knn_ks`` chosen on the same validation split, no
training, cheaper than the probes. The closed-form ridge probe (``methods=("ridge",)``, logged as
``cog/<domain>/ridge_top1``): the penalty of ``ridge_regs`` chosen on the same split from one eigendecomposition,
refitted, no training either: the cheap signal to watch L1-L5 every epoch (:mod:`cog_pl.probe.ridge`).

As a Lightning user expects (docs/lightning.md): the data roots, the backbone attribute and the strategy are checked
at ``setup``, before the first epoch; rank zero extracts and probes under DDP, the other ranks wait and receive the
numbers, and every rank logs them (``sync_dist`` with ``max`` of equal values: exact, no warning); strategies that
shard the model (FSDP, DeepSpeed) are refused, since a forward on rank zero alone would wait forever for the others;
the ``training`` flag of every submodule is restored as it was found and no gradient is computed; ``history`` (one
dict per evaluation of a fit) is saved in checkpoints under the ``name`` and restored on resume, also when
``domains`` or ``methods`` changed (a warning says which). It works under ``lightning.Trainer`` and
``pytorch_lightning.Trainer`` alike; a ``pytorch_lightning`` LightningCLI takes it as
:class:`cog_pl.callbacks.pytorch_lightning.CoGEvaluationCallback`.

On the console, on rank zero only, where the Trainer's package prints its own messages: at setup one line saying how
the images are read (size, resize, normalisation, and where ``transform="auto"`` found them), a warning when the
first training batch's images have another size, and one line of top-1s per evaluation.
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
import torch
import torch.nn.functional as F
from torch import nn

from cog_pl.callbacks.eval_input import declared_transform, describe, image_size, px
from cog_pl.callbacks.eval_methods import EVAL_METHODS, EvalSettings, check_methods
from cog_pl.callbacks.eval_schedule import FAST_DEV_RUN_EPOCHS, fast_dev_run_sizes, fit_ends_here, periodic
from cog_pl.data.transforms import TransformConfig, protocol_transform
from cog_pl.errors import CogError, MissingFileError
from cog_pl.probe.ridge import REGS, check_regs
from cog_pl.protocol import DOMAINS, FeatureProtocol, check_domains

logger = logging.getLogger(__name__)
#: What the callback can log per domain (the names of :data:`~cog_pl.callbacks.eval_methods.EVAL_METHODS`).
METHODS = tuple(EVAL_METHODS)
#: Strategies that shard the model's parameters across processes: a forward needs every rank (names, so that the
#: check needs neither DeepSpeed installed nor one of the two Lightning packages).
SHARDED_STRATEGIES = ("FSDPStrategy", "DeepSpeedStrategy", "ModelParallelStrategy")
Transform = TransformConfig | Callable[[Any], torch.Tensor]
Subsets = dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]


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
        every_n_epochs: evaluate at the end of every this many training epochs (0: no periodic evaluation).
        at_fit_end: evaluate once more after the last training epoch, whatever stopped the fit, unless that epoch
            was just evaluated.
        concepts: concepts per domain in the subset.
        train_images: train images per concept.
        test_images: test images per concept.
        transform: how images are read: ``"auto"`` (the default: what the datamodule or the module declares, a
            ``transform_config``, an input size or a torchvision transform, v1 or v2, else the protocol's 224 px:
            :func:`~cog_pl.callbacks.eval_input.declared_transform`), ``"protocol"``, a zoo model name, an
            image size S (resize = crop = S), a dict of :class:`TransformConfig` fields, a :class:`TransformConfig`,
            or any callable from a PIL image to a normalised tensor (a torchvision ``Compose``).
        lrs: the probe's learning rates (the best on the validation split is kept).
        weight_decay: the probe's weight decay.
        epochs: the probe's epochs.
        batch_size: the batch size of the backbone's forward.
        seed: the validation split's and the probe's seed.
        methods: names of :data:`~cog_pl.callbacks.eval_methods.EVAL_METHODS` (``linear``, ``knn``, ``ridge``); the
            console line shows the first.
        knn_ks: the k-NN's candidate k.
        knn_precision: the k-NN's similarity precision (``auto``, ``float32``, ...).
        ridge_regs: the ridge probe's L2 penalties (the best on the validation split is kept).
        name: the prefix of the logged keys (``{name}/l5/top1``) and the name of the checkpointed state; two
            instances in one Trainer need two names (Lightning refuses two callbacks of one ``state_key``).

    Example:
        >>> import lightning as L
        >>> cog = CoGEvaluationCallback(in1k_root="/data/in1k", in21k_root="/data/in21k", backbone="encoder",
        ...                             every_n_epochs=5)  # doctest: +SKIP
        >>> L.Trainer(max_epochs=100, callbacks=[cog]).fit(my_module, my_data)  # doctest: +SKIP

    The accuracies are logged as ``{name}/{key}/top1``, ``{name}/{key}/knn_top1`` and ``{name}/{key}/ridge_top1``,
    ``key`` being ``in1k``, ``l1`` .. ``l5`` (:func:`metric_key`): :meth:`metric_name`.
    """

    def __init__(self, in1k_root: str | None = None, in21k_root: str | None = None, benchmark: str | None = None,
                 backbone: str | Callable[[torch.Tensor], torch.Tensor] = "backbone",
                 domains: Sequence[str] = DOMAINS, every_n_epochs: int = 1, at_fit_end: bool = True,
                 concepts: int = 20, train_images: int = 20, test_images: int = 10, transform: Any = "auto",
                 lrs: Sequence[float] = (0.3, 3.0, 30.0), weight_decay: float = 1e-6, epochs: int = 30,
                 batch_size: int = FeatureProtocol().batch_size, seed: int = 0,
                 methods: Sequence[str] = ("linear",), knn_ks: Sequence[int] = (10, 20, 100, 200),
                 knn_precision: str = "auto", ridge_regs: Sequence[float] = REGS, name: str = "cog") -> None:
        super().__init__()
        from cog_pl.probe.knn import KNNSettings
        from cog_pl.probe.knn_protocol import resolve_knn_precision

        domains = tuple(domain_id(d) for d in domains)
        check_domains(domains, "CoGEvaluationCallback: ")  # refused now rather than at the end of the first epoch
        self.methods = check_methods(methods)
        KNNSettings(ks=tuple(knn_ks))  # refuses bad ks now
        ridge_regs = check_regs(ridge_regs, "CoGEvaluationCallback: ridge_regs")
        if not isinstance(every_n_epochs, int) or isinstance(every_n_epochs, bool) or every_n_epochs < 0:
            raise CogError(f"CoGEvaluationCallback: every_n_epochs {every_n_epochs!r}; expected an integer >= 0 "
                           "(0: no periodic evaluation)")
        if not in1k_root and "in1k" in domains:
            raise CogError("CoGEvaluationCallback: in1k needs in1k_root (or leave in1k out of domains)")
        if not in21k_root and any(d != "in1k" for d in domains):
            raise CogError("CoGEvaluationCallback: the CoG levels need in21k_root")
        self.name = _check_name(name)
        self.roots = {"in1k_root": in1k_root, "in21k_root": in21k_root, "benchmark": benchmark}
        self.backbone, self.domains = backbone, domains
        self.every_n_epochs, self.at_fit_end = every_n_epochs, at_fit_end
        self.sizes = (concepts, train_images, test_images)
        self.transform = _check_transform(transform)
        self.batch_size = batch_size
        self.settings = EvalSettings(lrs=tuple(lrs), weight_decay=weight_decay, epochs=epochs, seed=seed,
                                     knn_ks=tuple(knn_ks),
                                     knn_precision=resolve_knn_precision(knn_precision, "cpu"),  # host features
                                     ridge_regs=ridge_regs)
        self._data: Subsets | None = None
        self._data_sizes: tuple[int, int, int] | None = None
        self.history: list[dict[str, float]] = []
        self.last_seconds: float | None = None
        self._size_checked = False
        self._last_epoch: int | None = None  # this fit's last training epoch that ended
        self._evaluated: int | None = None  # this fit's last evaluated epoch
        self._validated = False
        self._resumed_settings: dict[str, Any] | None = None

    # -- names --------------------------------------------------------------------------------------------------
    def metric_name(self, domain: str, method: str = "linear") -> str:
        """The key a domain's score by ``method`` is logged under: ``cog/l5/top1``, ``cog/l5/knn_top1``."""
        return f"{self.name}/{metric_key(domain_id(domain))}/{EVAL_METHODS[method].suffix}"

    @property
    def metric_names(self) -> list[str]:
        """Every key an evaluation logs."""
        return [self.metric_name(d, m) for d in self.domains for m in self.methods]

    # -- checkpointed state: the history of a run survives a resume --------------------------------------------
    @property
    def state_key(self) -> str:
        """The callback's ``name`` alone: a resume with other ``domains`` or ``methods`` finds its history."""
        return self._generate_state_key(name=self.name)

    def _settings_record(self) -> dict[str, Any]:
        """What the history's numbers depend on, as saved beside it (lists: a checkpoint's plain values)."""
        probe = {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self.settings).items()}
        return {"domains": list(self.domains), "methods": list(self.methods), "sizes": list(self.sizes), **probe}

    def state_dict(self) -> dict[str, Any]:
        return {"history": [dict(h) for h in self.history], "settings": self._settings_record()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.history = [dict(h) for h in state_dict.get("history", [])]
        self._resumed_settings = state_dict.get("settings")

    # -- data: a fixed subset of each domain, decoded once ------------------------------------------------------
    def eval_transform(self, trainer: Any = None, pl_module: Any = None) -> Transform:
        """The transform images are read with (``"auto"`` resolved against the run's datamodule and module:
        :func:`~cog_pl.callbacks.eval_input.declared_transform`)."""
        return self._resolved_transform(trainer, pl_module)[0]

    def _resolved_transform(self, trainer: Any, pl_module: Any) -> tuple[Transform, str]:
        if self.transform != "auto":
            return self.transform, "transform="
        return declared_transform(getattr(trainer, "datamodule", None), pl_module)

    def _load_resolved(self, trainer: Any, pl_module: Any, sizes: tuple[int, int, int]) -> str:
        """Decode the subsets of ``sizes`` with the resolved transform; the line that says which."""
        transform, source = self._resolved_transform(trainer, pl_module)
        self._data, self._data_sizes = self._load(transform, sizes), sizes
        return f"CoGEvaluationCallback: images read at {describe(transform, self.image_size)}; from {source}"

    @property
    def image_size(self) -> tuple[int, int] | None:
        """Height and width of the decoded images (``None`` before they are)."""
        return tuple(next(iter(self._data.values()))[0].shape[-2:]) if self._data else None

    @staticmethod
    def _subset(labels: Sequence[int], per_concept: int, concepts: int) -> list[int]:
        picked: dict[int, list[int]] = {}
        for i, y in enumerate(labels):
            if y < concepts and len(picked.setdefault(y, [])) < per_concept:
                picked[y].append(i)
        return [i for y in sorted(picked) for i in picked[y]]

    def _load(self, transform: Transform, sizes: tuple[int, int, int] | None = None) -> Subsets:
        from cog_pl.extract.datamodule import ExtractionDataModule

        concepts, train_images, test_images = sizes or self.sizes
        config = transform if isinstance(transform, TransformConfig) else protocol_transform()
        dm = ExtractionDataModule(domains=self.domains, transform=config, num_workers=0, **self.roots)
        out = {}
        for domain in self.domains:
            sets = dm.datasets(domain)
            tensors = []
            for split, n in (("train", train_images), ("test", test_images)):
                ds = sets[split][0]
                if not isinstance(transform, TransformConfig):  # the user's own callable
                    getattr(ds, "base", ds).transform = transform
                rows = self._subset(ds.labels, n, concepts)
                items = [ds[i] for i in rows]
                items = [it for it in items if it is not None]
                tensors += [torch.stack([it["image"] for it in items]),
                            torch.tensor([it["label"] for it in items])]
            out[domain] = tuple(tensors)
        return out

    def _sizes(self, trainer: Any) -> tuple[int, int, int]:
        return fast_dev_run_sizes(self.sizes) if getattr(trainer, "fast_dev_run", False) else self.sizes

    # -- Lightning hooks ----------------------------------------------------------------------------------------
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """``fit`` and ``validate``: refuse what would fail at the first evaluation (a sharding strategy, no
        backbone, a wrong root) now, and decode the subsets on rank zero; ``test`` and ``predict``: say that they run
        no evaluation."""
        stage = str(getattr(stage, "value", stage))  # a TrainerFn
        if stage not in ("fit", "validate"):
            if trainer.is_global_zero:
                say(trainer, f"CoGEvaluationCallback: trainer.{stage} runs no CoG evaluation (fit and validate do; "
                             "evaluate() runs one now)")
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
        self._validated = False
        if not trainer.is_global_zero:
            return
        sizes = self._sizes(trainer)
        if trainer.fast_dev_run:
            say(trainer, self._fast_dev_run_line(stage, sizes))
        if self._data is None or self._data_sizes != sizes:
            say(trainer, self._load_resolved(trainer, pl_module, sizes))  # names a missing synset or split

    def _fast_dev_run_line(self, stage: str, sizes: tuple[int, int, int]) -> str:
        if stage == "fit" and not (self.every_n_epochs or self.at_fit_end):
            return "CoGEvaluationCallback: fast_dev_run: no CoG evaluation (every_n_epochs=0, at_fit_end=False)"
        when = "after the training batches" if stage == "fit" else "at the end of validation"
        return (f"CoGEvaluationCallback: fast_dev_run: one tiny CoG evaluation {when} ({sizes[0]} concepts x "
                f"({sizes[1]} train + {sizes[2]} test) images per domain, a probe of {FAST_DEV_RUN_EPOCHS} epoch), "
                "to run the code once, not to measure")

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Start this fit's record of epochs; warn about an EarlyStopping on a key of ours that would never see it,
        and when a restored history was made with other settings."""
        self._last_epoch = self._evaluated = None
        saved, self._resumed_settings = self._resumed_settings, None
        if not trainer.is_global_zero:
            return
        self._check_monitors(trainer)
        if saved is None:
            return
        now = self._settings_record()
        changed = [f"{k} {_show(saved.get(k))} -> {_show(v)}" for k, v in now.items()
                   if k in saved and saved[k] != v]  # a setting the saved record lacks is newer than its history
        if changed:
            warnings.warn(f"CoGEvaluationCallback {self.name!r}: the checkpoint's history ({len(self.history)} "
                          f"evaluation(s)) was made with other settings ({'; '.join(changed)}); it is kept as it "
                          "was, each entry with the keys it was logged under, and this run evaluates with the new "
                          "settings", UserWarning, stacklevel=2)

    def _check_monitors(self, trainer: L.Trainer) -> None:
        """An ``EarlyStopping`` of either package on one of our keys, checking at validation's end (resolved in its
        ``setup``, before fit starts): our keys are never there then, and with ``strict=False`` it never stops."""
        for callback in trainer.callbacks:
            if "EarlyStopping" not in {c.__name__ for c in type(callback).__mro__}:
                continue
            if getattr(callback, "monitor", None) in self.metric_names and \
                    getattr(callback, "_check_on_train_epoch_end", None) is False:
                warnings.warn(f"CoGEvaluationCallback: EarlyStopping(monitor={callback.monitor!r}) checks at the end "
                              "of validation, before the training epoch's end where the CoG keys are logged, so it "
                              "never sees them; pass check_on_train_epoch_end=True", UserWarning, stacklevel=2)

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Take the keys out of ``trainer.callback_metrics``: an epoch that does not evaluate has none, so that a
        monitor never reads the last evaluation again as this epoch's (``EarlyStopping`` would count it as no
        improvement)."""
        for key in self.metric_names:
            trainer.callback_metrics.pop(key, None)

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
        """Evaluate on the periodic epochs and on the last one where the fit's limits end it here; log the keys."""
        epoch = self._last_epoch = trainer.current_epoch
        if trainer.fast_dev_run:
            due = bool(self.every_n_epochs or self.at_fit_end)
        else:
            due = periodic(epoch, self.every_n_epochs) or (self.at_fit_end and fit_ends_here(
                epoch, trainer.global_step, trainer.max_epochs, trainer.max_steps))
        if not due:
            return
        metrics = self._run(trainer, pl_module, epoch)
        for key, value in metrics.items():  # every rank holds the same numbers: max of equal values is exact
            pl_module.log(key, value, sync_dist=True, reduce_fx="max")

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """``at_fit_end`` after a stop decided after this callback's epoch hook (``EarlyStopping``, ``max_time``,
        ``trainer.should_stop``): evaluate the last epoch now. Lightning refuses ``self.log`` here, so the numbers
        go to ``trainer.callback_metrics`` and to the loggers (rank zero) directly, under the last epoch."""
        epoch = self._last_epoch
        if not self.at_fit_end or epoch is None or self._evaluated == epoch:
            return
        metrics = self._run(trainer, pl_module, epoch, "end of fit")
        trainer.callback_metrics.update({k: torch.tensor(v) for k, v in metrics.items()})
        if trainer.is_global_zero:
            for logger_ in trainer.loggers:  # the step of the epoch's own end-of-epoch row (the fit loop's)
                logger_.log_metrics({**metrics, "epoch": epoch}, step=max(trainer.global_step - 1, 0))
                logger_.save()

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """``trainer.validate``: one evaluation, logged with the validation's own keys (not in ``history``)."""
        if trainer.sanity_checking or trainer.state.fn != "validate":
            return
        self._validated = True
        metrics = self._run(trainer, pl_module, trainer.current_epoch, "validate", record=False)
        for key, value in metrics.items():
            pl_module.log(key, value, sync_dist=True, reduce_fx="max")

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage == "validate" and not self._validated and trainer.is_global_zero:
            say(trainer, "CoGEvaluationCallback: trainer.validate ran no validation batch, so no CoG evaluation "
                         "(limit_val_batches=0, or an empty val loader)")

    def _run(self, trainer: L.Trainer, pl_module: L.LightningModule, epoch: int, when: str = "",
             record: bool = True) -> dict[str, float]:
        """One evaluation on rank zero, its numbers broadcast to every rank, its console line, its history entry."""
        settings = self.settings
        if trainer.fast_dev_run:
            settings = dataclasses.replace(settings, epochs=FAST_DEV_RUN_EPOCHS)
        result = (self._evaluate(pl_module, settings), self.last_seconds) if trainer.is_global_zero else None
        metrics, seconds = trainer.strategy.broadcast(result, src=0)
        self.last_seconds = seconds
        if record:
            self.history.append({"epoch": epoch, **metrics, "seconds": seconds})
            self._evaluated = epoch
        if trainer.is_global_zero:
            say(trainer, summary_line(epoch, metrics, seconds, self.methods[0], self.name, when))
        return metrics

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

    def evaluate(self, pl_module: nn.Module) -> dict[str, float]:
        """Extract and score every domain now, at the callback's sizes; returns ``{metric_name: fraction}``
        (:attr:`metric_names`); ``last_seconds`` is what it took."""
        if self._data is None or self._data_sizes != self.sizes:
            logger.info(self._load_resolved(None, pl_module, self.sizes))
        return self._evaluate(pl_module, self.settings)

    def _evaluate(self, pl_module: nn.Module, settings: EvalSettings) -> dict[str, float]:
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
                for method in self.methods:
                    metrics[self.metric_name(domain, method)] = EVAL_METHODS[method].score(settings, ftr, ytr, fte,
                                                                                           yte)
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


def summary_line(epoch: int, metrics: dict[str, float], seconds: float, method: str = "linear", name: str = "cog",
                 when: str = "") -> str:
    """One evaluation in a short line: each domain's score by ``method`` (the callback's first), the callback's
    ``name`` where it is not the default, and ``when`` (``end of fit``, ``validate``) where it is not an epoch's
    end."""
    suffix = "/" + EVAL_METHODS[method].suffix
    shown = "  ".join(f"{k.split('/')[1]} {v:.3f}" for k, v in metrics.items() if k.endswith(suffix))
    tags = ", ".join(t for t in (name if name != "cog" else "", when) if t)
    return (f"CoG {EVAL_METHODS[method].label} at epoch {epoch}{f' ({tags})' if tags else ''}: {shown} "
            f"({seconds:.1f} s)")


def _check_name(name: Any) -> str:
    if not isinstance(name, str) or not name or "/" in name or name != name.strip():
        raise CogError(f"CoGEvaluationCallback: name {name!r}; expected a non-empty word without '/' (the prefix "
                       "of the logged keys, {name}/l5/top1)")
    return name


def _show(value: Any) -> str:
    return ", ".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


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
