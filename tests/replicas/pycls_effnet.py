"""Replicas of pycls's model zoo files ``EN-B1_dds_8gpu.pyth`` and ``EN-B4_dds_8gpu.pyth``, saved as pycls saves.

facebookresearch/pycls at 4449e4a (the code of PyPI ``pycls==0.1.1``, installed in the test env):

- ``pycls/models/model_zoo.py`` ``build_model``: ``reset_cfg()``, merge the model's yaml, ``builders.build_model()``
  (``EffNet``, initialised by ``pycls/core/net.py`` ``init_weights``); the yaml is
  ``configs/dds_baselines/effnet/EN-B{1,4}_dds_8gpu.yaml`` as of b3260e7 (unchanged until 1a33062 added
  ``MODEL.ACTIVATION_FUN: silu``, a key 0.1.1's config does not know; silu is 0.1.1's ``Swish``).
- ``pycls/core/checkpoint.py`` ``save_checkpoint``: ``{"epoch": cur_epoch, "model_state": state_dict(),
  "optimizer_state": optimizer.state_dict(), "cfg": cfg.dump()}`` (``cfg.dump()``: the YAML text, a ``str``);
  ``pycls/core/trainer.py`` saves at 0-based ``cur_epoch``, so the last of ``OPTIM.MAX_EPOCH`` 100 epochs is 99;
  the optimizer is ``pycls/core/optimizer.py`` ``construct_optimizer`` (SGD with momentum, one parameter group).
- The zoo's URLs are in ``MODEL_ZOO.md`` since 4f5b5da (2020-04-15), before torch 1.6 made the zip format the
  default: the replica is written in torch's legacy (non-zip) format (inferred, the real files were not read).

The reference is pycls's own model with ``head.fc`` = identity fed ``torch.flip(images, [1])``, as naver/cog
``model_loaders.py`` ``load_efficientnet`` (5b34ca9) computed the paper's features.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from replicas import Replica

_COMMON = """\
MODEL:
  TYPE: effnet
  NUM_CLASSES: 1000
EN:
  STEM_W: {stem}
  STRIDES: [1, 2, 2, 2, 1, 2, 1]
  DEPTHS: {depths}
  WIDTHS: {widths}
  EXP_RATIOS: [1, 6, 6, 6, 6, 6, 6]
  KERNELS: [3, 3, 5, 3, 5, 5, 3]
  HEAD_W: {head}
OPTIM:
  LR_POLICY: cos
  BASE_LR: {lr}
  MAX_EPOCH: 100
  MOMENTUM: 0.9
  WEIGHT_DECAY: 1e-5
TRAIN:
  DATASET: imagenet
  IM_SIZE: {size}
  BATCH_SIZE: {train_batch}
TEST:
  DATASET: imagenet
  IM_SIZE: {test_size}
  BATCH_SIZE: {test_batch}
