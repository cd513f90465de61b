"""Reading published checkpoints into a backbone: load safely, take the container, strip the prefix, drop heads.

Loading is strict on the backbone: every backbone tensor must come from the file (a missing one is an error that
names it); file tensors that are neither backbone weights nor declared heads are an error too, so a wrong prefix
never yields a silently random model. What is dropped (heads, other networks, training state) is logged and kept
in the :class:`LoadReport`.

Files are read with ``torch.load(weights_only=True)``, which runs nothing from the file; the benign objects that
training scripts pickle beside the weights (``argparse.Namespace``, numpy scalars and dtypes) are allow-listed. A file
that needs more (a TorchScript archive, a ``dill`` pickle of other objects) is refused, naming why and the opt-in
``trust=True`` (``trust_checkpoint`` in the modules and the command line), which runs the file's code to read it.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import re
import warnings
import zipfile
from collections import Counter
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from cog_pl.errors import CheckpointError, MissingFileError
from cog_pl.models.registry import Layout

logger = logging.getLogger(__name__)

#: Keys under which training code commonly nests the weights (searched for users' files).
CONTAINER_KEYS = ("state_dict", "model_state_dict", "model", "network", "net", "teacher", "online_network_state_dict",
                  "module", "encoder", "model_state")
#: The marker :func:`save_converted` writes: a file re-saved as plain tensors by ``cog-pl models convert``.
CONVERTED = "cog_pl_converted"
#: The key every Lightning checkpoint has beside its ``state_dict`` (``lightning`` and ``pytorch_lightning`` alike).
LIGHTNING_KEY = "pytorch-lightning_version"
#: Prefixes that wrappers put before every key of the network they wrap, stripped from users' files in this order
#: before anything else, as timm 1.0.31 ``timm/models/_helpers.py`` ``clean_state_dict`` strips them (``module.``:
#: ``DistributedDataParallel`` and ``DataParallel``; ``_orig_mod.``: ``torch.compile``, outside or inside DDP).
WRAPPER_PREFIXES = ("_orig_mod.", "module.", "_orig_mod.")

#: How the loading options are spelled where a load was asked for, for the messages that suggest one: the Python
#: API's keywords (:func:`~cog_pl.models.build_backbone`, ``FeatureExtractor``), ``cog-pl extract``'s config keys,
#: and ``cog-pl run`` / ``cog-pl models check|convert``'s options. A command sets its own with :func:`spelled`.
API_SPELLING = {"prefix": "prefix={!r}", "key_map": "key_map={{REGEX: REPLACEMENT}}", "in_order": "in_order=True",
                "trust": "trust_checkpoint=True"}
EXTRACT_SPELLING = {"prefix": "--model.prefix {}", "key_map": "--model.key_map '{{REGEX: REPLACEMENT}}'",
                    "in_order": "--model.in_order true", "trust": "--model.trust_checkpoint true"}
COMMAND_SPELLING = {"prefix": "--checkpoint-prefix {}", "key_map": "--checkpoint-key-map '{{REGEX: REPLACEMENT}}'",
                    "in_order": "--checkpoint-in-order", "trust": "--trust-checkpoint"}
_SPELLING: ContextVar[dict[str, str] | None] = ContextVar("cog_pl_checkpoint_option_spelling", default=None)


@contextlib.contextmanager
def spelled(spelling: dict[str, str]) -> Iterator[None]:
    """Within the block, messages suggest the loading options as ``spelling`` writes them (a command's own)."""
    token = _SPELLING.set(spelling)
    try:
        yield
    finally:
        _SPELLING.reset(token)


def option(name: str, value: str = "") -> str:
    """The loading option ``name`` (prefix, key_map, in_order, trust) as the command in use spells it."""
    return (_SPELLING.get() or API_SPELLING)[name].format(value)


def trust_hint() -> str:
    """What to do about a file that safe loading refuses, in the spelling of the command in use."""
    return (f"if you trust the file, pass {option('trust')}, or re-save it once as plain tensors with cog-pl models "
            "convert")


def _safe_globals() -> list[Any]:
    """Objects training scripts pickle beside the weights that unpickle without running code from the file."""
    scalar = np._core.multiarray.scalar
    dtypes = [type(np.dtype(t)) for t in (np.float16, np.float32, np.float64, np.int32, np.int64, np.bool_)]
    # numpy 1.x wrote numpy.core.multiarray.scalar (torch.serialization.safe_globals takes (object, name) for that)
    return [argparse.Namespace, scalar, (scalar, "numpy.core.multiarray.scalar"), np.dtype, *dtypes]


def is_torchscript(path: str | Path) -> bool:
    """A ``torch.jit.save`` archive (it holds TorchScript code: ``<archive>/code/``, ``constants.pkl``)."""
    try:
        with zipfile.ZipFile(path) as zf:
            return any(n.split("/", 1)[-1].startswith(("code/", "constants.pkl")) for n in zf.namelist())
    except (zipfile.BadZipFile, OSError):
        return False


def load_file(path: str | Path, trust: bool = False) -> Any:
    """The unpickled content of a checkpoint file; nothing from the file runs unless ``trust``."""
    path = Path(path)
    if path.is_dir():
        raise CheckpointError(f"checkpoint {path} is a folder, not a weights file: name the file in it")
    if not path.is_file():
        raise MissingFileError(f"checkpoint {path} does not exist")
    if is_torchscript(path):
        if not trust:
            raise CheckpointError(f"checkpoint {path} is a TorchScript archive: reading it runs its code, so it was "
                                  f"not opened; {trust_hint()}")
        with warnings.catch_warnings():  # torch.jit is deprecated, but is how such an archive is read
            warnings.simplefilter("ignore", FutureWarning)
            return dict(torch.jit.load(str(path), map_location="cpu").state_dict())
    if trust:
        return torch.load(path, map_location="cpu", weights_only=False)
    try:
        with torch.serialization.safe_globals(_safe_globals()):
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        text = str(err)
        found = re.search(r"[Uu]nsupported (?:global: )?GLOBAL ([\w.]+)", text)
        if found:
            raise CheckpointError(f"checkpoint {path} pickles {found.group(1)}, which safe loading refuses (nothing "
                                  f"from the file ran); {trust_hint()}") from err
        reason = text.strip().splitlines()[0] if text.strip() else type(err).__name__  # torch's is long
        raise CheckpointError(f"cannot read checkpoint {path}: {reason}") from err


@dataclass
class LoadReport:
    """What reading a file into a backbone took and left: the facts ``cog-pl models check`` prints."""

    file: str
    container: str
    prefix: str
    loaded: int = 0
    dropped: dict[str, int] = field(default_factory=dict)  # "what (key prefix)" -> tensors
    other_objects: list[str] = field(default_factory=list)  # non-weight entries beside the container
    trusted: bool = False
    converted_from: dict | None = None
    stripped: str = ""  # the wrapper prefixes taken off every key (DDP's module., torch.compile's _orig_mod.)

    def dropped_line(self) -> str:
        return ", ".join(f"{k} ({n})" for k, n in self.dropped.items()) or "nothing"


def _is_tensor_dict(obj: Any) -> bool:
    return (isinstance(obj, Mapping) and bool(obj)
            and sum(isinstance(v, torch.Tensor) for v in obj.values()) >= max(1, len(obj) // 2))


def _describe(obj: Any) -> str:
    if isinstance(obj, Mapping):
        keys = list(obj)
        return "a dict with keys " + ", ".join(map(str, keys[:8])) + (" ..." if len(keys) > 8 else "")
    return f"a {type(obj).__name__}"


def lightning_version(obj: Any) -> str | None:
    """The Lightning version of a Lightning checkpoint (``trainer.save_checkpoint``: ``state_dict`` beside
    ``pytorch-lightning_version``, both packages write that key); None for any other file."""
    if isinstance(obj, Mapping) and isinstance(obj.get("state_dict"), Mapping) and LIGHTNING_KEY in obj:
        return str(obj[LIGHTNING_KEY])
    return None


def lightning_note(obj: Any, prefix: str = "") -> str:
    """For a Lightning checkpoint, what to add to a load error: the attribute prefixes its state dict holds (a
    LightningModule's keys start with the attribute holding each network) and the option that picks one."""
    version = lightning_version(obj)
    if version is None:
        return ""
    held = Counter(k.split(".", 1)[0] + "." for k in obj["state_dict"] if "." in str(k))
    if not held:
        return f"; it is a Lightning checkpoint (Lightning {version})"
    listed = ", ".join(f"{p} ({n} tensors)" for p, n in held.most_common(6)) + (" ..." if len(held) > 6 else "")
    first = held.most_common(1)[0][0]
    given = f" (prefix {prefix!r} was given)" if prefix else ""
    return (f"; it is a Lightning checkpoint (Lightning {version}) whose state_dict holds the module's attributes "
            f"{listed}{given}: pass the backbone's, e.g. {option('prefix', first)}")


def _own_weights(obj: Any) -> str:
    """For a Lightning checkpoint given as a paper model's file: how to read the user's own weights instead."""
    if lightning_version(obj) is None:
        return ""
    return f"{lightning_note(obj)}, and name the architecture (timm:<name>, torchvision:<name>) as the model"


def take_container(obj: Any, layout: Layout, path: str, name: str) -> tuple[dict[str, torch.Tensor], str, list[str]]:
    """The tensor dict of a file's content in ``layout``; returns it, the container used and the other entries."""
    if isinstance(obj, Mapping) and CONVERTED in obj and isinstance(obj.get("state_dict"), Mapping):
        return dict(obj["state_dict"]), f"state_dict ({CONVERTED})", []
    version = lightning_version(obj) if layout.container is None else None
    if version is not None:  # a LightningModule's state dict: its keys carry the attribute names
        return (_tensors(obj["state_dict"]), f"state_dict (a Lightning checkpoint, Lightning {version})",
                [str(k) for k in obj if k != "state_dict"])
    if layout.container is None:  # a user's file: the usual containers
        used, others = [], []
        for _ in range(3):
            if _is_tensor_dict(obj) or not isinstance(obj, Mapping):
                break
            key = next((k for k in CONTAINER_KEYS if k in obj and isinstance(obj[k], Mapping)), None)
            if key is None:
                break
            used.append(key)
            others = others or [str(k) for k in obj if k != key]
            obj = obj[key]
        if not _is_tensor_dict(obj):
            raise CheckpointError(f"checkpoint {path} holds no state dict (looked under {', '.join(CONTAINER_KEYS)}); "
                                  f"it holds {_describe(obj)}")
        return _tensors(obj), "/".join(used) or "(the file is the state dict)", others
    inner, others = obj, []
    for key in layout.container:
        if not isinstance(inner, Mapping) or key not in inner:
            expected = "[" + "][".join(repr(k) for k in layout.container) + "]"
            raise CheckpointError(f"checkpoint {path} is not {name}'s published file: that file holds its weights "
                                  f"under {expected}, this one holds {_describe(inner)}{_own_weights(obj)}")
        others = [str(k) for k in inner if k != key]
        inner = inner[key]
    if not _is_tensor_dict(inner):
        what = "/".join(layout.container) or "the file"
        raise CheckpointError(f"checkpoint {path}: {what} is {_describe(inner)}, not a tensor dict as {name}'s "
                              f"published file holds{_own_weights(obj)}")
    return _tensors(inner), "/".join(layout.container) or "(the file is the state dict)", others


def strip_wrappers(state: Mapping[str, torch.Tensor], path: str, keep: str = "") -> tuple[dict[str, torch.Tensor], str]:
    """A user's tensor dict without the wrapper prefixes of :data:`WRAPPER_PREFIXES` (key by key, as timm's
    ``clean_state_dict``); returns it and what was stripped (``""``: nothing). A wrapper that ``keep`` (a prefix the
    user gave) starts with is left for that prefix to take."""
    wrappers = tuple(w for w in WRAPPER_PREFIXES if not keep.startswith(w))
    out, stripped = {}, Counter()
    for key, value in state.items():
        clean = key
        for wrapper in wrappers:
            if clean.startswith(wrapper):
                clean = clean[len(wrapper):]
        if clean != key:
            stripped[key[:len(key) - len(clean)]] += 1
        if clean in out:
            raise CheckpointError(f"checkpoint {path} holds {clean} both with and without a wrapper prefix "
                                  f"({', '.join(stripped)}): pass the one to read with {option('prefix', 'PREFIX')}")
        out[clean] = value
    return out, ", ".join(f"{w!r} ({n} keys)" for w, n in stripped.items())


def _tensors(obj: Mapping) -> dict[str, torch.Tensor]:
    return {str(k): v for k, v in obj.items() if isinstance(v, torch.Tensor)}


def _group(key: str) -> str:
    parts = key.split(".")
    return ".".join(parts[:2]) + ".*" if len(parts) > 2 else key


def adapt_state_dict(state: Mapping[str, torch.Tensor], layout: Layout, key_map: Mapping[str, str] | None = None,
                     report: LoadReport | None = None) -> dict[str, torch.Tensor]:
    """Keep keys under the layout's prefix (stripped), drop its heads, apply its renames (and ``key_map``)."""
    out, outside, heads = {}, Counter(), Counter()
    renames = [*(_function(layout.key_map) if isinstance(layout.key_map, str) else layout.key_map),
               *(key_map or {}).items()]
    prefix = layout.prefix
    for key, value in state.items():
        if key.endswith("num_batches_tracked"):
            continue
        if prefix:
            if not key.startswith(prefix):
                outside[_group(key)] += 1
                continue
            key = key[len(prefix):]
        head = next((h for h in layout.heads if key.startswith(h)), None)
        if head is not None:
            heads[head + "*"] += 1
            continue
        for pattern, repl in renames:
            key = re.sub(pattern, repl, key)
        head = next((h for h in layout.heads if key.startswith(h)), None) if key_map else None
        if head is not None:  # a head the user's renames revealed (e.g. '^backbone\.' -> '' before 'fc.')
            heads[head + "*"] += 1
            continue
        out[key] = value
    if layout.convert:
        out = _function(layout.convert)(out)
    if not out:
        first = ", ".join(list(state)[:5])
        raise CheckpointError(f"no checkpoint key starts with prefix {prefix!r}; first keys: {first}")
    if report is not None:
        report.dropped.update({f"head {k}": n for k, n in heads.items()})
        if outside:  # other networks and training state: one entry, its largest groups named
            names = [k for k, _ in outside.most_common(4)] + (["..."] if len(outside) > 4 else [])
            report.dropped[f"outside {prefix!r}: {', '.join(names)}"] = sum(outside.values())
    return out


def _function(ref: str) -> Any:
    """``"module:name"`` of :mod:`cog_pl.models.arch`: a key conversion function or a table of renames."""
    from cog_pl.registry import load_object

    return load_object(ref)


def guess_prefix(keys: list[str], own: list[str]) -> str | None:
    """The wrapper prefix most of ``own`` keys appear under in ``keys`` (``module.``, ``backbone.``...), if any."""
    own_set, found = set(own), Counter()
    for key in keys:
        for i in [m.end() for m in re.finditer(r"\.", key)]:
            if key[i:] in own_set:
                found[key[:i]] += 1
                break
    if not found:
        return None
    prefix, count = found.most_common(1)[0]
    return prefix if count >= len(own_set) // 2 else None


def fit_problems(model: nn.Module, state: Mapping[str, torch.Tensor]) -> tuple[list[str], list[str], list[str]]:
    """Missing backbone keys, unexpected file keys and shape mismatches of ``state`` against ``model``."""
    own = {k: v for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")}
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    shapes = [f"{k}: {tuple(state[k].shape)} vs {tuple(own[k].shape)}" for k in own
              if k in state and state[k].shape != own[k].shape]
    return missing, unexpected, shapes


def load_into(model: nn.Module, state: Mapping[str, torch.Tensor], source: str = "checkpoint",
              arch: str = "the backbone", hint: str = "") -> int:
    """Strictly load backbone weights (cast to the model's dtype); errors say what the file is and how to read it.

    Returns the number of tensors loaded.
    """
    missing, unexpected, shapes = fit_problems(model, state)
    own = {k: v for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")}
    if missing or unexpected or shapes:
        raise CheckpointError(_misfit(source, arch, own, state, missing, unexpected, shapes, hint))
    own_state = model.state_dict()
    model.load_state_dict({k: v.to(own_state[k].dtype) for k, v in state.items()}, strict=False)
    return len(state)


def _misfit(source: str, arch: str, own: dict[str, torch.Tensor], state: Mapping[str, torch.Tensor], missing: list[str],
            unexpected: list[str], shapes: list[str], hint: str) -> str:
    found = len(own) - len(missing)
    wrapper = guess_prefix(list(state), list(own)) if found < len(own) // 2 else None
    if wrapper:
        fix = hint or f"; pass {option('prefix', wrapper)}"
        return (f"{source} does not fit {arch}: its keys carry the wrapper {wrapper!r} "
                f"({found} of {len(own)} backbone tensors found as named){fix}")
    model_shapes = Counter(tuple(v.shape) for k, v in own.items())
    if found < len(own) // 2 and Counter(tuple(v.shape) for v in state.values()) == model_shapes:
        return (f"{source} holds the {len(state)} tensors of {arch} by their shapes, under other names (e.g. "
                f"{unexpected[0]} where the model has {missing[0]}): rename them with {option('key_map')} or map them "
                f"by position with {option('in_order')}{hint}")
    if found < len(own) // 2 or len(shapes) > len(own) // 4:
        return (f"{source} holds another architecture than {arch}: {found - len(shapes)} of {len(own)} backbone "
                f"tensors found with their shapes (file keys e.g. {', '.join(list(state)[:3])}){hint}")
    problems = []
    if missing:
        problems.append(f"{len(missing)} backbone tensors missing (e.g. {', '.join(missing[:4])})")
    if unexpected:
        problems.append(f"{len(unexpected)} unexpected tensors (e.g. {', '.join(unexpected[:4])}); "
                        f"wrong {option('prefix', 'PREFIX')} or a head to drop?")
    if shapes:
        problems.append(f"{len(shapes)} shape mismatches (e.g. {'; '.join(shapes[:3])})")
    return f"{source} does not fit {arch}: " + "; ".join(problems) + hint


def read_state_dict(path: str | Path, trust: bool = False) -> dict[str, torch.Tensor]:
    """A file's flat tensor dict, its container found as for a user's file."""
    return take_container(load_file(path, trust), Layout(None), str(path), "a user")[0]


def save_converted(tensors: Mapping[str, torch.Tensor], out: str | Path, facts: dict[str, Any]) -> None:
    """Write ``tensors`` as plain tensors (read back with ``weights_only=True``) with what they were made from."""
    from cog_pl.io import atomic_open

    with atomic_open(out, "wb") as fh:
        torch.save({CONVERTED: facts, "state_dict": {k: v.contiguous() for k, v in tensors.items()}}, fh)


def load_in_order(model: nn.Module, state: Mapping[str, torch.Tensor], source: str = "checkpoint") -> int:
    """Map tensors by position (for files whose key names differ but order and shapes match the model's)."""
    src = [(k, v) for k, v in state.items() if not k.endswith("num_batches_tracked")]
    dst = [k for k in model.state_dict() if not k.endswith("num_batches_tracked")]
    if len(src) != len(dst):
        raise CheckpointError(f"{source} has {len(src)} tensors, the model {len(dst)}: cannot map them in order")
    own = model.state_dict()
    for (sk, sv), dk in zip(src, dst):
        if sv.shape != own[dk].shape:
            raise CheckpointError(f"{source}: tensor {sk} {tuple(sv.shape)} does not fit {dk} {tuple(own[dk].shape)}")
    model.load_state_dict({dk: sv for (_, sv), dk in zip(src, dst)}, strict=False)
    return len(src)
