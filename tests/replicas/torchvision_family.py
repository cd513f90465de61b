"""Replicas of the paper's torchvision-layout CNN files: the supervised torchvision models and every ResNet-50 of
the self-supervised, semi-supervised and label-regularised rows, each written as its publisher's code saved it.

Conventions that hold across publishers (each ``publish_*`` docstring cites the publisher's saving code):

- **Serialisation format.** torch < 1.6 wrote the legacy (non-zip) format; files published before torch 1.6 came out
  (2020-07-28) are written with ``_use_new_zipfile_serialization=False`` (they cannot be ``mmap``-loaded).
- **Optimizer state.** torch < 1.6 keyed ``optimizer.state_dict()`` by ``id(param)`` (pytorch/pytorch#37347 moved to
  positional indices in 1.6): legacy files carry CPython-address-like integers, later files 0..N-1. ``param_groups``
  hold every parameter handed to the optimizer (MoCo's frozen key encoder too); only the first
  :data:`MOMENTUM_SAMPLES` trained parameters get a ``momentum_buffer`` here, to keep files small (a real file has one
  per trained parameter).
- **BatchNorm.** ``num_batches_tracked`` exists since torch 0.4.1 (2018-07); the torchvision files of 2017
  (already in torchvision 0.2.0's ``model_urls``) have none and no ``_metadata``. Later state dicts are
  ``model.state_dict()`` of the publisher's module tree, built here on the meta device, so keys, order and
  ``_metadata`` are the real ones.
- **Devices.** Where the saver hands ``torch.save`` the GPU tensors of a training run, storages are tagged ``cuda:0``
  (read them with ``map_location``).
- **Pickled globals.** Files are pickled with the globals of the publisher's software (:func:`_era_pickle`): torch
  0.2/0.3 tensors as ``torch._utils._rebuild_tensor``; a GPU run's storages as ``torch.cuda.FloatStorage`` (torch
  1.x); a ``numpy.float64`` left in ``param_groups`` by the publisher's learning-rate code as numpy 1.x's
  ``numpy.core.multiarray.scalar``, which under numpy 2 ``weights_only=True`` accepts only when allow-listed as
  ``(numpy._core.multiarray.scalar, "numpy.core.multiarray.scalar")`` with ``numpy.dtype`` and ``Float64DType``
  (:data:`SAFE_GLOBALS`).
- **dill.** MadryLab/robustness saves with ``pickle_module=dill``; for a dict of tensors and plain Python objects
  dill writes only standard globals (checked with dill 0.4.1: ``collections.OrderedDict``, ``_rebuild_tensor_v2``,
  storage classes), so the file reads with ``weights_only=True`` and no allow-list.

The references are torchvision's own classes, loaded as the benchmark's naver/cog ``model_loaders.py`` maps each
file: the ``_cog_*`` functions below repeat those loaders step by step (torchvision 0.8.2 API replaced by
``weights=None``).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import math
import pickle
import types
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path

import dill
import numpy as np
import torch
import torch.nn.functional as F
import torchvision
from torch import nn

from . import Replica

#: trained parameters that get a momentum buffer in a replica's optimizer state
MOMENTUM_SAMPLES = 3
_SCALAR = np._core.multiarray.scalar
#: what ``torch.load(weights_only=True)`` must allow to read every non-trusted replica of this package
SAFE_GLOBALS = [argparse.Namespace, (_SCALAR, "numpy.core.multiarray.scalar"), np.dtype, np.dtypes.Float64DType]
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


# ---------------------------------------------------------------------------------------------------- tensors


def _draw(key: str, shape: torch.Size, gen: torch.Generator, tracked: int) -> torch.Tensor:
    """A trained-looking tensor for one state-dict entry, chosen by its name and shape."""
    name = key.rsplit(".", 1)[-1]
    if name == "num_batches_tracked":
        return torch.tensor(tracked, dtype=torch.long)
    if name == "running_mean":
        return 0.1 * torch.randn(shape, generator=gen)
    if name == "running_var":
        return 0.5 + 1.5 * torch.rand(shape, generator=gen)
    if len(shape) == 4:  # kaiming normal, fan_out (torchvision's conv init)
        return torch.randn(shape, generator=gen) * math.sqrt(2.0 / (shape[0] * shape[2] * shape[3]))
    if len(shape) == 2:
        return torch.randn(shape, generator=gen) * shape[1] ** -0.5
    if name == "weight":  # BatchNorm / LayerNorm gains
        return 1 + 0.1 * torch.randn(shape, generator=gen)
    if name == "bias":
        return 0.01 * torch.randn(shape, generator=gen)
    return 0.02 * torch.randn(shape, generator=gen)  # tokens, position embeddings


def plausible(template: dict[str, torch.Tensor], gen: torch.Generator, tracked: int = 0) -> OrderedDict:
    """New random tensors for every entry of ``template`` (meta tensors welcome), keeping order and ``_metadata``."""
    out = OrderedDict((key, _draw(key, value.shape, gen, tracked)) for key, value in template.items())
    if hasattr(template, "_metadata"):
        out._metadata = copy.deepcopy(template._metadata)
    return out


def _pre_041(template: dict[str, torch.Tensor], gen: torch.Generator) -> OrderedDict:
    """A state dict as torch < 0.4.1 saved it: no ``num_batches_tracked``, no ``_metadata``."""
    return OrderedDict((k, _draw(k, v.shape, gen, 0)) for k, v in template.items() if "num_batches_tracked" not in k)


def _unit_columns(rows: int, cols: int, gen: torch.Generator, dim: int) -> torch.Tensor:
    return F.normalize(torch.randn(rows, cols, generator=gen), dim=dim)


def on_meta(build: Callable[[], nn.Module]) -> nn.Module:
    """The publisher's module tree without allocating it: only names, shapes and flags are needed."""
    with torch.device("meta"):
        return build()


