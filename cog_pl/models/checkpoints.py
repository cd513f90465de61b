"""Reading released checkpoints into a backbone: unwrap, strip the authors' prefix, drop heads, map keys.

Loading is strict on the backbone: every backbone tensor must come from the file (a missing one is an error that
names it); file tensors that are neither backbone weights nor declared heads are an error too, so a wrong prefix
never yields a silently random model.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import nn

logger = logging.getLogger(__name__)

#: Keys under which training code commonly nests the weights.
CONTAINER_KEYS = ("state_dict", "model_state_dict", "model", "network", "net", "teacher", "online_network_state_dict",
                  "module", "encoder")


def read_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    """Load a checkpoint file and return its flat tensor dict (nested containers unwrapped)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__  # torch's is long
        raise ValueError(f"cannot read checkpoint {path}: {reason}") from err
    for _ in range(3):
        if isinstance(obj, Mapping) and not _is_tensor_dict(obj):
            inner = next((obj[k] for k in CONTAINER_KEYS if k in obj and isinstance(obj[k], Mapping)), None)
            if inner is None:
                break
            obj = inner
    if not isinstance(obj, Mapping) or not _is_tensor_dict(obj):
        raise ValueError(f"checkpoint {path} holds no state dict (looked under {', '.join(CONTAINER_KEYS)})")
    return {k: v for k, v in obj.items() if isinstance(v, torch.Tensor)}


def _is_tensor_dict(obj: Mapping) -> bool:
    return bool(obj) and sum(isinstance(v, torch.Tensor) for v in obj.values()) >= max(1, len(obj) // 2)


def adapt_state_dict(state: Mapping[str, torch.Tensor], prefix: str = "", ignore: tuple[str, ...] = (),
                     key_map: Mapping[str, str] | None = None) -> dict[str, torch.Tensor]:
    """Keep keys under ``prefix`` (stripped), apply ``key_map`` (regex -> replacement), drop ``ignore``d keys."""
    out = {}
    for key, value in state.items():
        if prefix:
            if not key.startswith(prefix):
                continue
            key = key[len(prefix):]
        for pattern, repl in (key_map or {}).items():
            key = re.sub(pattern, repl, key)
        if key.endswith("num_batches_tracked") or any(key.startswith(i) for i in ignore):
            continue
        out[key] = value
    if not out:
        raise ValueError(f"no checkpoint key starts with prefix {prefix!r}; first keys: {', '.join(list(state)[:5])}")
    return out


def load_into(model: nn.Module, state: Mapping[str, torch.Tensor], source: str = "checkpoint") -> None:
    """Strictly load backbone weights; errors name the missing, unexpected or mis-shaped keys."""
    own = {k: v for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")}
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    shapes = [f"{k}: {tuple(state[k].shape)} vs {tuple(own[k].shape)}" for k in own
              if k in state and state[k].shape != own[k].shape]
    problems = []
    if missing:
        problems.append(f"{len(missing)} backbone tensors missing (e.g. {', '.join(missing[:4])})")
    if unexpected:
        problems.append(f"{len(unexpected)} unexpected tensors (e.g. {', '.join(unexpected[:4])}); "
                        "wrong --prefix or a head to ignore?")
    if shapes:
        problems.append(f"{len(shapes)} shape mismatches (e.g. {'; '.join(shapes[:3])})")
    if problems:
        raise ValueError(f"{source} does not fit the backbone: " + "; ".join(problems))
    model.load_state_dict(dict(state), strict=False)


def load_in_order(model: nn.Module, state: Mapping[str, torch.Tensor], source: str = "checkpoint") -> None:
    """Map tensors by position (for files whose key names differ but order and shapes match the model's)."""
    src = [(k, v) for k, v in state.items() if not k.endswith("num_batches_tracked")]
    dst = [k for k in model.state_dict() if not k.endswith("num_batches_tracked")]
    if len(src) != len(dst):
        raise ValueError(f"{source} has {len(src)} tensors, the model {len(dst)}: cannot map them in order")
    own = model.state_dict()
    for (sk, sv), dk in zip(src, dst):
        if sv.shape != own[dk].shape:
            raise ValueError(f"{source}: tensor {sk} {tuple(sv.shape)} does not fit {dk} {tuple(own[dk].shape)}")
    model.load_state_dict({dk: sv for (_, sv), dk in zip(src, dst)}, strict=False)
