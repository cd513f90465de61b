"""What concepts are mistaken for, from stored test predictions: the most frequent confusions of a level, and the
seen concept each unseen concept is most often taken for by the IN-1K probe (the label-noise check's predictions).

Pure functions of labels and first classes, pooled over seeds. A confusion ``(true, predicted)`` counts the test
images of ``true`` whose first class is ``predicted`` (another concept); its share is that count over the images of
``true`` (times the seeds).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Confusion:
    """``count`` of the ``total`` test images of class ``true`` (over the seeds) were given class ``predicted``."""

    true: int
    predicted: int
    count: int
    total: int

    @property
    def share(self) -> float:
        """``count / total`` in percent."""
        return 100.0 * self.count / self.total if self.total else 0.0


def _pairs(labels: Sequence[np.ndarray], predicted: Sequence[np.ndarray], n_pred: int) -> tuple[np.ndarray,
                                                                                                 np.ndarray]:
    """``(codes, totals)``: ``label * n_pred + predicted`` over every seed's images (no prediction left out) and
    the images of each label over the seeds."""
    lab = np.concatenate([np.asarray(x, dtype=np.int64) for x in labels])
    pred = np.concatenate([np.asarray(x, dtype=np.int64) for x in predicted])
    if lab.shape != pred.shape:
        raise ValueError(f"{len(lab)} labels for {len(pred)} predictions")
    n_label = int(lab.max(initial=-1)) + 1
    totals = np.bincount(lab, minlength=n_label)
    keep = pred >= 0
    return lab[keep] * n_pred + pred[keep], totals


def top_confusions(labels: Sequence[np.ndarray], predicted: Sequence[np.ndarray], num_classes: int,
                   k: int = 5) -> list[Confusion]:
    """The ``k`` most frequent ``(true, predicted)`` confusions between classes of one domain (labels and first
    classes of each seed); ties by the true class, then the predicted one."""
    codes, totals = _pairs(labels, predicted, num_classes)
    counts = np.bincount(codes, minlength=num_classes * num_classes)
    counts[np.arange(num_classes) * (num_classes + 1)] = 0  # right answers are no confusion
    order = np.lexsort((np.arange(len(counts)), -counts))[:k]
    return [Confusion(int(c // num_classes), int(c % num_classes), int(counts[c]), int(totals[c // num_classes]))
            for c in order if counts[c] > 0]


def most_taken_for(labels: Sequence[np.ndarray], predicted: Sequence[np.ndarray], n_label: int,
                   n_pred: int) -> list[Confusion | None]:
    """For each of the ``n_label`` classes the labels name, the predicted class (of another class list: the seen
    concepts) its images are most often given, lowest class on ties; None for a class without images."""
    codes, totals = _pairs(labels, predicted, n_pred)
    counts = np.bincount(codes, minlength=n_label * n_pred)[: n_label * n_pred].reshape(n_label, n_pred)
    totals = np.pad(totals, (0, max(0, n_label - len(totals))))[:n_label]
    best = counts.argmax(axis=1)  # the first of equal counts: the lowest class
    return [Confusion(t, int(best[t]), int(counts[t, best[t]]), int(totals[t])) if totals[t] else None
            for t in range(n_label)]
