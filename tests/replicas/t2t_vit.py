"""Replica of ``81.7_T2T_ViTt_14.pth.tar`` (T2T-ViT-t-14, yitu-opensource/T2T-ViT README, Google Drive).

How the file was made, from the publisher's code:

- The authors trained with their ``main.py`` (yitu-opensource/T2T-ViT @ 9dafdef17f6740fc600dad754e0f40bd246463e0,
  the commit naver/cog ``prepare_models/prepare_t2tvit.sh`` checks out) on timm 0.3.4 (the README's
  ``pip install timm==0.3.4``). ``main.py`` builds ``CheckpointSaver(model=model, optimizer=optimizer, args=args,
  model_ema=model_ema, amp_scaler=loss_scaler, ...)`` and calls ``saver.save_checkpoint(epoch, metric=...)`` with the
  EMA model's top-1 (``--model-ema`` defaults to True; ``--eval-metric top1``).
- timm v0.3.4 ``timm/utils/checkpoint_saver.py`` ``CheckpointSaver._save`` (unchanged since 2020-09-07) writes, in
  this order: ``epoch``, ``arch`` (``args.model``), ``state_dict`` (``get_state_dict``: the DDP/DP wrapper unwrapped,
  so no ``module.`` prefix), ``optimizer`` (``optimizer.state_dict()``), ``version`` 2, ``args`` (the
  ``argparse.Namespace`` itself, pickled), ``amp_scaler.state_dict_key`` (``'amp_scaler'`` for native AMP,
  ``'amp'`` for apex) when AMP was on, ``state_dict_ema`` (``ModelEma.ema``, unwrapped too) and ``metric``.
- The model is ``T2t_vit_t_14`` of ``models/t2t_vit.py``: its state dict holds the frozen sinusoid ``pos_embed``
  (a ``requires_grad=False`` parameter: the EMA of a constant, so the same table in both copies) and
  ``head.weight``/``head.bias`` for 1000 classes.
- The optimizer is timm 0.3.4 ``create_optimizer``: ``torch.optim.AdamW`` over ``add_weight_decay`` groups
  (1-D tensors, ``.bias`` and ``no_weight_decay() == {'cls_token'}`` without decay, frozen ``pos_embed`` left out),
  with the ``initial_lr`` timm's ``Scheduler`` adds to each group; torch of 2021 stored ``step`` as an int.
- Rank 0 saved the tensors from its GPU, so every storage is tagged ``cuda:0`` (read it with ``map_location``).

Not established (the released file was not inspected): whether AMP was apex (``'amp'``) or native
(``'amp_scaler'``, written here), the epoch and metric values, and whether the authors trimmed anything before
uploading. yitu-opensource/T2T-ViT issue #17 reads ``stat['state_dict_ema']['head.weight']`` from the sibling file
``80.6_T2T_ViT_14.pth.tar``, which confirms the EMA dict and its head.
"""

from __future__ import annotations

import argparse
import contextlib
import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from replicas import Replica

EMBED, DEPTH, HEADS, MLP_HIDDEN, TOKEN_DIM, CLASSES = 384, 14, 6, 1152, 64, 1000
#: single-head token attention scales by the input width (models/token_transformer.py: head_dim = dim // 1)
_T2T_LAYERS = {"attention1": 3 * 7 * 7, "attention2": TOKEN_DIM * 3 * 3}


