"""Missing-label noise between domains (paper App. A.3).

Train one domain's linear classifier (the protocol's final probe on all its training features, with a given or a
tuned (lr, wd)), apply it to another domain's test features, and list the images it assigns to one of its own
concepts with a confidence above a threshold (0.99 by default): candidates for an unseen concept that was in fact
seen without its label.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from cog_pl.features.store import FeatureStore, open_store
from cog_pl.probe.data import ProbeData, l2_normalize
from cog_pl.probe.tuner import train_probe
from cog_pl.protocol import ProbeProtocol
from cog_pl.resources import concept_name


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
        raise ValueError(f"{source} has {src.features.shape[1]}-d features but {target} {tgt.features.shape[1]}-d: "
                         "not the same model")
    models = src.meta.get("model"), tgt.meta.get("model")
    if None not in models and models[0] != models[1]:
        raise ValueError(f"{src.path} holds features of {models[0]!r}, {tgt.path} of {models[1]!r}")
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