NUM_GPUS: 8
OUT_DIR: .
"""
#: configs/dds_baselines/effnet/EN-B1_dds_8gpu.yaml and EN-B4_dds_8gpu.yaml (pycls b3260e7)
EN_B1_YAML = _COMMON.format(stem=32, depths=[2, 3, 3, 4, 4, 5, 2], widths=[16, 24, 40, 80, 112, 192, 320], head=1280,
                            lr=0.4, size=240, train_batch=256, test_size=274, test_batch=200)
EN_B4_YAML = _COMMON.format(stem=48, depths=[2, 4, 4, 6, 6, 8, 2], widths=[24, 32, 56, 112, 160, 272, 448], head=1792,
                            lr=0.2, size=380, train_batch=128, test_size=434, test_batch=104)


def _step_once(model: nn.Module, optimizer: torch.optim.Optimizer, g: torch.Generator) -> None:
    """One SGD step on small random gradients, so the optimizer state holds its momentum buffers as after training."""
    for p in model.parameters():
        p.grad = 1e-3 * torch.randn(p.shape, generator=g)
    optimizer.step()
    optimizer.zero_grad()


def _calibration_images(size: int, g: torch.Generator) -> torch.Tensor:
    """Normalised RGB images: two of white noise, four of uniform colours upsampled from 8 and 32 px grids."""
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    smooth = [nn.functional.interpolate(torch.rand(2, 3, n, n, generator=g), size=size, mode="bicubic").clamp(0, 1)
              for n in (8, 32)]
    return torch.cat([torch.randn(2, 3, size, size, generator=g), *((x - mean) / std for x in smooth)])


@torch.no_grad()
def _randomise(model: nn.Module, image_size: int, g: torch.Generator) -> None:
    """Plausible trained-looking tensors: He-scaled convolutions, BN affine away from init, and BN running
    statistics measured on images of the model's size (as training leaves them), white noise and smooth ones alike,
    so that features stay bounded, and numerically stable, for both kinds of test input."""
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    for module in model.modules():
        if isinstance(module, nn.Conv2d):
            fan_in = module.weight[0].numel()
            module.weight.copy_(torch.randn(module.weight.shape, generator=g) * (2.0 / fan_in) ** 0.5)
            if module.bias is not None:
                module.bias.copy_(0.1 * torch.randn(module.bias.shape, generator=g))
        elif isinstance(module, nn.Linear):
            module.weight.copy_(0.01 * torch.randn(module.weight.shape, generator=g))
            module.bias.copy_(0.01 * torch.randn(module.bias.shape, generator=g))
    for bn in bns:
        bn.weight.copy_(0.5 + 0.5 * torch.rand(bn.num_features, generator=g))
        bn.bias.copy_(0.1 * torch.randn(bn.num_features, generator=g))
        bn.reset_running_stats()
    momentum = {bn: bn.momentum for bn in bns}
    for bn in bns:
        bn.momentum = None  # a cumulative average over the calibration batch
    model.train()
    model(torch.flip(_calibration_images(image_size, g), [1]))  # the network sees BGR
    for bn in bns:
        bn.momentum = momentum[bn]
        bn.num_batches_tracked.fill_(500_000)
    model.eval()


def _publish(path: str | Path, yaml_text: str, image_size: int, feature_dim: int, seed: int) -> Replica:
    import pycls.core.builders as builders
    import pycls.core.optimizer as optim
    from pycls.core.config import cfg, reset_cfg

    reset_cfg()
    cfg.merge_from_other_cfg(cfg.load_cfg(yaml_text))  # what cfg.merge_from_file does with the yaml file
    with torch.random.fork_rng():
        torch.manual_seed(seed)  # pycls initialises from the global generator
        model = builders.build_model()
    g = torch.Generator().manual_seed(seed)
    optimizer = optim.construct_optimizer(model)
    _step_once(model, optimizer, g)
    _randomise(model, image_size, g)
    checkpoint = {
        "epoch": cfg.OPTIM.MAX_EPOCH - 1,
        "model_state": model.state_dict(),
        "optimizer_state": optimizer.state_dict(),
        "cfg": cfg.dump(),
    }
    torch.save(checkpoint, str(path), _use_new_zipfile_serialization=False)

    model.head.fc = nn.Identity()
    model.eval().requires_grad_(False)

    def reference(images: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            return model(torch.flip(images, [1]))

    return Replica(reference=reference, image_size=image_size, feature_dim=feature_dim, needs_trust=False)


def publish_efficientnet_b1(path: str | Path, seed: int = 0) -> Replica:
    """Write ``EN-B1_dds_8gpu.pyth`` with random weights; the reference takes 240 px RGB images to 1280-d."""
    return _publish(path, EN_B1_YAML, 240, 1280, seed)


def publish_efficientnet_b4(path: str | Path, seed: int = 0) -> Replica:
    """Write ``EN-B4_dds_8gpu.pyth`` with random weights; the reference takes 380 px RGB images to 1792-d."""
    return _publish(path, EN_B4_YAML, 380, 1792, seed)