def authors_sinusoid_table(n_position: int = 197, dim: int = EMBED) -> torch.Tensor:
    """``get_sinusoid_encoding`` of models/transformer_block.py, computed the authors' way (numpy float64)."""
    hid = np.arange(dim)
    angles = np.arange(n_position)[:, None] / np.power(10000, 2 * (hid // 2) / dim)[None, :]
    angles[:, 0::2] = np.sin(angles[:, 0::2])
    angles[:, 1::2] = np.cos(angles[:, 1::2])
    return torch.from_numpy(angles).float()[None]


def authors_shapes() -> dict[str, tuple[int, ...]]:
    """Keys and shapes of the authors' ``T2t_vit_t_14(num_classes=1000).state_dict()``, in its order."""
    shapes: dict[str, tuple[int, ...]] = {"cls_token": (1, 1, EMBED), "pos_embed": (1, 197, EMBED)}
    for name, dim in _T2T_LAYERS.items():
        p = f"tokens_to_token.{name}."
        shapes |= {p + "norm1.weight": (dim,), p + "norm1.bias": (dim,)}
        shapes |= {p + "attn.qkv.weight": (3 * TOKEN_DIM, dim)}
        shapes |= {p + "attn.proj.weight": (TOKEN_DIM, TOKEN_DIM), p + "attn.proj.bias": (TOKEN_DIM,)}
        shapes |= {p + "norm2.weight": (TOKEN_DIM,), p + "norm2.bias": (TOKEN_DIM,)}
        for fc in ("fc1", "fc2"):  # Token_transformer mlp_ratio=1.0
            shapes |= {p + f"mlp.{fc}.weight": (TOKEN_DIM, TOKEN_DIM), p + f"mlp.{fc}.bias": (TOKEN_DIM,)}
    shapes |= {"tokens_to_token.project.weight": (EMBED, TOKEN_DIM * 9), "tokens_to_token.project.bias": (EMBED,)}
    for i in range(DEPTH):
        p = f"blocks.{i}."
        shapes |= {p + "norm1.weight": (EMBED,), p + "norm1.bias": (EMBED,), p + "attn.qkv.weight": (3 * EMBED, EMBED)}
        shapes |= {p + "attn.proj.weight": (EMBED, EMBED), p + "attn.proj.bias": (EMBED,)}
        shapes |= {p + "norm2.weight": (EMBED,), p + "norm2.bias": (EMBED,)}
        shapes |= {p + "mlp.fc1.weight": (MLP_HIDDEN, EMBED), p + "mlp.fc1.bias": (MLP_HIDDEN,)}
        shapes |= {p + "mlp.fc2.weight": (EMBED, MLP_HIDDEN), p + "mlp.fc2.bias": (EMBED,)}
    shapes |= {"norm.weight": (EMBED,), "norm.bias": (EMBED,), "head.weight": (CLASSES, EMBED), "head.bias": (CLASSES,)}
    return shapes


def _random_weights(gen: torch.Generator) -> dict[str, torch.Tensor]:
    """Plausible trained-looking tensors: unit-gain linear maps (attention logits of order 1), norms near 1."""
    weights = {}
    for key, shape in authors_shapes().items():
        if key == "pos_embed":
            weights[key] = authors_sinusoid_table()
        elif key == "cls_token":
            weights[key] = 0.02 * torch.randn(shape, generator=gen)
        elif len(shape) == 2:
            weights[key] = torch.randn(shape, generator=gen) * shape[1] ** -0.5
        elif key.endswith(".weight"):  # LayerNorm gains
            weights[key] = 1 + 0.1 * torch.randn(shape, generator=gen)
        else:
            weights[key] = 0.05 * torch.randn(shape, generator=gen)
    return weights


def _optimizer_state(weights: dict[str, torch.Tensor], args: argparse.Namespace) -> dict:
    """AdamW ``state_dict()`` over timm 0.3.4 ``add_weight_decay`` groups, as torch 1.x stored it."""
    trained = [k for k in weights if k != "pos_embed"]  # frozen: skipped by add_weight_decay
    no_decay = [k for k in trained if weights[k].ndim == 1 or k.endswith(".bias") or k == "cls_token"]
    decay = [k for k in trained if k not in no_decay]
    # every epoch of the schedule (epochs + cooldown), 1281167 // (64 x 8 GPUs) batches each (timm drops the last)
    steps = (args.epochs + args.cooldown_epochs) * (1281167 // (args.batch_size * args.world_size))
    state, groups, index = {}, [], 0
    for keys, weight_decay in ((no_decay, 0.0), (decay, args.weight_decay)):
        ids = list(range(index, index + len(keys)))
        for i, key in zip(ids, keys):
            shape = weights[key].shape
            # the moments are never read: broadcast constants of the right shape keep the file at half the size
            moments = {"exp_avg": torch.zeros(()).expand(shape), "exp_avg_sq": torch.full((), 1e-8).expand(shape)}
            state[i] = {"step": steps, **moments}
        groups.append({"lr": args.min_lr, "betas": (0.9, 0.999), "eps": 1e-08, "weight_decay": weight_decay,
                       "amsgrad": False, "initial_lr": args.lr, "params": ids})
        index += len(keys)
    return {"state": state, "param_groups": groups}


def _training_args() -> argparse.Namespace:
    """``args`` of main.py: its argparse defaults, the README's T2T-ViT_t-14 command, and what main() adds."""
    return argparse.Namespace(
        data="/path/to/imagenet", model="T2t_vit_t_14", pretrained=False, initial_checkpoint="", resume="",
        eval_checkpoint="", no_resume_opt=False, num_classes=1000, gp=None, img_size=224, crop_pct=None, mean=None,
        std=None, interpolation="", batch_size=64, validation_batch_size_multiplier=1, opt="adamw", opt_eps=None,
        opt_betas=None, momentum=0.9, weight_decay=0.05, clip_grad=None, sched="cosine", lr=5e-4, lr_noise=None,
        lr_noise_pct=0.67, lr_noise_std=1.0, lr_cycle_mul=1.0, lr_cycle_limit=1, warmup_lr=1e-6, min_lr=1e-5,
        epochs=300, start_epoch=None, decay_epochs=30, warmup_epochs=5, cooldown_epochs=10, patience_epochs=10,
        decay_rate=0.1, no_aug=False, scale=[0.08, 1.0], ratio=[3.0 / 4.0, 4.0 / 3.0], hflip=0.5, vflip=0.0,
        color_jitter=0.4, aa="rand-m9-mstd0.5-inc1", aug_splits=0, jsd=False, reprob=0.25, remode="pixel",
        recount=1, resplit=False, mixup=0.8, cutmix=1.0, cutmix_minmax=None, mixup_prob=1.0, mixup_switch_prob=0.5,
        mixup_mode="batch", mixup_off_epoch=0, smoothing=0.1, train_interpolation="random", drop=0.0,
        drop_connect=None, drop_path=0.1, drop_block=None, bn_tf=False, bn_momentum=None, bn_eps=None, sync_bn=False,
        dist_bn="", split_bn=False, model_ema=True, model_ema_force_cpu=False, model_ema_decay=0.99996, seed=42,
        log_interval=50, recovery_interval=0, workers=8, num_gpu=1, save_images=False, amp=True, apex_amp=False,
        native_amp=True, channels_last=False, pin_mem=False, no_prefetcher=False, output="", eval_metric="top1",
        tta=0, local_rank=0, use_multi_epochs_loader=False,
        prefetcher=True, distributed=True, device="cuda:0", world_size=8, rank=0,
    )


@contextlib.contextmanager
def _tagged_cuda0() -> Iterator[None]:
    """Record CPU storages as ``cuda:0`` while saving, as the publisher's rank-0 GPU tensors were."""

    def tagger(storage: object) -> str | None:
        return "cuda:0" if storage.device.type == "cpu" else None

    torch.serialization.register_package(0, tagger, lambda storage, location: None)
    try:
        yield
    finally:
        registry = torch.serialization._package_registry
        registry[:] = [entry for entry in registry if entry[1] is not tagger]


def _layer_norm(x: torch.Tensor, w: dict[str, torch.Tensor], prefix: str) -> torch.Tensor:
    return F.layer_norm(x, x.shape[-1:], w[prefix + ".weight"], w[prefix + ".bias"], eps=1e-5)


def _linear(x: torch.Tensor, w: dict[str, torch.Tensor], prefix: str) -> torch.Tensor:
    return F.linear(x, w[prefix + ".weight"], w.get(prefix + ".bias"))


def _mlp(x: torch.Tensor, w: dict[str, torch.Tensor], prefix: str) -> torch.Tensor:
    return _linear(F.gelu(_linear(x, w, prefix + ".fc1")), w, prefix + ".fc2")


def _token_transformer(x: torch.Tensor, w: dict[str, torch.Tensor], prefix: str, dim: int) -> torch.Tensor:
    """models/token_transformer.py ``Token_transformer``: one head, scale dim ** -0.5, ``v`` as the skip."""
    q, k, v = _linear(_layer_norm(x, w, prefix + ".norm1"), w, prefix + ".attn.qkv").chunk(3, dim=-1)
    attn = torch.softmax(q @ k.transpose(-2, -1) * dim**-0.5, dim=-1)
    x = v + _linear(attn @ v, w, prefix + ".attn.proj")
    return x + _mlp(_layer_norm(x, w, prefix + ".norm2"), w, prefix + ".mlp")


def _block(x: torch.Tensor, w: dict[str, torch.Tensor], prefix: str) -> torch.Tensor:
    """models/transformer_block.py ``Block`` with qk_scale None: head_dim ** -0.5."""
    b, n, c = x.shape
    qkv = _linear(_layer_norm(x, w, prefix + ".norm1"), w, prefix + ".attn.qkv")
    q, k, v = qkv.reshape(b, n, 3, HEADS, c // HEADS).permute(2, 0, 3, 1, 4)
    attn = torch.softmax(q @ k.transpose(-2, -1) * (c // HEADS) ** -0.5, dim=-1)
    x = x + _linear((attn @ v).transpose(1, 2).reshape(b, n, c), w, prefix + ".attn.proj")
    return x + _mlp(_layer_norm(x, w, prefix + ".norm2"), w, prefix + ".mlp")


def _resplit(tokens: torch.Tensor) -> torch.Tensor:
    """Tokens back to their square map, then the 3x3 / stride 2 / padding 1 soft split."""
    b, n, c = tokens.shape
    side = math.isqrt(n)
    return F.unfold(tokens.transpose(1, 2).reshape(b, c, side, side), 3, padding=1, stride=2).transpose(1, 2)


def reference_features(weights: dict[str, torch.Tensor], images: torch.Tensor) -> torch.Tensor:
    """``T2T_ViT.forward_features`` on ``weights`` (float64): the class token after the final norm."""
    w = {k: v.double() for k, v in weights.items()}
    x = F.unfold(images.double(), 7, padding=2, stride=4).transpose(1, 2)
    x = _token_transformer(x, w, "tokens_to_token.attention1", _T2T_LAYERS["attention1"])
    x = _token_transformer(_resplit(x), w, "tokens_to_token.attention2", _T2T_LAYERS["attention2"])
    x = _linear(_resplit(x), w, "tokens_to_token.project")
    x = torch.cat((w["cls_token"].expand(x.shape[0], -1, -1), x), dim=1) + w["pos_embed"]
    for i in range(DEPTH):
        x = _block(x, w, f"blocks.{i}")
    return _layer_norm(x, w, "norm")[:, 0].float()


def publish_t2t_vit_t_14(path: Path, seed: int = 0) -> Replica:
    """Write the checkpoint as timm 0.3.4's ``CheckpointSaver._save`` did; the paper's features use the EMA dict."""
    gen = torch.Generator().manual_seed(seed)
    raw, ema = _random_weights(gen), _random_weights(gen)
    args = _training_args()
    checkpoint = {
        "epoch": 309,
        "arch": args.model,
        "state_dict": raw,
        "optimizer": _optimizer_state(raw, args),
        "version": 2,
        "args": args,
        "amp_scaler": {"scale": 65536.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000,
                       "_growth_tracker": 1234},
        "state_dict_ema": ema,
        "metric": 81.7,
    }
    with _tagged_cuda0():
        torch.save(checkpoint, path)
    return Replica(reference=lambda images: reference_features(ema, images), image_size=224, feature_dim=EMBED)
