"""Test predictions kept beside their result rows: the top-5 classes and the true label of every test image.

Every final probe (linear, k-NN) and every fine-tuned model's test hands its predictions over with its row
(``row["predictions"]``, a :class:`Predictions`); :func:`cog_pl.results.append_row` writes them beside the results
file (:func:`write_row_predictions`) and keeps their record in the row, so any analysis (:mod:`cog_pl.analysis`) is
recomputed from stored data without probing again. :func:`read_row_predictions` reads them back and refuses a file
whose content does not match its row; a row made before predictions were kept has no record and stays valid.

Format ``cog-pl-predictions`` version 1 (docs/concepts.md): one NumPy ``.npz`` file (zip, deflated) per row, at
``<results stem>.predictions/<model>/<method>/<domain>/shots-<all|N>/seed-<S>.npz`` beside the results file
(``results.sqlite``: ``results.predictions/``), written atomically. Members:

- ``top5``: ``(N, k)`` class indices, best first (``k = min(5, classes)``); ties broken as the row's metric breaks
  them (the lower class first); -1 where the classifier gives none (a final probe rolled back to no state);
- ``label``: ``(N,)`` each image's true class (int16, as ``top5``; int32 past 32,767 classes);
- ``image_step``: ``(N,)`` int64, the test images (each one's dataset row, the test store's ``index``) stored as
  steps, the first row then the differences, which compress to almost nothing when the rows are consecutive;
- ``meta``: JSON text: ``format``, ``version``, the row's key (``model``, ``method``, ``domain``, ``shots``,
  ``seed``), ``classes`` (the wnids of the class indices, or null), and, for predictions that are no row's own (the
  label-noise check, :mod:`cog_pl.analysis.label_noise`), ``label_classes`` (the classes the labels name) and
  ``source``;
- ``sha256``: the content digest: sha256 over every other member (name, dtype, shape, bytes, in name order) and the
  meta text.

The label-noise check's predictions (no row's own) lie at ``<model>/noise/<source>/<target>/seed-<S>.npz``
(:func:`noise_relative_path`), recording in ``source`` the digest of the source row's predictions they were made
from (:func:`read_noise_predictions` refuses them once that row is made again).

The row's record: ``{"format": "cog-pl-predictions v1", "path": <relative to the predictions folder>,
"sha256": <content digest>, "images": N, "bytes": <file size>}``.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import urllib.parse
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from cog_pl.errors import PredictionsError
from cog_pl.io import atomic_open

FORMAT = "cog-pl-predictions"
VERSION = 1
RECORD_FORMAT = f"{FORMAT} v{VERSION}"
TOP = 5
#: The value of ``top5`` where a classifier gives no prediction.
NONE = -1
_ARRAYS = ("image_step", "label", "top5")


@dataclass(frozen=True, eq=False)
class Predictions:
    """The top-``k`` classes (``top5``, ``(N, k)``, best first, -1: none) and the true ``label`` of each test
    ``image`` (its dataset row), with the ``classes`` the indices stand for (wnids; None when unknown) and
    ``meta``: the key of the row they belong to and, for predictions of another kind, what made them."""

    top5: np.ndarray
    label: np.ndarray
    image: np.ndarray
    classes: tuple[str, ...] | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, ranked: Any, labels: Any, images: Any, classes: Sequence[str] | None = None,
           **meta: Any) -> Predictions:
        """From ranked class indices (``(N, >=1)``, a tensor or an array; the first 5 kept), labels and images."""
        ranked, labels, images = (np.asarray(_numpy(v)) for v in (ranked, labels, images))
        if ranked.ndim != 2 or ranked.shape[0] != len(labels) or len(images) != len(labels):
            raise ValueError(f"predictions: {ranked.shape} ranked classes for {len(labels)} labels and "
                             f"{len(images)} images")
        high = max(int(ranked.max(initial=0)), int(labels.max(initial=0)), len(classes or ()),
                   len(meta.get("label_classes") or ()))
        dtype = np.int16 if high < np.iinfo(np.int16).max else np.int32
        return cls(ranked[:, :TOP].astype(dtype), labels.astype(dtype), images.astype(np.int64),
                   None if classes is None else tuple(classes), dict(meta))

    def __len__(self) -> int:
        return len(self.label)

    def __str__(self) -> str:  # a row printed before its predictions were stored (no results file)
        return f"{len(self)} test predictions (not stored)"

    @property
    def correct(self) -> np.ndarray:
        """Whether each image's first class is its label."""
        return self.top5[:, 0] == self.label

    @property
    def top1(self) -> float:
        """Top-1 accuracy (%)."""
        return 100.0 * float(self.correct.mean()) if len(self) else 0.0

    def _meta_text(self) -> str:
        return json.dumps({"format": FORMAT, "version": VERSION, **self.meta,
                           "classes": None if self.classes is None else list(self.classes)}, sort_keys=True)

    def _members(self) -> dict[str, np.ndarray]:
        steps = np.diff(self.image, prepend=np.int64(0)) if len(self.image) else self.image
        return {"image_step": steps.astype(np.int64), "label": self.label, "top5": self.top5}

    def digest(self) -> str:
        """The content digest (the module's docstring)."""
        return _digest(self._members(), self._meta_text())

    def to_bytes(self) -> bytes:
        """The ``.npz`` file's bytes."""
        members = self._members()
        meta = self._meta_text()
        buf = io.BytesIO()
        np.savez_compressed(buf, **members, meta=np.array(meta), sha256=np.array(_digest(members, meta)))
        return buf.getvalue()


