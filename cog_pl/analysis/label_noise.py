"""Missing-label noise between domains (paper App. A.3).

Train one domain's linear classifier (the protocol's final probe on all its training features, with a given or a
tuned (lr, wd)), apply it to another domain's test features, and list the images it assigns to one of its own
concepts with a confidence above a threshold (0.99 by default): candidates for an unseen concept that was in fact
seen without its label.

For the report, :func:`store_noise_predictions` keeps the predictions of the IN-1K probe of a result row (made again
from the row) on each level's test images beside the results (:mod:`cog_pl.results.predictions`), from which
:mod:`cog_pl.analysis.confusions` names the seen concept each unseen concept is most often taken for
(:func:`cog_pl.results.predictions.read_noise_predictions` reads them back).
"""

from __future__ import annotations

import csv
import io
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from cog_pl.errors import CogError
from cog_pl.features.store import FeatureStore, open_store
from cog_pl.probe.data import ProbeData, l2_normalize, load_store
from cog_pl.probe.multihead import HeadsResult
from cog_pl.probe.tuner import train_probe
from cog_pl.protocol import ProbeProtocol
from cog_pl.resources import concept_name

if TYPE_CHECKING:
    from cog_pl.features.pair import StorePair

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NoiseRow:
    image: str  # "wnid/filename" when the image keys are known, else the store row
    concept: str  # the image's own concept (target domain)
    predicted: str  # the source domain's concept it was assigned to
    confidence: float


def open_domains(features: str | Path, source: str, target: str) -> tuple[FeatureStore, FeatureStore]:
    """``source``'s train store and ``target``'s test store under ``features``, refused unless they hold one model's
    features (same width, and the same ``model`` where both record it)."""
    root = Path(features)
    src, tgt = open_store(root / source / "train"), open_store(root / target / "test")
    if src.features.shape[1] != tgt.features.shape[1]:
        raise CogError(f"{source} has {src.features.shape[1]}-d features but {target} {tgt.features.shape[1]}-d: "
                       "not the same model")
    models = src.meta.get("model"), tgt.meta.get("model")
    if None not in models and models[0] != models[1]:
        raise CogError(f"{src.path} holds features of {models[0]!r}, {tgt.path} of {models[1]!r}")
    return src, tgt


def _tensors(store: FeatureStore) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """Normalised features, labels and class names of the rows that hold features (``store.valid``)."""
    keep = store.valid
    x = l2_normalize(torch.from_numpy(np.asarray(store.features, dtype=np.float32)[keep]))
    y = torch.from_numpy(np.array(store.labels, dtype=np.int64)[keep])
    classes = list(store.meta.get("classes") or [str(c) for c in range(store.num_classes)])
    return x, y, classes


def confident_predictions(features: str | Path, source: str, target: str, lr: float, wd: float,
                          threshold: float = 0.99, seed: int = 22, protocol: ProbeProtocol | None = None,
                          image_key: Callable[[int], str] | None = None,
                          stores: tuple[FeatureStore, FeatureStore] | None = None) -> list[NoiseRow]:
    """Images of ``target``'s test split that ``source``'s classifier assigns with probability >= ``threshold``.

    ``features`` holds ``<domain>/train`` and ``<domain>/test`` stores of one model; ``stores``: the two stores
    already opened by :func:`open_domains`.
    """
    protocol = protocol or ProbeProtocol()
    src, tgt = stores or open_domains(features, source, target)
    (sx, sy, src_classes), (tx, ty, tgt_classes) = _tensors(src), _tensors(tgt)
    t_index = np.asarray(tgt.index)[tgt.valid]
    data = ProbeData(sx, sy, tx[:0], ty[:0], len(src_classes))  # the target's labels name other classes
    head = train_probe(data, [lr], [wd], protocol=protocol, seeds=[seed], perm_seed=seed)
    with torch.inference_mode():
        prob = torch.softmax(tx @ head.weight[:, 0, :] + head.bias[0], dim=1)
    conf, pred = prob.max(dim=1)
    rows = []
    for i in torch.nonzero(conf >= threshold).flatten().tolist():
        image = image_key(int(t_index[i])) if image_key else f"row {int(t_index[i])}"
        rows.append(NoiseRow(image, tgt_classes[int(ty[i])], src_classes[int(pred[i])], float(conf[i])))
    return sorted(rows, key=lambda r: -r.confidence)


def noise_table(rows: Sequence[NoiseRow], total: int | None = None) -> str:
    """Markdown table with concept names."""
    head = [f"{len(rows)} confident predictions" + (f" of {total} test images ({100 * len(rows) / total:.2f} %)"
                                                     if total else ""), "",
            "| image | its concept | predicted concept | confidence |", "|---|---|---|---|"]
    body = [f"| {r.image} | {r.concept} {concept_name(r.concept)} | {r.predicted} {concept_name(r.predicted)} | "
            f"{r.confidence:.4f} |" for r in rows]
    return "\n".join(head + body) + "\n"


