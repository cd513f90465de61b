"""The closed-form ridge probe (method ``ridge``): big_vision's few-shot least-squares regression, its L2 penalty
chosen on the linear probe's held-out split, refitted on the cell's train sample, tested.

Per (shots, seed) cell (:class:`cog_pl.probe.ridge.RidgeProbe`, whose docstring cites big_vision's evaluator and says
where this protocol differs): one eigendecomposition of the tuning sample serves every penalty of the grid, each
scored on the 20 % held-out rows, the best chosen (the larger among equals); one more of the final sample gives the
refitted head, tested. A domain's cells are made in one pass (:attr:`~cog_pl.evaluate.method.Method.batched`): the
train store is read once, every cell's penalty chosen, and only then is the test store read, so the test labels never
enter a choice.

What a row's selection figures mean here: every penalty's head refitted on the final sample is scored on test
(``test_top1_by_reg``); ``selected_test_top1`` is the chosen penalty's (the row's ``test_top1``) and
``oracle_test_top1`` the best of them (``oracle_reg``): what choosing the penalty on test would have reported, among
the same refitted heads, so never below the selected one.

The rows' identity: the features', the ridge values (:class:`RidgeOptions`' penalties, the protocol's validation
fraction and normalisation, big_vision's bias constant and targets) and the precision (float64, fixed).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from cog_pl.errors import CogError
from cog_pl.evaluate.method import Cell, Job, Method, register_method

__all__ = ["Ridge", "RidgeOptions"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RidgeOptions:
    """The ridge probe's values: the L2 penalties tried, the best on validation chosen."""

    regs: tuple[float, ...] | None = field(default=None, metadata={
        "help": "the L2 penalties tried, the best on validation chosen (default: 2^-10, 2^-8, ..., 2^20, "
                "cog_pl.probe.ridge.REGS)", "metavar": "L2"})

    def __post_init__(self) -> None:
        self.grid()  # a bad penalty: one line, before any work

    def grid(self) -> tuple[float, ...]:
        """The penalties, ascending."""
        from cog_pl.probe.ridge import REGS, check_regs

        return REGS if self.regs is None else check_regs(self.regs, "--ridge-regs")


class Ridge(Method):
    """Closed-form ridge regression on the linear probe's samples."""

    name = "ridge"
    label = "ridge"
    order = 15.0
    description = "closed-form ridge regression (big_vision's few-shot LSR), L2 penalty chosen on validation, refitted"
    options = RidgeOptions
    batched = True

    def identity(self, job: Job, state: Any) -> dict[str, Any]:
        from cog_pl.probe.ridge import BIAS_CONSTANT, PRECISION
        from cog_pl.results.identity import features_identity

        regs = (job.options or RidgeOptions()).grid()
        return {"ridge": {"regs": list(regs), "val_fraction": job.protocol.val_fraction,
                          "normalize": job.protocol.normalize, "bias_constant": BIAS_CONSTANT,
                          "targets": "2*onehot-1"},
                "precision": PRECISION, "features": features_identity(state)}

    def check(self, job: Job, state: Any, cells: Sequence[Cell]) -> None:
        super().check(job, state, cells)
        import numpy as np

        from cog_pl.probe.data import train_labels

        _, counts = np.unique(train_labels(state), return_counts=True)
        if len(counts) and not any(int(n * job.protocol.val_fraction) for n in counts):
            raise CogError(f"{job.root}: ridge chooses its penalty on the {job.protocol.val_fraction:.0%} validation "
                           f"split, which holds no row here (at most {counts.max()} train rows a class)")

    def run_cells(self, job: Job, state: Any, cells: Sequence[Cell], want: dict[str, Any]) -> Iterator[dict[str, Any]]:
        yield from ridge_rows(job, state, list(cells), (job.options or RidgeOptions()).grid())


def _place(pair: Any, device: str) -> str:
    """Where the train features go: ``device`` when they, the float64 moments and a chunk's products fit there."""
    from cog_pl.device import fits, resolve_device
    from cog_pl.probe.ridge import CHUNK_ROWS

    dev = resolve_device(device)
    (n, d), classes = pair.train.features.shape, pair.num_classes
    needed = 4 * n * d + 8 * (4 * (d + 1) ** 2 + 3 * (d + 1) * classes + 3 * CHUNK_ROWS * (d + 1 + classes))
    return str(dev) if fits(needed, dev, what=f"the ridge probe's features of {pair.root}") else "cpu"


def ridge_rows(job: Job, pair: Any, cells: list[Cell], regs: Sequence[float]) -> Iterator[dict[str, Any]]:
    """The rows of ``cells`` on the stores of ``pair``, in their order: every cell's penalty chosen from the train
    store, then the test store read and every cell refitted and tested."""
    from cog_pl.probe.data import l2_normalize, load_store
    from cog_pl.probe.knn_protocol import rows_digest
    from cog_pl.probe.ridge import RidgeProbe
    from cog_pl.results.predictions import Predictions

    start = time.perf_counter()
    device = _place(pair, job.device)
    x, y = load_store(pair.train, device)
    probe = RidgeProbe(l2_normalize(x) if job.protocol.normalize else x, y, pair.num_classes, regs)
    chosen = {(n, seed): probe.choose(seed, n, job.protocol.val_fraction) for n, seed in cells}
    chose = time.perf_counter()
    test_x, test_y = load_store(pair.test, device)  # read only now: every penalty is chosen
    test_x = l2_normalize(test_x) if job.protocol.normalize else test_x
    tested = {cell: probe.test(cell[1], cell[0], chosen[cell].reg, test_x, test_y) for cell in cells}
    end = time.perf_counter()
    for cell in cells:
        c, t = chosen[cell], tested[cell]
        row = {
            "reg": c.reg, "val_top1": c.val_top1_by_reg[c.reg],
            "val_top1_by_reg": {str(r): v for r, v in c.val_top1_by_reg.items()},
            "test_top1": t.test_top1, "test_top5": t.test_top5,
            "test_top1_by_reg": {str(r): v for r, v in t.test_top1_by_reg.items()},
            "selected_test_top1": t.test_top1, "oracle_test_top1": t.test_top1_by_reg[t.oracle_reg],
            "oracle_reg": t.oracle_reg,
            "tuning_rows": len(c.tuning_rows), "val_rows": len(c.val_rows), "train_rows": len(t.train_rows),
            "tuning_rows_sha256": rows_digest(c.tuning_rows), "train_rows_sha256": rows_digest(t.train_rows),
            "device": device, "seconds": round(end - start, 3), "choose_seconds": round(chose - start, 3),
            "test_seconds": round(end - chose, 3), "cells_in_pass": len(cells),
            "predictions": Predictions.of(t.ranked, test_y, pair.test_images, pair.classes)}
        log.info("%s/ridge/%s/shots=%s/seed=%s: reg %g (val top-1 %.2f) -> test top-1 %.2f", job.model, job.domain,
                 cell[0] or "all", cell[1], c.reg, row["val_top1"], t.test_top1)
        yield row


register_method(Ridge())