class Parallel(nn.Module):
    """``DataParallel`` / ``DistributedDataParallel``: the wrapped network under ``module.``."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module


def _resnet(arch: str = "resnet50", **kwargs) -> nn.Module:
    return getattr(torchvision.models, arch)(weights=None, **kwargs)


def _headless(arch: str = "resnet50") -> nn.Module:
    """A torchvision ResNet with ``fc`` removed (keeps the other modules in their order)."""
    net = _resnet(arch)
    del net.fc
    return net


# ---------------------------------------------------------------------------------------------------- optimizers


def _python_ids(count: int, gen: torch.Generator) -> list[int]:
    """``id(param)`` values as torch < 1.6 stored them: distinct CPython heap addresses."""
    steps = torch.randint(1, 1 << 12, (count,), generator=gen) * 16
    return [139_900_000_000_000 + int(v) for v in torch.cumsum(steps, 0)]


def sgd_state(model: nn.Module, gen: torch.Generator, *, lr: float, weight_decay: float, legacy_ids: bool,
              momentum: float = 0.9, nesterov: bool = False, extra: dict | None = None) -> dict:
    """``torch.optim.SGD(model.parameters(), ...).state_dict()`` after training, torch 1.x group keys."""
    params = list(model.parameters())
    ids = _python_ids(len(params), gen) if legacy_ids else list(range(len(params)))
    trained = [(i, p) for i, p in zip(ids, params) if p.requires_grad][:MOMENTUM_SAMPLES]
    state = {i: {"momentum_buffer": 1e-3 * torch.randn(p.shape, generator=gen)} for i, p in trained}
    group = {"lr": lr, "momentum": momentum, "dampening": 0, "weight_decay": weight_decay, "nesterov": nesterov}
    return {"state": state, "param_groups": [group | (extra or {}) | {"params": ids}]}


# ---------------------------------------------------------------------------------------------------- saving


_STORAGES = ("Float", "Double", "Half", "Long", "Int", "Short", "Char", "Byte", "Bool")


def _era_pickle(base: type, cuda: bool, torch_03: bool) -> types.SimpleNamespace:
    """A ``pickle_module`` for ``torch.save`` that writes what the publishers' software wrote and torch 2 does not:
    numpy 1.x's ``numpy.core.multiarray.scalar`` for numpy scalars; for a GPU run's tensors, torch 1.x's
    ``torch.cuda.<T>Storage`` (torch >= 1.13 always writes ``torch.<T>Storage``); for torch 0.2/0.3, tensors as
    ``torch._utils._rebuild_tensor(storage, offset, size, stride)`` (``_rebuild_tensor_v2`` came with 0.4)."""
    names = {id(_SCALAR): b"numpy.core.multiarray\nscalar\n"}
    if cuda:
        names |= {id(getattr(torch, f"{t}Storage")): f"torch.cuda\n{t}Storage\n".encode() for t in _STORAGES}

    class EraPickler(base):
        def save(self, obj: object, save_persistent_id: bool = True) -> None:
            if torch_03 and type(obj) is torch.Tensor and id(obj) not in self.memo:
                typed = torch.storage.TypedStorage(wrap_storage=obj.untyped_storage(), dtype=obj.dtype, _internal=True)
                args = (typed, obj.storage_offset(), tuple(obj.size()), obj.stride())
                return self.save_reduce(torch._utils._rebuild_tensor, args, obj=obj)
            name = names.get(id(obj))
            if name is None:
                return super().save(obj, save_persistent_id)
            memo = self.memo.get(id(obj))
            if memo is not None:
                self.write(self.get(memo[0]))
                return
            self.write(pickle.GLOBAL + name)
            self.memoize(obj)

    def dump(obj: object, file: object, protocol: int = 2) -> None:
        EraPickler(file, protocol).dump(obj)

    return types.SimpleNamespace(Pickler=EraPickler, dump=dump, __name__=f"{base.__module__}_as_published")


@contextlib.contextmanager
def _storages_on(device: str) -> Iterator[None]:
    """Record CPU storages as ``device`` while saving, as a saver handed its GPU tensors to ``torch.save``."""
    if device == "cpu":
        yield
        return

    def tagger(storage: object) -> str | None:
        return device if storage.device.type == "cpu" else None

    torch.serialization.register_package(0, tagger, lambda storage, location: None)
    try:
        yield
    finally:
        registry = torch.serialization._package_registry
        registry[:] = [entry for entry in registry if entry[1] is not tagger]


def save_as_published(obj: object, path: Path, *, legacy: bool, device: str = "cpu", with_dill: bool = False,
                      torch_03: bool = False) -> None:
    """``torch.save`` in the publisher's format (legacy before torch 1.6), storage locations and pickler."""
    base = dill.Pickler if with_dill else pickle._Pickler
    module = _era_pickle(base, cuda=device.startswith("cuda"), torch_03=torch_03)
    with _storages_on(device):
        torch.save(obj, path, pickle_module=module, _use_new_zipfile_serialization=not legacy)


def _read(path: Path) -> object:
    """``torch.load(ckpt_file, "cpu")`` as the torch 1.7 of naver/cog ran it: full unpickling."""
    return torch.load(path, map_location="cpu", weights_only=False)


# ---------------------------------------------------------------------------------------------------- references