def noise_csv(rows: Sequence[NoiseRow]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["image", "concept", "concept_name", "predicted", "predicted_name", "confidence"])
    for r in rows:
        w.writerow([r.image, r.concept, concept_name(r.concept), r.predicted, concept_name(r.predicted),
                    f"{r.confidence:.6f}"])
    return buf.getvalue()


def reproduce_final_probe(pair: StorePair, row: dict[str, Any], device: str = "cpu") -> HeadsResult:
    """The final probe of a linear all-data ``row`` made again on ``pair`` (its stores): its (lr, wd), protocol,
    precision and divergence rule, its seeds (:func:`cog_pl.probe.cell.probe`'s), on the full train set;
    evaluated on the test store."""
    from cog_pl.probe.data import sub_seed

    protocol = ProbeProtocol(**{k: tuple(v) if isinstance(v, list) else v for k, v in row["protocol"].items()})
    (tx, ty), (sx, sy) = load_store(pair.train, device), load_store(pair.test, device)
    if protocol.normalize:
        tx, sx = l2_normalize(tx), l2_normalize(sx)
    data = ProbeData(tx, ty, sx, sy, pair.num_classes)
    seed = int(row["seed"])
    return train_probe(data, [row["lr"]], [row["wd"]], protocol=protocol, seeds=[sub_seed(seed, 20)],
                       perm_seed=sub_seed(seed, 21), precision=row["precision"],
                       on_divergence="halt" if row.get("mode") == "exact" else "rollback")


def _read(store: FeatureStore, normalize: bool, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = load_store(store, device)
    return (l2_normalize(x) if normalize else x), y


def store_noise_predictions(features: str | Path, results: str | Path, row: dict[str, Any],
                            targets: Sequence[str], min_agreement: float = 0.99,
                            device: str = "cpu") -> list[Path]:
    """The label-noise check's predictions, kept beside the results: the final probe of the source domain's linear
    all-data ``row`` (IN-1K) made again (:func:`reproduce_final_probe`) and applied to each target domain's test
    images (``features/<model>/<target>/test``), written as predictions whose labels name the target's concepts
    (``label_classes``) and whose classes the source's. Refused (returns nothing, with a warning) unless the
    probe made again gives the row's stored first class on at least ``min_agreement`` of the source's test images;
    the agreement is recorded (``source.agreement``)."""
    from cog_pl.features.pair import open_pair
    from cog_pl.probe.multihead import predict_heads
    from cog_pl.results.predictions import (
        Predictions,
        noise_relative_path,
        predictions_root,
        read_row_predictions,
        write_predictions,
    )

    model, source, seed = row["model"], row["domain"], int(row["seed"])
    stored = read_row_predictions(results, row)
    if stored is None:
        log.warning("label-noise predictions: the %s row of %s, seed %d, has no stored predictions", source, model,
                    seed)
        return []
    root = Path(features) / model
    pair = open_pair(root / source)
    head = reproduce_final_probe(pair, row, device)
    scored = [not (row.get("mode") != "exact" and head.diverged_epoch[0] == 0)]
    normalize = bool(row["protocol"].get("normalize", True))
    own = predict_heads(head.weight, head.bias, _read(pair.test, normalize, device)[0], scored=scored)[0]
    agreement = float((own[:, 0].numpy() == stored.top5[:, 0]).mean()) if len(stored) == len(own) else 0.0
    if agreement < min_agreement:
        log.warning("label-noise predictions of %s not stored: the %s probe made again agrees with its row's on "
                    "%.2f %% of the test images (at least %.0f %% needed)", model, source, 100 * agreement,
                    100 * min_agreement)
        return []
    written = []
    for target in targets:
        tgt = open_pair(root / target).test
        x, y = _read(tgt, normalize, device)
        ranked = predict_heads(head.weight, head.bias, x, scored=scored)[0]
        origin = {"kind": "label-noise", "domain": source, "agreement": agreement,
                  "row_predictions_sha256": row["predictions"]["sha256"]}
        preds = Predictions.of(ranked, y, np.asarray(tgt.index)[tgt.valid], pair.classes,
                               label_classes=list(tgt.meta.get("classes") or []) or None, source=origin,
                               model=model, method="linear", domain=target, shots=None, seed=seed)
        rel = noise_relative_path(model, source, target, seed)
        write_predictions(predictions_root(results), rel, preds)
        written.append(predictions_root(results) / rel)
    log.info("label-noise predictions of %s (%s probe, seed %d, agreement %.2f %%): %d target domains", model,
             source, seed, 100 * agreement, len(written))
    return written