def _numpy(value: Any) -> Any:
    return value.detach().cpu().numpy() if hasattr(value, "detach") else value


def _digest(members: dict[str, np.ndarray], meta: str) -> str:
    h = hashlib.sha256()
    for name in sorted(members):
        a = np.ascontiguousarray(members[name])
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    h.update(meta.encode())
    return h.hexdigest()


def predictions_root(results: str | os.PathLike) -> Path:
    """The folder of a results file's predictions: ``results.sqlite`` -> ``results.predictions``."""
    results = Path(results)
    return results.with_name(f"{results.stem}.predictions")


def _part(text: Any) -> str:
    """A path component for a model, method or domain name (``/`` and a leading dot escaped)."""
    part = urllib.parse.quote(str(text), safe="._@:+=-")
    return "%2E" + part[1:] if part.startswith(".") else part


def relative_path(model: str, method: str, domain: str, shots: int | None, seed: int) -> str:
    """Where a row's predictions lie inside the predictions folder."""
    return f"{_part(model)}/{_part(method)}/{_part(domain)}/shots-{shots or 'all'}/seed-{int(seed)}.npz"


def write_predictions(root: str | os.PathLike, relative: str, predictions: Predictions) -> dict[str, Any]:
    """Write ``predictions`` at ``root/relative`` atomically; returns their record."""
    data = predictions.to_bytes()
    with atomic_open(Path(root) / relative, "wb") as fh:
        fh.write(data)
    return {"format": RECORD_FORMAT, "path": relative, "sha256": predictions.digest(), "images": len(predictions),
            "bytes": len(data)}


def check_against_row(predictions: Predictions, row: dict[str, Any], where: str) -> None:
    """Refuse predictions whose top-1 is not the row's ``test_top1`` (half an image of tolerance): a bug upstream,
    never to be stored or analysed."""
    if "test_top1" in row and len(predictions):
        if abs(predictions.top1 - float(row["test_top1"])) > 50.0 / len(predictions):
            raise PredictionsError(f"{where}: the predictions' top-1 {predictions.top1:.4f} is not the row's "
                                   f"test_top1 {float(row['test_top1']):.4f}")


def write_row_predictions(results: str | os.PathLike, row: dict[str, Any]) -> dict[str, Any]:
    """The row with its :class:`Predictions` (``row["predictions"]``) written beside ``results`` and replaced by
    their record; a row without them is returned as it is. The one place rows' predictions are written."""
    predictions = row.get("predictions")
    if not isinstance(predictions, Predictions):
        return row
    key = {k: row.get(k) for k in ("model", "method", "domain", "shots", "seed")}
    rel = relative_path(**key)
    check_against_row(predictions, row, f"{predictions_root(results) / rel}")
    stored = Predictions(predictions.top5, predictions.label, predictions.image, predictions.classes,
                         {**predictions.meta, **key})
    return {**row, "predictions": write_predictions(predictions_root(results), rel, stored)}


