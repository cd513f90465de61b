"""Conversion between feature stores and the released ImageNet-CoG code's ``X_Y.pth`` files.

The released code (github naver/cog) saves ``<model_dir>/<dataset>/features_{train,test}/X_Y.pth``: a dict with a
float tensor ``"X"`` (N x D) and a long tensor ``"Y"`` (N). Importing keeps the rows in file order
(``index = 0..N-1``) and records where they came from; exporting writes float32 ``X`` as the released code reads
(vector stores only: a token store's ``N x T x D`` is no ``X`` the released code can read, and is refused).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from cog_pl import resources
from cog_pl.errors import CogError, StoreError
from cog_pl.features.pair import SPLITS, open_pair
from cog_pl.features.store import FeatureStore, make_meta, open_store, write_store
from cog_pl.io import load_failure
from cog_pl.protocol import LEVEL_OF_DOMAIN


def domain_classes(domain: str) -> list[str]:
    """The class wnids of a domain in label order: IN-1K order, or a level's sorted wnids."""
    if domain == "in1k":
        return list(resources.in1k_wnids())
    if domain in LEVEL_OF_DOMAIN:
        return sorted(resources.official_levels()[LEVEL_OF_DOMAIN[domain]])
    raise CogError(f"unknown domain {domain!r}; expected in1k or cog_l1 .. cog_l5")


def read_pth(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
    """``(X, Y)`` of an ``X_Y.pth`` file, checked."""
    path = Path(path)
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        raise StoreError(f"{path}: not a readable X_Y.pth file: {load_failure(err)}") from err
    if not isinstance(data, dict) or "X" not in data or "Y" not in data:
        raise StoreError(f"{path}: expected a dict with tensors 'X' and 'Y'")
    x, y = data["X"], data["Y"]
    if not (torch.is_tensor(x) and x.is_floating_point() and x.ndim == 2):
        raise StoreError(f"{path}: 'X' must be a float N x D tensor, got {getattr(x, 'dtype', type(x))}")
    if not (torch.is_tensor(y) and y.ndim == 1 and not y.is_floating_point() and len(y) == len(x)):
        raise StoreError(f"{path}: 'Y' must be an integer tensor of {len(x)} labels")
    return x.numpy(), y.to(torch.int64).numpy()


def import_pth(pth: str | os.PathLike, out: str | os.PathLike, model: str, domain: str, split: str,
               weights_sha256: str | None = None, transform: dict[str, Any] | None = None,
               overwrite: bool = False, dtype: str = "float16") -> Path:
    """Convert one ``X_Y.pth`` into a v1 store at ``out`` with ``dtype`` features; NaN, inf and values beyond
    float16's range (in a float16 store) are refused, naming the row, rather than stored as inf."""
    x, y = read_pth(pth)
    classes = domain_classes(domain)
    if len(y) and (y.min() < 0 or y.max() >= len(classes)):
        raise StoreError(f"{pth}: labels span {y.min()}..{y.max()}, but {domain} has {len(classes)} classes")
    meta = make_meta(model=model, weights_sha256=weights_sha256, domain=domain, split=split,
                     num_classes=len(classes), classes=classes, transform=transform,
                     level_file_sha256=resources.level_file_sha256(),
                     source={"imported_from": str(Path(pth).resolve())})
    return write_store(out, x, y, None, meta, overwrite=overwrite, dtype=dtype)


def export_pth(store: str | os.PathLike | FeatureStore, out: str | os.PathLike) -> Path:
    """Write a store's rows (a split folder, or an opened store) as the released code's ``X_Y.pth`` (float32 X,
    int64 Y). A token store is refused in one line: the released code reads X as N x D (one vector per image), so
    its tokens are read from the store itself (``features.npy``, N x T x D, memory-mappable; docs/feature_store.md)."""
    s = store if isinstance(store, FeatureStore) else open_store(store)
    if s.tokens is not None:
        raise StoreError(f"{s.path}: a token store ({s.tokens} tokens per image, feature {s.meta.get('feature')!r}) "
                         "cannot be exported: the released code's X_Y.pth holds one N x D vector per image; read the "
                         f"tokens from {s.path / 'features.npy'} (N x T x D, layout in meta.json's token_layout)")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    keep = s.valid  # rows whose image was unreadable at extraction are left out
    torch.save({"X": torch.from_numpy(np.asarray(s.features, dtype=np.float32)[keep]),
                "Y": torch.from_numpy(np.array(s.labels, dtype=np.int64)[keep])}, tmp)
    os.replace(tmp, out)
    return out


def export_pair(root: str | os.PathLike, out: str | os.PathLike) -> list[Path]:
    """Write the train and test stores of ``root`` (checked together, :func:`~cog_pl.features.pair.open_pair`) as
    the released code's ``<out>/features_{train,test}/X_Y.pth``."""
    pair = open_pair(root, min_classes=1)  # (an export probes nothing)
    return [export_pth(pair[split], Path(out) / f"features_{split}" / "X_Y.pth") for split in SPLITS]