def _features(net: nn.Module, forward: Callable[[torch.Tensor], torch.Tensor] | None = None) -> Callable:
    net.eval()
    run = forward or net

    def reference(images: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return run(images)

    return reference


def _pooled(net: nn.Module, size: int = 224, dim: int = 2048) -> Replica:
    net.fc = nn.Identity()
    return Replica(reference=_features(net), image_size=size, feature_dim=dim)


def _load_missing_fc(net: nn.Module, state_dict: dict) -> nn.Module:
    msg = net.load_state_dict(state_dict, strict=False)
    assert set(msg.missing_keys) == {"fc.weight", "fc.bias"}, msg
    return net


def _cog_default(path: Path, arch: str = "resnet50") -> Replica:
    """``load_default`` / ``load_sup_resnet152``: the raw state dict, strict."""
    net = _resnet(arch)
    net.load_state_dict(_read(path))
    return _pooled(net)


def _cog_moco(path: Path) -> Replica:
    """``load_moco``: ``state_dict``'s ``module.encoder_q.*`` without ``fc``; only ``fc`` missing."""
    state_dict = _read(path)["state_dict"]
    for k in list(state_dict.keys()):
        if k.startswith("module.encoder_q") and not k.startswith("module.encoder_q.fc"):
            state_dict[k[len("module.encoder_q."):]] = state_dict[k]
        del state_dict[k]
    return _pooled(_load_missing_fc(_resnet(), state_dict))


def _cog_infomin(path: Path) -> Replica:
    """``load_infomin``: ``model``'s ``module.encoder.*``; only ``fc`` missing."""
    state_dict = _read(path)["model"]
    for k in list(state_dict.keys()):
        if k.startswith("module.encoder."):
            state_dict[k[len("module.encoder."):]] = state_dict[k]
        del state_dict[k]
    return _pooled(_load_missing_fc(_resnet(), state_dict))


def _cog_swav(path: Path) -> Replica:
    """``load_swav``: every ``module.`` removed, ``strict=False``: only ``fc`` missing (the heads are ignored)."""
    state_dict = {k.replace("module.", ""): v for k, v in _read(path).items()}
    return _pooled(_load_missing_fc(_resnet(), state_dict))


def _cog_obow(path: Path) -> Replica:
    """``load_obow``: ``network`` without its 8192-way ``fc``."""
    state_dict = _read(path)["network"]
    del state_dict["fc.weight"]
    del state_dict["fc.bias"]
    return _pooled(_load_missing_fc(_resnet(), state_dict))


def _cog_dino(path: Path) -> Replica:
    """``load_dino``: ``fc`` = Identity first, then the raw file, strict."""
    net = _resnet()
    net.fc = nn.Identity()
    net.load_state_dict(_read(path), strict=True)
    return Replica(reference=_features(net), image_size=224, feature_dim=2048)


def _cog_barlow(path: Path) -> Replica:
    """``load_barlow``: the raw file; only ``fc`` missing."""
    return _pooled(_load_missing_fc(_resnet(), _read(path)))


def _cog_compress(path: Path) -> Replica:
    """``load_compress``: ``model`` with ``module.`` removed and every key containing ``fc`` dropped."""
    state_dict = {k.replace("module.", ""): v for k, v in _read(path)["model"].items() if "fc" not in k}
    return _pooled(_load_missing_fc(_resnet(), state_dict))


def _cog_mealv2(path: Path) -> Replica:
    """``load_mealv2``: the raw file, the first 7 characters (``module.``) of every key cut, strict."""
    state_dict = _read(path)
    for k in list(state_dict.keys()):
        state_dict[k[len("module."):]] = state_dict[k]
        del state_dict[k]
    net = _resnet()
    net.load_state_dict(state_dict, strict=True)
    return _pooled(net)


def _cog_cutmix(path: Path) -> Replica:
    """``load_cutmix`` (CutMix, Mixup, Manifold-Mixup, ReLabel): ``state_dict`` if present, ``module.`` removed."""
    state_dict = _read(path)
    if "state_dict" in state_dict:
        state_dict = state_dict["state_dict"]
    state_dict = {k.replace("module.", ""): v for k, v in state_dict.items()}
    net = _resnet()
    net.load_state_dict(state_dict, strict=True)
    return _pooled(net)


def _cog_advrobust(path: Path) -> Replica:
    """``load_advrobust``: ``model``'s ``module.model.*`` only (the attacker's copy and normalisers dropped)."""
    state_dict = _read(path)["model"]
    for k in list(state_dict.keys()):
        if k.startswith("module.model"):
            state_dict[k[len("module.model."):]] = state_dict[k]
        del state_dict[k]
    net = _resnet()
    net.load_state_dict(state_dict, strict=True)
    return _pooled(net)


def _cog_mopro(path: Path) -> Replica:
    """``load_mopro``: ``module.encoder_q.*`` minus ``fc1``/``fc2``, ``classifier`` renamed ``fc``, strict."""
    state_dict = _read(path)["state_dict"]
    for k in list(state_dict.keys()):
        if k.startswith("module.encoder_q") and not k.startswith("module.encoder_q.fc"):
            state_dict[k[len("module.encoder_q."):]] = state_dict[k]
        del state_dict[k]
    state_dict["fc.weight"] = state_dict.pop("classifier.weight")
    state_dict["fc.bias"] = state_dict.pop("classifier.bias")
    net = _resnet()
    net.load_state_dict(state_dict, strict=True)
    return _pooled(net)


def inception_v3_forward(net: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """naver/cog ``inception_v3_forward``: the stem to ``Mixed_7c``, pooled, eval dropout; no aux branch, no
    ``_transform_input`` (it never calls ``net.forward``), no ``fc``."""
    for name in ("Conv2d_1a_3x3", "Conv2d_2a_3x3", "Conv2d_2b_3x3", "maxpool1", "Conv2d_3b_1x1", "Conv2d_4a_3x3",
                 "maxpool2", "Mixed_5b", "Mixed_5c", "Mixed_5d", "Mixed_6a", "Mixed_6b", "Mixed_6c", "Mixed_6d",
                 "Mixed_6e", "Mixed_7a", "Mixed_7b", "Mixed_7c", "avgpool", "dropout"):
        x = getattr(net, name)(x)
    return torch.flatten(x, 1)


# ---------------------------------------------------------------------------------------------------- torchvision


def _publish_torchvision_2017(path: Path, seed: int, build: Callable[[], nn.Module]) -> None:
    """A torchvision file of 2017: ``torch.save(model.state_dict())`` of torch 0.2/0.3 (legacy format, CPU)."""
    state_dict = _pre_041(on_meta(build).state_dict(), torch.Generator().manual_seed(seed))
    save_as_published(state_dict, path, legacy=True, torch_03=True)


def publish_resnet50(path: Path, seed: int = 0) -> Replica:
    """``resnet50-19c8e357.pth``: raw torchvision ``resnet50`` state dict with ``fc``, no prefix.

    Source: torchvision 0.2.0 ``models/resnet.py`` ``model_urls['resnet50']`` (the file predates torch 0.4.1: no
    ``num_batches_tracked``, no ``_metadata``; torchvision's saving script is not public: not confirmed) and
    ``model.load_state_dict(model_zoo.load_url(...))`` there. Features: naver/cog ``load_default``.
    """
    _publish_torchvision_2017(path, seed, _resnet)
    return _cog_default(path)


def publish_resnet152(path: Path, seed: int = 0) -> Replica:
    """``resnet152-b121ed2d.pth``: as :func:`publish_resnet50` for ``resnet152`` (torchvision 0.2.0 model_urls).
    Features: naver/cog ``load_sup_resnet152``."""
    _publish_torchvision_2017(path, seed, lambda: _resnet("resnet152"))
    return _cog_default(path, "resnet152")


def publish_vgg19(path: Path, seed: int = 0) -> Replica:
    """``vgg19_bn-c79401a0.pth`` (VGG19 **with** batch norm): raw ``vgg19_bn`` state dict, ``features.*`` and
    ``classifier.{0,3,6}``, pre-0.4.1 (torchvision 0.2.0 ``models/vgg.py`` ``model_urls['vgg19_bn']``; not confirmed).

    Features: naver/cog ``load_sup_vgg19``: ``del classifier[-1]``, so fc7 after its ReLU and eval dropout, 4096-d.
    """
    _publish_torchvision_2017(path, seed, lambda: torchvision.models.vgg19_bn(weights=None, init_weights=False))
    net = torchvision.models.vgg19_bn(weights=None, init_weights=False)
    net.load_state_dict(_read(path))
    del net.classifier[-1]
    return Replica(reference=_features(net), image_size=224, feature_dim=4096)


def publish_inception_v3(path: Path, seed: int = 0) -> Replica:
    """``inception_v3_google-1a9a5a14.pth``: raw ``Inception3`` state dict with ``AuxLogits.*`` and ``fc``,
    pre-0.4.1 (torchvision 0.2.0 ``models/inception.py`` ``model_urls['inception_v3_google']``; not confirmed).

    Features: naver/cog ``load_sup_inception_v3`` builds ``inception_v3(pretrained=False)``, which in its torchvision
    0.8.2 is ``Inception3(aux_logits=True, transform_input=False)`` (``transform_input=True`` is set only when
    ``pretrained``), loads the file strictly, and runs :func:`inception_v3_forward`, which skips ``_transform_input``
    anyway: the input is used as normalised, 299 px, 2048-d.
    """
    build = lambda: torchvision.models.inception_v3(weights=None, aux_logits=True, init_weights=False)  # noqa: E731
    _publish_torchvision_2017(path, seed, build)
    net = build()
    net.load_state_dict(_read(path))
    net.fc = nn.Identity()
    return Replica(reference=_features(net, lambda x: inception_v3_forward(net, x)), image_size=299, feature_dim=2048)


def _publish_semi(path: Path, seed: int) -> Replica:
    """facebookresearch/semi-supervised-ImageNet1K-models ``hubconf.py`` ``_resnet``: ``models.resnet50()`` then
    ``model.load_state_dict(load_state_dict_from_url(url))``: a raw torchvision state dict with ``fc``. The files
    date from 2019 (repo's first commit 2019-09-30): legacy format, ``num_batches_tracked`` kept (not confirmed)."""
    template = on_meta(_resnet).state_dict()
    save_as_published(plausible(template, torch.Generator().manual_seed(seed), 0), path, legacy=True)
    return _cog_default(path)


def publish_semi_sup(path: Path, seed: int = 0) -> Replica:
    """``semi_supervised_resnet50-08389792.pth``: see :func:`_publish_semi`. Features: naver/cog ``load_default``."""
    return _publish_semi(path, seed)


def publish_semi_weakly_sup(path: Path, seed: int = 0) -> Replica:
    """``semi_weakly_supervised_resnet50-16a12f1b.pth``: see :func:`_publish_semi`."""
    return _publish_semi(path, seed)


# ---------------------------------------------------------------------------------------------------- MoCo family


class MoCo(nn.Module):
    """facebookresearch/moco ``moco/builder.py`` ``MoCo(resnet50, dim, K, mlp=True)``: two encoders, MLP heads
    ``fc.0``/``fc.2``, ``queue`` (dim, K) and ``queue_ptr``; the key encoder is frozen (``requires_grad=False``)."""

    def __init__(self, dim: int = 128, K: int = 65536) -> None:
        super().__init__()
        self.encoder_q = _resnet(num_classes=dim)
        self.encoder_k = _resnet(num_classes=dim)
        for encoder in (self.encoder_q, self.encoder_k):
            encoder.fc = nn.Sequential(nn.Linear(2048, 2048), nn.ReLU(), encoder.fc)
        for p in self.encoder_k.parameters():
            p.requires_grad = False
        self.register_buffer("queue", torch.randn(dim, K))
        self.register_buffer("queue_ptr", torch.zeros(1, dtype=torch.long))


def _moco_checkpoint(seed: int, epochs: int, legacy: bool, K: int = 65536) -> dict:
    """main_moco.py ``save_checkpoint({'epoch', 'arch', 'state_dict': model.state_dict(), 'optimizer'})``."""
    gen = torch.Generator().manual_seed(seed)
    model = on_meta(lambda: Parallel(MoCo(K=K)))
    state_dict = plausible(model.state_dict(), gen, tracked=epochs * 5004)  # encoder_k drawn after, so different
    state_dict["module.queue"] = _unit_columns(128, K, gen, dim=0)
    state_dict["module.queue_ptr"] = torch.tensor([int(torch.randint(0, K // 256, (1,), generator=gen)) * 256])
    last_lr = 0.03 * 0.5 * (1.0 + math.cos(math.pi * (epochs - 1) / epochs))  # main_moco.py adjust_learning_rate --cos
    optimizer = sgd_state(model, gen, lr=last_lr, weight_decay=1e-4, legacy_ids=legacy)
    return {"epoch": epochs, "arch": "resnet50", "state_dict": state_dict, "optimizer": optimizer}


def publish_moco_v2(path: Path, seed: int = 0) -> Replica:
    """``moco_v2_800ep_pretrain.pth.tar``: facebookresearch/moco ``main_moco.py`` (``save_checkpoint``:
    ``{'epoch': epoch + 1, 'arch', 'state_dict': model.state_dict(), 'optimizer': optimizer.state_dict()}``, DDP so
    ``module.``) and ``moco/builder.py`` (``encoder_q``/``encoder_k`` with ``--mlp`` heads ``fc.0``/``fc.2``,
    ``queue`` (128, 65536) normalised per column, ``queue_ptr``). SGD over ``model.parameters()`` (the key encoder
    too, never stepped). Listed in the repo's first README (2020-03-22): torch < 1.6 format; rank 0 saved GPU
    tensors. Features: naver/cog ``load_moco``."""
    save_as_published(_moco_checkpoint(seed, 800, legacy=True), path, legacy=True, device="cuda:0")
    return _cog_moco(path)


def publish_mochi(path: Path, seed: int = 0) -> Replica:
    """``mochi_512_1024_512_e1000.pth.tar`` (NAVER LABS Europe): no public saving code; naver/cog loads it with
    ``load_moco`` ("saved as MoCo pretrained models are saved"), so the MoCo layout of :func:`publish_moco_v2` with
    epoch 1000. Not confirmed: K (65536 here), the torch version (zip format here) and devices."""
    save_as_published(_moco_checkpoint(seed, 1000, legacy=False), path, legacy=False, device="cuda:0")
    return _cog_moco(path)


class _MoProResNet(nn.Module):
    """salesforce/MoPro ``resnet.py`` ``ResNet``: torchvision names, then ``classifier``, ``fc1`` (2048), ``fc2``."""

    def __init__(self, num_class: int = 1000, low_dim: int = 128) -> None:
        super().__init__()
        for name, module in _headless().named_children():
            self.add_module(name, module)
        self.classifier = nn.Linear(2048, num_class)
        self.fc1 = nn.Linear(2048, 2048)
        self.fc2 = nn.Linear(2048, low_dim)


class _MoPro(nn.Module):
    """salesforce/MoPro ``model.py`` ``MoPro``: ``encoder_q``, frozen ``encoder_k``, ``queue`` (128, 8192),
    ``queue_ptr``, ``prototypes`` (1000, 128)."""

    def __init__(self, num_class: int = 1000, low_dim: int = 128, K: int = 8192) -> None:
        super().__init__()
        self.encoder_q = _MoProResNet(num_class, low_dim)
        self.encoder_k = _MoProResNet(num_class, low_dim)
        for p in self.encoder_k.parameters():
            p.requires_grad = False
        self.register_buffer("queue", torch.randn(low_dim, K))
        self.register_buffer("queue_ptr", torch.zeros(1, dtype=torch.long))
        self.register_buffer("prototypes", torch.zeros(num_class, low_dim))


def publish_mopro(path: Path, seed: int = 0) -> Replica:
    """``MoPro_V1_epoch90.tar``: salesforce/MoPro ``train.py`` ``save_checkpoint({'epoch': epoch + 1, 'arch',
    'state_dict': model.state_dict(), 'optimizer'})`` of the DDP-wrapped ``MoPro`` (``model.py``, ``resnet.py``):
    ``module.encoder_q.*`` with ``classifier.*``, ``fc1.*``, ``fc2.*``, ``module.encoder_k.*``, ``module.queue``,
    ``module.queue_ptr``, ``module.prototypes``. Defaults ``--low-dim 128 --moco_queue 8192 --num-class 1000``.
    Not confirmed: the torch version (repo from 2020-09-14, "PyTorch >= 1.4": zip format here).
    Features: naver/cog ``load_mopro``."""
    gen = torch.Generator().manual_seed(seed)
    model = on_meta(lambda: Parallel(_MoPro()))
    state_dict = plausible(model.state_dict(), gen, tracked=90 * 7700)
    state_dict["module.queue"] = _unit_columns(128, 8192, gen, dim=0)
    state_dict["module.queue_ptr"] = torch.tensor([2048])
    state_dict["module.prototypes"] = _unit_columns(1000, 128, gen, dim=1)
    checkpoint = {"epoch": 90, "arch": "resnet50", "state_dict": state_dict,
                  "optimizer": sgd_state(model, gen, lr=0.1 * 0.5 * (1.0 + math.cos(math.pi * 89 / 90)),
                                         weight_decay=1e-4, legacy_ids=False)}
    save_as_published(checkpoint, path, legacy=False, device="cuda:0")
    return _cog_mopro(path)


class _Jigsaw(nn.Module):
    """HobbitLong/PyContrast ``networks/util.py`` ``JigsawHead(head='mlp')``: ``fc1`` MLP, ``fc2`` (9 x 128 -> 128)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Sequential(nn.Linear(2048, 2048), nn.ReLU(inplace=True), nn.Linear(2048, 128))
        self.fc2 = nn.Linear(128 * 9, 128)


class _RGBMultiHeads(nn.Module):
    """PyContrast ``networks/build_backbone.py`` ``RGBMultiHeads('resnet50', 'mlp', 128)``: ``encoder`` (no ``fc``,
    networks/resnet.py), ``head`` (Linear, ReLU, Linear, Normalize) and ``head_jig``."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = _headless()
        self.head = nn.Sequential(nn.Linear(2048, 2048), nn.ReLU(inplace=True), nn.Linear(2048, 128))
        self.head_jig = _Jigsaw()


def _memory_state(memory: torch.Tensor) -> OrderedDict:
    """``RGBMoCo.state_dict()`` (PyContrast memory/mem_moco.py): the ``memory`` buffer (K, 128), unit rows."""
    state = OrderedDict(memory=memory)
    state._metadata = OrderedDict({"": {"version": 1}})
    return state


def publish_infomin(path: Path, seed: int = 0) -> Replica:
    """``InfoMin_800.pth``: HobbitLong/PyContrast ``learning/contrast_trainer.py`` ``ContrastTrainer.save``:
    ``{'model': model.state_dict(), 'contrast': contrast.state_dict(), 'optimizer', 'epoch'}`` plus ``model_ema``
    (``mem == 'moco'``). ``--method InfoMin`` (options/base_options.py) = RGB, jigsaw, moco memory, mlp head:
    ``model`` is the DDP ``RGBMultiHeads`` (``module.encoder.*``, ``module.head.{0,2}``,
    ``module.head_jig.fc1.{0,2}``, ``module.head_jig.fc2``), ``model_ema`` the bare momentum copy (no prefix),
    ``contrast`` ``RGBMoCo``'s ``memory`` (65536, 128). Published with the zoo on 2020-05-21: torch < 1.6 format.
    Not confirmed: ``amp`` (only with ``--amp``, left out) and whether the upload was trimmed.
    Features: naver/cog ``load_infomin``."""
    gen = torch.Generator().manual_seed(seed)
    model = on_meta(lambda: Parallel(_RGBMultiHeads()))
    checkpoint = {
        "model": plausible(model.state_dict(), gen, tracked=800 * 5004),
        "contrast": _memory_state(_unit_columns(65536, 128, gen, dim=1)),
        "optimizer": sgd_state(model, gen, lr=0.03 * 0.1**3, weight_decay=1e-4, legacy_ids=True),
        "epoch": 800,
        "model_ema": plausible(on_meta(_RGBMultiHeads).state_dict(), gen, tracked=800 * 5004),
    }
    save_as_published(checkpoint, path, legacy=True, device="cuda:0")
    return _cog_infomin(path)


class _SwAVResNet(nn.Module):
    """facebookresearch/swav ``src/resnet50.py`` ``resnet50(hidden_mlp=2048, output_dim=128, nmb_prototypes=3000)``:
    torchvision names, ``projection_head`` (Linear, BatchNorm1d, ReLU, Linear), ``prototypes`` (no bias)."""

    def __init__(self) -> None:
        super().__init__()
        for name, module in _headless().named_children():
            self.add_module(name, module)
        self.projection_head = nn.Sequential(nn.Linear(2048, 2048), nn.BatchNorm1d(2048), nn.ReLU(inplace=True),
                                             nn.Linear(2048, 128))
        self.prototypes = nn.Linear(128, 3000, bias=False)


def publish_swav(path: Path, seed: int = 0) -> Replica:
    """``swav_800ep_pretrain.pth.tar``: a flat state dict (facebookresearch/swav ``hubconf.py`` reads it as one and
    strips ``module.``, ``strict=False``): ``main_swav.py``'s ``model.state_dict()`` of the DDP model
    (scripts/swav_800ep_pretrain.sh: ``--feat_dim 128 --nmb_prototypes 3000``, ``--hidden_mlp`` default 2048, apex
    SyncBN keeps ``num_batches_tracked``): ``module.*``, ``module.projection_head.{0,1,3}``,
    ``module.prototypes.weight``. Repo and file from 2020-07: torch < 1.6 format. Not confirmed: the extraction
    script and devices (CPU here). Features: naver/cog ``load_swav``."""
    state_dict = plausible(on_meta(lambda: Parallel(_SwAVResNet())).state_dict(), torch.Generator().manual_seed(seed),
                           tracked=800 * 20000)
    save_as_published(state_dict, path, legacy=True)
    return _cog_swav(path)


# ---------------------------------------------------------------------------------------------------- raw backbones


def publish_obow(path: Path, seed: int = 0) -> Replica:
    """``tochvision_resnet50_student_K8192_epoch200.pth.tar``: valeoai/obow ``obow/builder_obow.py``
    ``save_feature_extractor_in_torchvision_format``: ``torchvision_models.resnet50(num_classes=8192)`` built on the
    CPU, blocks copied in, ``fc.weight`` = the last BoW dictionary x scale, ``fc.bias.fill_(0)``, then
    ``torch.save({'network': torchvision_resnet.state_dict()})``. Not confirmed: torch version (zip here).
    Features: naver/cog ``load_obow``."""
    gen = torch.Generator().manual_seed(seed)
    network = plausible(on_meta(lambda: _resnet(num_classes=8192)).state_dict(), gen, tracked=200 * 5004)
    network["fc.bias"] = torch.zeros(8192)
    save_as_published({"network": network}, path, legacy=False)
    return _cog_obow(path)


def publish_dino(path: Path, seed: int = 0) -> Replica:
    """``dino_resnet50_pretrain.pth``: the backbone only, torchvision names, no ``fc`` (facebookresearch/dino
    ``hubconf.py`` ``dino_resnet50``: ``fc = Identity`` then ``load_state_dict(state_dict)``; naver/cog loads it
    strictly). The extraction script is not public (not confirmed; zip format, CPU here). Features: ``load_dino``."""
    backbone = on_meta(_resnet)
    backbone.fc = nn.Identity()
    save_as_published(plausible(backbone.state_dict(), torch.Generator().manual_seed(seed), 800 * 5004), path,
                      legacy=False)
    return _cog_dino(path)


def publish_barlowtwins(path: Path, seed: int = 0) -> Replica:
    """``resnet50.pth``: facebookresearch/barlowtwins ``main.py``: ``torch.save(model.module.backbone.state_dict(),
    args.checkpoint_dir / 'resnet50.pth')`` where ``backbone = torchvision.models.resnet50(zero_init_residual=True)``
    with ``fc = nn.Identity()`` (SyncBN keeps ``num_batches_tracked``): raw, no prefix, no ``fc``. GPU tensors of
    2021 (zip format). Features: naver/cog ``load_barlow``."""
    backbone = on_meta(_resnet)
    backbone.fc = nn.Identity()
    state_dict = plausible(backbone.state_dict(), torch.Generator().manual_seed(seed), tracked=1000 * 625)
    save_as_published(state_dict, path, legacy=False, device="cuda:0")
    return _cog_barlow(path)


def publish_meal_v2(path: Path, seed: int = 0) -> Replica:
    """``MEALV2_ResNet50_224.pth``: szq0214/MEAL-V2 ``train.py`` ``save_checkpoint``: ``torch.save(model.state_dict(),
    ...)`` of ``ModelDistillationWrapper`` (extensions/teacher_wrapper.py: ``state_dict`` = the student's), the
    student ``torch.nn.DataParallel(timm.create_model('resnet50'))`` (models/model_factory.py): raw ``module.*`` with
    ``fc`` (timm's ResNet-50 names equal torchvision's). README: PyTorch 1.6.0 (zip); GPU tensors.
    Features: naver/cog ``load_mealv2``."""
    state_dict = plausible(on_meta(lambda: Parallel(_resnet())).state_dict(), torch.Generator().manual_seed(seed),
                           tracked=180 * 5004)
    save_as_published(state_dict, path, legacy=False, device="cuda:0")
    return _cog_mealv2(path)


# ---------------------------------------------------------------------------------------------------- classifiers


def _publish_clova(path: Path, seed: int, best_err1: float, best_err5: float) -> Replica:
    """clovaai/CutMix-PyTorch ``train.py``: ``save_checkpoint({'epoch': epoch, 'arch': args.net_type,
    'state_dict': model.state_dict(), 'best_err1', 'best_err5', 'optimizer'})`` of ``DataParallel(RN.ResNet(
    'imagenet', 50, 1000, True))`` (resnet.py: torchvision names), SGD ``nesterov=True``; errors are Python floats
    (``AverageMeter`` of ``.item()``). 300 epochs (README), last ``epoch`` index 299. Models of 2019: torch < 1.6
    format, GPU tensors."""
    gen = torch.Generator().manual_seed(seed)
    model = on_meta(lambda: Parallel(_resnet()))
    checkpoint = {
        "epoch": 299,
        "arch": "resnet",
        "state_dict": plausible(model.state_dict(), gen, tracked=300 * 5005),
        "best_err1": best_err1,
        "best_err5": best_err5,
        "optimizer": sgd_state(model, gen, lr=1e-4, weight_decay=1e-4, nesterov=True, legacy_ids=True),
    }
    save_as_published(checkpoint, path, legacy=True, device="cuda:0")
    return _cog_cutmix(path)


def publish_cutmix(path: Path, seed: int = 0) -> Replica:
    """CutMix ResNet-50 (top-1 error 21.40): :func:`_publish_clova`. Features: naver/cog ``load_cutmix``."""
    return _publish_clova(path, seed, 21.4, 5.92)


def publish_mixup(path: Path, seed: int = 0) -> Replica:
    """Mixup ResNet-50 (22.58) of the CutMix README: :func:`_publish_clova` (same saver assumed: not confirmed)."""
    return _publish_clova(path, seed, 22.58, 6.40)


def publish_manifold_mixup(path: Path, seed: int = 0) -> Replica:
    """Manifold-Mixup ResNet-50 (22.50) of the CutMix README: :func:`_publish_clova` (same saver: not confirmed)."""
    return _publish_clova(path, seed, 22.5, 6.21)


def publish_relabel(path: Path, seed: int = 0) -> Replica:
    """``rn50_relabel_78.9.pth``: naver-ai/relabel_imagenet ``train.py`` ``Trainer.save_checkpoint``:
    ``{'epoch': epoch + 1, 'arch', 'state_dict': get_state_dict(self.model), 'accuracy', 'optimizer'}``;
    ``utils/utils.py`` ``get_state_dict`` returns ``model.module.state_dict()``: **no** ``module.`` prefix (the
    repo's own ``load_checkpoint`` strips ``module`` only in case). torchvision ``resnet50`` (``getattr(torchvision.
    models, arch)()``); SGD nesterov with ``init_lr`` added to each group (utils/optimizers.py ``set_init_lr``); the
    cosine factor ``1 / 2 * (np.cos(...) + 1)`` leaves ``lr`` a numpy float64; ``accuracy`` a Python float.
    requirements.txt pytorch==1.6.0: zip format; GPU tensors. Not confirmed: that the upload is this checkpoint
    unchanged. Features: naver/cog ``load_cutmix``."""
    gen = torch.Generator().manual_seed(seed)
    model = on_meta(_resnet)
    optimizer = sgd_state(model, gen, lr=0.0, weight_decay=1e-4, nesterov=True, legacy_ids=False,
                          extra={"init_lr": 0.4})
    optimizer["param_groups"][0]["lr"] = 0.4 * (1 / 2 * (np.cos(np.pi * 0.99999) + 1))
    checkpoint = {"epoch": 300, "arch": "resnet50", "state_dict": plausible(model.state_dict(), gen, 300 * 1251),
                  "accuracy": 78.9, "optimizer": optimizer}
    save_as_published(checkpoint, path, legacy=False, device="cuda:0")
    return _cog_cutmix(path)


def _compress_opt() -> argparse.Namespace:
    """UMBCvision/CompReSS ``train_student.py`` ``parse_option()`` defaults with the README's cached-teacher ResNet-50
    run (``--cache_teacher --student_arch resnet50``, teacher SimCLR ResNet50x4), plus ``main()``'s ``start_epoch``."""
    return argparse.Namespace(
        data="/path/to/imagenet", print_freq=100, tb_freq=500, save_freq=2, batch_size=256, num_workers=12,
        epochs=130, learning_rate=0.01, lr_decay_epochs=[90, 120], lr_decay_rate=0.2, weight_decay=1e-4, momentum=0.9,
        student_arch="resnet50", teacher_arch="resnet50x4", cache_teacher=True, compress_memory_size=128000,
        compress_t=0.04, gpu=None, teacher="/path/to/cached_feats", checkpoint_path="output/", alpha=0.999,
        start_epoch=1,
    )


def publish_compress(path: Path, seed: int = 0) -> Replica:
    """CompReSS ResNet-50 student: UMBCvision/CompReSS ``train_student.py``: ``{'opt': args`` (the
    ``argparse.Namespace``), ``'model': student.state_dict()`` (``nn.DataParallel``: ``module.*``; models/resnet.py
    ``resnet50(fc_dim=8192)``: ``module.fc`` (8192, 2048)), ``'optimizer'``, ``'epoch'}``, saved every
    ``save_freq`` = 2 epochs, last at 130. ``util.py`` ``adjust_learning_rate``: ``0.01 * 0.2 ** np.sum(...)`` leaves
    ``lr`` a numpy float64. README link added 2020-06-29: torch < 1.6 format, GPU tensors.
    Features: naver/cog ``load_compress``."""
    gen = torch.Generator().manual_seed(seed)
    model = on_meta(lambda: Parallel(_resnet(num_classes=8192)))
    optimizer = sgd_state(model, gen, lr=0.0, weight_decay=1e-4, legacy_ids=True)
    optimizer["param_groups"][0]["lr"] = 0.01 * (0.2 ** np.sum(130 > np.asarray([90, 120])))
    checkpoint = {"opt": _compress_opt(), "model": plausible(model.state_dict(), gen, tracked=130 * 5004),
                  "optimizer": optimizer, "epoch": 130}
    save_as_published(checkpoint, path, legacy=True, device="cuda:0")
    return _cog_compress(path)


class _InputNormalize(nn.Module):
    """MadryLab/robustness ``tools/helpers.py`` ``InputNormalize``: buffers ``new_mean``/``new_std`` (3, 1, 1)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("new_mean", torch.tensor(IMAGENET_MEAN)[..., None, None])
        self.register_buffer("new_std", torch.tensor(IMAGENET_STD)[..., None, None])


class _Attacker(nn.Module):
    """robustness ``attacker.py`` ``Attacker(model, dataset)``: ``normalize``, then ``model`` (the same object)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.normalize = _InputNormalize()
        self.model = model


class _AttackerModel(nn.Module):
    """robustness ``attacker.py`` ``AttackerModel``: ``normalizer``, ``model``, ``attacker = Attacker(model)``."""

    def __init__(self) -> None:
        super().__init__()
        self.normalizer = _InputNormalize()
        self.model = _resnet()
        self.attacker = _Attacker(self.model)


def publish_adv_robust(path: Path, seed: int = 0) -> Replica:
    """``resnet50_l2_eps0.1.ckpt`` (microsoft/robust-models-transfer; MadryLab/robustness ``train.py``
    ``train_model``): ``sd_info = {'model': model.state_dict(), 'optimizer': opt.state_dict(), 'schedule':
    (schedule and schedule.state_dict()), 'epoch': epoch + 1, 'amp': ... else "N/A"}`` saved with
    ``ch.save(sd_info, path, pickle_module=dill)``. The checkpoint URLs are signed from 2020-06-10 (README), so the
    library as of commit 338cdc9 (2020-03-31): the ``amp`` fallback was ``"N/A"`` and the ``best_prec1`` /
    ``adv_prec1`` entries came only on 2020-06-29 / 07-03. ``model`` is the ``DataParallel(AttackerModel)``:
    ``module.normalizer.new_mean/new_std``, ``module.model.*``, ``module.attacker.normalize.*`` and
    ``module.attacker.model.*``; ``Attacker`` holds the very same ``model`` object, so the attacker's entries are the
    same tensors (one storage each in the file). SGD over ``model.parameters()``; ``StepLR`` (``step_lr``) state as
    torch 1.4/1.5 stored it. Torch < 1.6 format, GPU tensors. Not confirmed: ``step_lr``, epochs and lr values
    (30 / 90 / 0.1 here) and ``mixed_precision`` (off). Features: naver/cog ``load_advrobust``."""
    gen = torch.Generator().manual_seed(seed)
    model = on_meta(lambda: Parallel(_AttackerModel()))
    template = model.state_dict()
    state_dict = plausible(template, gen, tracked=90 * 2503)
    for key in template:
        if key.startswith("module.attacker.model."):
            state_dict[key] = state_dict["module.model." + key[len("module.attacker.model."):]]
        elif key.endswith(("new_mean", "new_std")):
            state_dict[key] = (torch.tensor(IMAGENET_MEAN if key.endswith("mean") else IMAGENET_STD))[..., None, None]
    schedule = {"step_size": 30, "gamma": 0.1, "base_lrs": [0.1], "last_epoch": 90, "_step_count": 91,
                "_get_lr_called_within_step": False, "_last_lr": [0.1 * 0.1**3]}
    sd_info = {"model": state_dict,
               "optimizer": sgd_state(model, gen, lr=0.1 * 0.1**3, weight_decay=1e-4, legacy_ids=True),
               "schedule": schedule, "epoch": 90, "amp": "N/A"}
    save_as_published(sd_info, path, legacy=True, device="cuda:0", with_dill=True)
    return _cog_advrobust(path)


PUBLISHERS: dict[str, Callable[[Path, int], Replica]] = {
    "resnet50": publish_resnet50,
    "resnet152": publish_resnet152,
    "vgg19": publish_vgg19,
    "inception_v3": publish_inception_v3,
    "semi_sup": publish_semi_sup,
    "semi_weakly_sup": publish_semi_weakly_sup,
    "moco_v2": publish_moco_v2,
    "infomin": publish_infomin,
    "mochi": publish_mochi,
    "swav": publish_swav,
    "obow": publish_obow,
    "dino": publish_dino,
    "barlowtwins": publish_barlowtwins,
    "compress": publish_compress,
    "meal_v2": publish_meal_v2,
    "mixup": publish_mixup,
    "manifold_mixup": publish_manifold_mixup,
    "cutmix": publish_cutmix,
    "relabel": publish_relabel,
    "adv_robust": publish_adv_robust,
    "mopro": publish_mopro,
}
