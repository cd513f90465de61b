"""The attentive probe trained on augmented images (method ``attentive_images``), as V-JEPA's and V-JEPA 2's frozen
evaluations train theirs: the frozen backbone runs on every augmented batch of every epoch, a bank of heads (one per
trial) trains on its tokens (:mod:`cog_pl.finetune.attentive_images`).

Tuned like the linear probe on the run's seeds and shots, with the probe protocol's trials and held-out fraction;
the rows say ``features: "on-the-fly"`` and their identity (``attentive_images``) holds every setting, the
augmentation, the checkpoint's digest and the feature definition whose tokens the heads read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cog_pl.defaults import ATTENTIVE_IMAGES_PRESET
from cog_pl.errors import CogError
from cog_pl.evaluate.method import Cell, Inputs, Job, Method, register_method

__all__ = ["AttentiveImages", "AttentiveImagesOptions"]


@dataclass(frozen=True)
class AttentiveImagesOptions:
    """The probe's pooler and training (V-JEPA 2's 20 epochs; TPE's 10 random startup trials, then batches of 5)."""

    preset: str = field(default=ATTENTIVE_IMAGES_PRESET, metadata={
        "help": "the pooler: vjepa, vjepa2, capi or ep", "metavar": "PRESET"})
    epochs: int = field(default=20, metadata={"help": "epochs per trial and for the final head"})
    batch_size: int = field(default=128, metadata={"help": "images per batch"})
    startup_trials: int = field(default=10, metadata={"help": "random trials trained first, as one bank"})
    trial_batch: int | None = field(default=None, metadata={
        "help": "later trials trained as one bank (default: the search plan's, --trial-batch)"})
    precision: str = field(default="32-true", metadata={"help": "the Trainer's precision, e.g. bf16-mixed"})
    accelerator: str = field(default="auto", metadata={"help": "the Trainer's accelerator (auto: cuda or cpu)"})
    cache_images: bool = field(default=False, metadata={"help": "decode each domain's images once, in memory"})
    num_workers: int = field(default=0, metadata={"help": "loader workers"})

    def __post_init__(self) -> None:
        from cog_pl.models.poolers import POOLER_PRESETS

        if self.preset not in POOLER_PRESETS:
            raise CogError(f"--attentive-images-preset {self.preset!r}: choose from {', '.join(POOLER_PRESETS)}")
        for name in ("epochs", "batch_size", "startup_trials", "trial_batch"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise CogError(f"--attentive-images-{name.replace('_', '-')} must be an integer of at least 1, "
                               f"got {value!r}")


class AttentiveImages(Method):
    """An attentive probe trained on augmented images, the frozen backbone run every batch."""

    name = "attentive_images"
    label = "attentive probe (images, augmented)"
    order = 10.5
    description = "an attentive probe trained on augmented images, the frozen backbone run every epoch"
    options = AttentiveImagesOptions
    reads = "images"

    def __init__(self) -> None:
        self._backbones: dict[tuple, Any] = {}  # built once per run's weights, for every domain

    def precheck(self, inputs: Inputs, options: AttentiveImagesOptions | None) -> None:
        if inputs.model is None:
            raise CogError("attentive_images reads images: the run names no network (--model)")
        if inputs.feature is not None:
            from cog_pl.models.definitions import parse_feature

            parse_feature(inputs.feature)

    def _settings(self, job: Job) -> tuple[AttentiveImagesOptions, int, str]:
        from cog_pl.device import trainer_options

        options = job.options or AttentiveImagesOptions()
        trial_batch = options.trial_batch or getattr(job.plan, "trial_batch", 5)
        return options, trial_batch, trainer_options(options.accelerator, 1, options.precision)["precision"]

    def _transform(self, job: Job) -> Any:
        from cog_pl.models import backbone_transform

        return backbone_transform(job.inputs.model) if job.inputs.transform is None else job.inputs.transform

    def identity(self, job: Job, state: Any) -> dict[str, Any]:
        from cog_pl.finetune.attentive_images import identity

        options, trial_batch, precision = self._settings(job)
        values = identity(job.model, job.inputs.checkpoint, feature=job.inputs.feature, preset=options.preset,
                          epochs=options.epochs, batch_size=options.batch_size, trials=job.protocol.trials,
                          startup_trials=options.startup_trials, trial_batch=trial_batch,
                          val_fraction=job.protocol.val_fraction, transform=self._transform(job), precision=precision,
                          benchmark=job.inputs.benchmark)
        return {self.name: values[self.name]}

    def digest(self, values: dict[str, Any]) -> str:
        from cog_pl.io import digest

        return digest(values[self.name])  # the digest its rows have always had: of the values alone

    def open(self, job: Job) -> dict[str, Any]:
        return {}  # the domain's datasets and the backbone, on the first cell (:meth:`run_cell`)

    def _loaded(self, job: Job, state: dict[str, Any]) -> tuple[Any, int, Any, Any, list[str]]:
        """The backbone (built once per run's weights) and the domain's datasets (once per domain), the grid's shot
        counts checked against its train images first."""
        if "data" not in state:
            import numpy as np

            from cog_pl.data.sampling import check_shots
            from cog_pl.finetune.attentive_images import domain_datasets, images_backbone

            options, inputs, transform = job.options or AttentiveImagesOptions(), job.inputs, self._transform(job)
            data = domain_datasets(job.domain, in1k_root=inputs.in1k_root, in21k_root=inputs.in21k_root,
                                   benchmark=inputs.benchmark, transform=transform, batch_size=options.batch_size,
                                   cache_images=options.cache_images, num_workers=options.num_workers)
            check_shots(np.asarray(data[1].labels), job.protocol.val_fraction, job.shots)
            key = (inputs.model, inputs.checkpoint, inputs.feature, tuple(sorted(inputs.reading.items())))
            if key not in self._backbones:
                self._backbones.clear()
                self._backbones[key] = images_backbone(inputs.model, inputs.checkpoint,
                                                       reading=dict(inputs.reading), feature=inputs.feature,
                                                       transform=transform)
            state["data"], state["backbone"] = data, self._backbones[key]
        return state["backbone"], *state["data"]

    def run_cell(self, job: Job, state: dict[str, Any], cell: Cell, want: dict[str, Any]) -> dict[str, Any]:
        from cog_pl.device import trainer_options
        from cog_pl.finetune.attentive_images import cell_row

        options, trial_batch, _ = self._settings(job)
        backbone, num_classes, train, test, classes = self._loaded(job, state)
        return cell_row(backbone, num_classes, train, test, preset=options.preset, seed=cell[1], shots=cell[0],
                        epochs=options.epochs, batch_size=options.batch_size, trials=job.protocol.trials,
                        startup_trials=options.startup_trials, trial_batch=trial_batch,
                        val_fraction=job.protocol.val_fraction,
                        trainer_kw=trainer_options(options.accelerator, 1, options.precision),
                        feature=job.inputs.feature, checkpoint=job.inputs.checkpoint, classes=classes)


register_method(AttentiveImages())