def load_predictions(path: str | os.PathLike) -> Predictions:
    """Read a predictions file, checking its format and its content digest."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as npz:
            members = {name: npz[name] for name in _ARRAYS}
            meta_text, recorded = str(npz["meta"]), str(npz["sha256"])
        meta = json.loads(meta_text)
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as err:
        raise PredictionsError(f"predictions file {path} is not readable as {RECORD_FORMAT}: {err}") from err
    if meta.get("format") != FORMAT or meta.get("version") != VERSION:
        raise PredictionsError(f"predictions file {path} is {meta.get('format')} v{meta.get('version')}; this "
                               f"cog-pl reads {RECORD_FORMAT}")
    if _digest(members, meta_text) != recorded:
        raise PredictionsError(f"predictions file {path} is damaged: its content does not match its digest")
    classes = meta.pop("classes", None)
    for k in ("format", "version"):
        meta.pop(k)
    return Predictions(members["top5"], members["label"], np.cumsum(members["image_step"]),
                       None if classes is None else tuple(classes), meta)


def read_row_predictions(results: str | os.PathLike, row: dict[str, Any]) -> Predictions | None:
    """The stored predictions of ``row``; None when it has none (made before predictions were kept, or the file was
    removed: :func:`missing_reason` says which). Predictions that are not the row's (another digest, key or top-1)
    are refused."""
    record = row.get("predictions")
    if not isinstance(record, dict):
        return None
    path = predictions_root(results) / record["path"]
    if not path.is_file():
        return None
    predictions = load_predictions(path)
    name = "/".join(str(row.get(k)) for k in ("model", "method", "domain", "shots", "seed"))
    if predictions.digest() != record.get("sha256"):
        raise PredictionsError(f"predictions file {path} does not match its row {name} in {results} (sha256 "
                               f"{predictions.digest()[:16]}..., the row recorded {str(record.get('sha256'))[:16]}...):"
                               " made by another run; make the row again (--overwrite) or remove the file")
    key = {k: row.get(k) for k in ("model", "method", "domain", "shots", "seed")}
    if any(predictions.meta.get(k) != v for k, v in key.items()):
        raise PredictionsError(f"predictions file {path} holds the predictions of another row than {name}")
    check_against_row(predictions, row, str(path))
    return predictions


def missing_reason(results: str | os.PathLike, row: dict[str, Any]) -> str | None:
    """Why a row has no predictions to read: made before they were kept, or its file is gone; None when it has."""
    record = row.get("predictions")
    if not isinstance(record, dict):
        return "made before predictions were kept"
    if not (predictions_root(results) / record["path"]).is_file():
        return f"its file {predictions_root(results) / record['path']} is missing"
    return None


#: Where the label-noise check's predictions lie in a predictions folder (:mod:`cog_pl.analysis.label_noise`).
NOISE_FOLDER = "noise"


def noise_relative_path(model: str, source: str, target: str, seed: int) -> str:
    """``<model>/noise/<source>/<target>/seed-<S>.npz``: the label-noise predictions of ``source``'s probe (IN-1K)
    on ``target``'s test images."""
    return f"{_part(model)}/{NOISE_FOLDER}/{_part(source)}/{_part(target)}/seed-{int(seed)}.npz"


def noise_file(results: str | os.PathLike, source_row: dict[str, Any], target: str) -> Path:
    """Where the label-noise predictions of ``source_row``'s probe on ``target`` lie beside ``results``."""
    rel = noise_relative_path(source_row["model"], source_row["domain"], target, int(source_row["seed"]))
    return predictions_root(results) / rel


def read_noise_predictions(results: str | os.PathLike, source_row: dict[str, Any], target: str) -> Predictions | None:
    """The label-noise predictions of ``source_row``'s probe on ``target`` (None when none were stored); refused
    when made from another row than the current one (the source row made again since: another digest of its
    predictions) or for another model, source or target than their place says (a file of another level)."""
    path = noise_file(results, source_row, target)
    if not path.is_file():
        return None
    preds = load_predictions(path)
    made_for = (preds.meta.get("model"), preds.meta.get("domain"), (preds.meta.get("source") or {}).get("domain"))
    if made_for != (source_row["model"], target, source_row["domain"]):
        raise PredictionsError(f"label-noise predictions {path} are {made_for[0]}'s {made_for[2]} probe on "
                               f"{made_for[1]}'s test images, not {source_row['model']}'s {source_row['domain']} "
                               f"probe on {target}'s where they lie: cog-pl run makes them again, or remove the file")
    made_from = preds.meta.get("source", {}).get("row_predictions_sha256")
    if made_from != (source_row.get("predictions") or {}).get("sha256"):
        raise PredictionsError(f"label-noise predictions {path} were made from another {source_row['domain']} row "
                               "than the one in the results (made again since): run the label-noise check again "
                               "(cog-pl run resumes it) or remove the file")
    return preds
