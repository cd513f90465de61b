"""Fine-tuning (method ``finetune``, paper App. C.2): the backbone fine-tuned on each domain's images and tested,
beside the probes of its frozen features; the report sets the linear probe against it.

One row per (domain, seed) on all data (:class:`FinetuneOptions`: the seeds default to the run's first), made by a
Lightning Trainer (:func:`cog_pl.finetune.compare.finetune_domain`). The rows' identity (``finetune``) holds the
label, the checkpoint's digest, the recipe, epochs, batch size, resolved precision, transform and benchmark.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cog_pl.evaluate.method import Cell, Inputs, Job, Method, register_method

__all__ = ["METHOD", "Finetune", "FinetuneOptions"]

#: The ``method`` of a fine-tuned model's rows (also :data:`cog_pl.finetune.rows.METHOD`).
METHOD = "finetune"


def _devices(text: str) -> int | str:
    """Lightning's ``devices``: a count, ``auto``, or indices such as ``0,1``."""
    return int(text) if str(text).isdigit() else text


@dataclass(frozen=True)
class FinetuneOptions:
    """The fine-tuning runs: their seeds, the Trainer's epochs, batch, precision and devices, the module's recipe
    (keyword arguments of FineTuneClassifier)."""

    epochs: int = field(default=10, metadata={"help": "fine-tuning epochs"})
    seeds: tuple[int, ...] | None = field(default=None, metadata={
        "help": "seeds of the fine-tuning runs (default: the first of --seeds)", "metavar": "SEED"})
    batch_size: int = field(default=128, metadata={"help": "fine-tuning batch size"})
    precision: str = field(default="32-true", metadata={
        "help": "fine-tuning precision, e.g. 32-true, bf16-mixed, or auto (bf16-mixed where bf16 is fast)"})
    devices: int | str = field(default=1, metadata={"help": "fine-tuning devices (Lightning's --devices)",
                                                    "type": _devices})
    accelerator: str = field(default="auto", metadata={"help": "fine-tuning accelerator (auto: cuda or cpu)"})
    cache_images: bool = field(default=False, metadata={
        "help": "decode each domain's images once and keep them in memory (small domains read for many epochs)"})
    num_workers: int = field(default=0, metadata={"help": "fine-tuning loader workers"})
    recipe: dict[str, Any] | None = field(default=None, metadata={
        "help": "keyword arguments of FineTuneClassifier, as JSON (lr, optimizer, weight_decay, ...)", "json": True})

    def __post_init__(self) -> None:
        from cog_pl.errors import CogError
        from cog_pl.finetune.compare import check_options
        from cog_pl.protocol import check_grid

        try:
            check_options(self.precision, self.recipe)
        except CogError as err:
            raise CogError(f"finetune: {err}") from None
        if self.seeds is not None:
            check_grid(tuple(self.seeds), names=("--finetune-seeds", "shots"))
        for name in ("epochs", "batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise CogError(f"--finetune-{name.replace('_', '-')} must be an integer of at least 1, got {value!r}")


class Finetune(Method):
    """The backbone fine-tuned on each domain."""

    name = METHOD
    label = "fine-tuned"
    order = 10.0
    description = "the backbone fine-tuned on each domain's images"
    options = FinetuneOptions
    reads = "images"
    frozen = False

    def cells(self, job: Job) -> list[Cell]:
        options = job.options or FinetuneOptions()
        return [(None, seed) for seed in (options.seeds or job.seeds[:1])]

    def precheck(self, inputs: Inputs, options: FinetuneOptions | None) -> None:
        if inputs.model is None:
            from cog_pl.errors import CogError

            raise CogError("fine-tuning reads images: the run names no network (--model)")

    def recipe(self, job: Job) -> dict[str, Any]:
        """The module's recipe: the options', with how the run reads the checkpoint."""
        options = job.options or FinetuneOptions()
        recipe = dict(options.recipe or {})
        reading = {k: v for k, v in job.inputs.reading.items() if v and k != "random_weights"}
        return {**recipe, **reading}

    def _transform(self, job: Job) -> Any:
        from cog_pl.models import backbone_transform

        return backbone_transform(job.inputs.model) if job.inputs.transform is None else job.inputs.transform

    def identity(self, job: Job, state: Any) -> dict[str, Any]:
        from cog_pl.device import trainer_options
        from cog_pl.finetune.compare import finetune_identity

        options = job.options or FinetuneOptions()
        precision = trainer_options(options.accelerator, options.devices, options.precision)["precision"]
        values = finetune_identity(job.model, job.inputs.checkpoint, recipe=self.recipe(job), epochs=options.epochs,
                                   batch_size=options.batch_size, precision=precision,
                                   transform=self._transform(job), benchmark=job.inputs.benchmark)
        return {"finetune": values["finetune"]}

    def digest(self, values: dict[str, Any]) -> str:
        from cog_pl.io import digest

        return digest(values["finetune"])  # the digest its rows have always had: of the values alone

    def run_cell(self, job: Job, state: Any, cell: Cell, want: dict[str, Any]) -> dict[str, Any]:
        from cog_pl.finetune.compare import finetune_domain

        options = job.options or FinetuneOptions()
        inputs = job.inputs
        return finetune_domain(inputs.model, inputs.checkpoint, job.domain, in1k_root=inputs.in1k_root,
                               in21k_root=inputs.in21k_root, benchmark=inputs.benchmark,
                               transform=self._transform(job), epochs=options.epochs, seed=cell[1],
                               batch_size=options.batch_size, recipe=self.recipe(job), precision=options.precision,
                               devices=options.devices, accelerator=options.accelerator,
                               cache_images=options.cache_images, num_workers=options.num_workers,
                               progress=job.progress, label=job.model)


register_method(Finetune())
