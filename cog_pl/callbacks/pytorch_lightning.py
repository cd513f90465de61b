"""``CoGEvaluationCallback`` for ``pytorch_lightning`` code (lightly, solo-learn): the same callback, also a subclass
of ``pytorch_lightning.Callback``, so that a ``pytorch_lightning`` LightningCLI takes it from YAML.

``cog_pl.callbacks.CoGEvaluationCallback`` subclasses ``lightning.Callback``: either package's Trainer runs it from
Python, but ``pytorch_lightning.cli.LightningCLI`` checks ``trainer.callbacks`` entries against
``pytorch_lightning.Callback`` and refuses it ("does not correspond to a subclass of Callback"). This class
subclasses both, with the same ``state_key`` (its checkpoints resume under either import):

.. code-block:: yaml

    trainer:
      callbacks:
        - class_path: cog_pl.callbacks.pytorch_lightning.CoGEvaluationCallback
          init_args: {in1k_root: /data/in1k, in21k_root: /data/in21k}
"""

from __future__ import annotations

try:
    import pytorch_lightning as pl
except ModuleNotFoundError as err:  # pragma: no cover - the test extra installs it
    raise ModuleNotFoundError("cog_pl.callbacks.pytorch_lightning is for pytorch_lightning users: install "
                              "pytorch-lightning, or take cog_pl.callbacks.CoGEvaluationCallback with the lightning "
                              "package") from err

from cog_pl.callbacks import cog_eval


class CoGEvaluationCallback(cog_eval.CoGEvaluationCallback, pl.Callback):
    """:class:`cog_pl.callbacks.CoGEvaluationCallback`, also a ``pytorch_lightning.Callback`` (same arguments)."""


__all__ = ["CoGEvaluationCallback"]
