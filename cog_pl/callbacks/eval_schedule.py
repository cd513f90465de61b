"""When :class:`~cog_pl.callbacks.cog_eval.CoGEvaluationCallback` evaluates, as plain functions of the Trainer's
numbers (no Lightning), so that the rule is read and tested in one place.

- Every ``every_n_epochs`` epochs: at the end of the training epochs ``N - 1, 2N - 1, ...`` (0-based, Lightning's
  ``current_epoch``), the epochs ``ModelCheckpoint(every_n_epochs=N)`` checks.
- At the end of fit (``at_fit_end``): the last training epoch, unless it was just evaluated. Where the end is known
  when that epoch ends (``max_epochs`` reached, ``max_steps`` reached), the evaluation runs then, logged like the
  periodic ones; where the Trainer decides to stop after the callback's hook (``EarlyStopping``, ``max_time``, any
  ``trainer.should_stop``), it runs in ``on_train_end``: Lightning 2.6's fit loop stops only after the epoch's hooks
  (``loops/fit_loop.py``: ``done`` is read before the next epoch), so only then is the last epoch known for sure.
- Under ``fast_dev_run``: one tiny evaluation (:data:`FAST_DEV_RUN_SIZES`, a probe of one epoch), to run the code
  once, not to measure.
"""

from __future__ import annotations

#: ``(concepts, train_images, test_images)`` per domain under ``fast_dev_run`` (each at most the callback's own).
FAST_DEV_RUN_SIZES = (2, 5, 2)
#: The probe's epochs under ``fast_dev_run``.
FAST_DEV_RUN_EPOCHS = 1


def periodic(epoch: int, every_n_epochs: int) -> bool:
    """Whether 0-based ``epoch`` is one of the periodic evaluations (``every_n_epochs`` 0: none)."""
    return every_n_epochs > 0 and (epoch + 1) % every_n_epochs == 0


def fit_ends_here(epoch: int, global_step: int, max_epochs: int | None, max_steps: int) -> bool:
    """Whether the fit loop stops after 0-based ``epoch`` by its limits alone: ``max_epochs`` (``-1`` or ``None``:
    none, as ``Trainer(max_steps=N)`` without ``max_epochs`` sets it) or ``max_steps`` (``-1``: none) reached."""
    by_epochs = max_epochs is not None and max_epochs >= 0 and epoch + 1 >= max_epochs
    by_steps = max_steps >= 0 and global_step >= max_steps
    return by_epochs or by_steps


def fast_dev_run_sizes(sizes: tuple[int, int, int]) -> tuple[int, int, int]:
    """The subset sizes under ``fast_dev_run``: :data:`FAST_DEV_RUN_SIZES`, each at most the callback's."""
    return tuple(min(a, b) for a, b in zip(sizes, FAST_DEV_RUN_SIZES))  # type: ignore[return-value]
