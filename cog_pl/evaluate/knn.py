"""The weighted k-NN classifier (method ``knn``, DINO's rule): k chosen on the linear probe's held-out split, then the
train samples vote on the test images.

Per seed, one pass of the validation rows against the train features serves every shot setting and every k; then
one pass of the test features serves every cell (:mod:`cog_pl.probe.knn_protocol`), so the method makes a domain's
cells together (:attr:`~cog_pl.evaluate.method.Method.batched`). The rows' identity: the features', the k-NN values
(:class:`KNNOptions`: ks, temperature; the validation fraction and normalisation of the protocol) and the precision
of the similarity products.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from cog_pl.errors import CogError
from cog_pl.evaluate.method import Cell, Job, Method, register_method

__all__ = ["KNN", "KNNOptions"]

@dataclass(frozen=True)
class KNNOptions:
    """The k-NN classifier's values; the k of the best validation top-1 is chosen among the ks."""

    ks: tuple[int, ...] | None = field(default=None, metadata={
        "help": "the ks tried, the best on validation chosen (default: DINO's, cog_pl.probe.knn.KS)", "metavar": "K"})
    temperature: float | None = field(default=None, metadata={
        "help": "the vote's temperature (default: DINO's, cog_pl.probe.knn.TEMPERATURE)"})
    precision: str | None = field(default=None, metadata={
        "help": "the similarity products' precision: 32-true, bf16-mixed, 64-true or auto (default: "
                "--probe-precision's; auto: bf16-mixed on a GPU that does bfloat16 fast, else 32-true)"})

    def __post_init__(self) -> None:
        self.settings()  # a bad k or temperature: one line, before any work
        if self.precision is not None:
            from cog_pl.probe.knn_protocol import PRECISIONS

            if self.precision not in (*PRECISIONS, "auto"):
                raise CogError(f"--knn-precision {self.precision!r}: choose from auto, {', '.join(PRECISIONS)}")

    def settings(self) -> Any:
        from cog_pl.probe.knn import KS, TEMPERATURE, KNNSettings

        return KNNSettings(ks=KS if self.ks is None else tuple(self.ks),
                           temperature=TEMPERATURE if self.temperature is None else self.temperature)


class KNN(Method):
    """The weighted k-NN classifier on the linear probe's samples."""

    name = "knn"
    label = "k-NN"
    order = 20.0
    description = "weighted k-NN (DINO's rule), k chosen on validation, on the linear probe's samples"
    options = KNNOptions
    batched = True

    def _precision(self, job: Job) -> str:
        from cog_pl.device import resolve_device
        from cog_pl.probe.knn_protocol import resolve_knn_precision

        options = job.options or KNNOptions()
        return resolve_knn_precision(options.precision or getattr(job.plan, "precision", None),
                                     resolve_device(job.device))

    def identity(self, job: Job, state: Any) -> dict[str, Any]:
        from cog_pl.probe.knn_protocol import knn_identity
        from cog_pl.results.identity import features_identity

        values = knn_identity(features_identity(state), (job.options or KNNOptions()).settings(), job.protocol,
                              self._precision(job))
        return {k: v for k, v in values.items() if k != "identity"}

    def run_cells(self, job: Job, state: Any, cells: Sequence[Cell], want: dict[str, Any]) -> Iterator[dict[str, Any]]:
        from cog_pl.device import resolve_device
        from cog_pl.probe.knn_protocol import knn_rows

        yield from knn_rows(state, list(cells), model=job.model, domain=job.domain, protocol=job.protocol,
                            settings=(job.options or KNNOptions()).settings(), device=resolve_device(job.device),
                            precision=self._precision(job))


register_method(KNN())
