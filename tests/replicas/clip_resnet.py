"""OpenAI's ``RN50.pt`` (``clip.load("RN50")``): the whole CLIP model, image and text towers, as a TorchScript archive.

What the file is (openai/CLIP at d05afc4):

- ``clip/clip.py`` ``load`` opens it with ``torch.jit.load`` ("loading JIT archive") and only falls back to
  ``torch.load`` for other files; its graphs hold hard-coded ``cuda`` devices and fp16 casts (``patch_device``,
  ``patch_float``) and its submodules a ``forward1``: a model on the GPU traced over several methods
  (``torch.jit.trace_module``), then ``torch.jit.save``-d.
- ``clip/model.py`` ``build_model`` rebuilds the model from that archive's ``state_dict()``: the ``CLIP`` module's
  keys (``visual.*``, ``transformer.resblocks.*``, ``token_embedding.weight``, ``positional_embedding``,
  ``ln_final.*``, ``text_projection``, ``logit_scale``) plus ``input_resolution``, ``context_length`` and
  ``vocab_size``, which it deletes first; ``load`` reads ``model.input_resolution.item()`` (a tensor).
- dtypes: ``convert_weights`` ("Convert applicable model parameters to fp16"): conv, linear and attention weights and
  biases and the text projection in fp16; BatchNorm, LayerNorm and the embeddings stay fp32. That mix makes this
  replica 244 MiB, the size ``clip.load``'s download bar (MiB, ``unit_divisor=1024``) shows for RN50.
- RN50's hyper-parameters: open_clip ``model_configs/RN50.json`` (what ``build_model`` reads back from the keys).

The model code is clip-anytorch's ``clip/model.py`` (PyPI ``clip-anytorch==2.6.0``; its image tower is openai's line
for line), loaded as a file: the package's ``__init__`` needs ``pkg_resources``, gone from setuptools 81+.
"""

from __future__ import annotations

import copy
import importlib.util
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

import torch

from replicas import Replica

RN50 = dict(embed_dim=1024, image_resolution=224, vision_layers=(3, 4, 6, 3), vision_width=64,
            vision_patch_size=None, context_length=77, vocab_size=49408, transformer_width=512,
            transformer_heads=8, transformer_layers=12)


@cache
def clip_model_code() -> ModuleType:
    """openai's ``clip/model.py`` as shipped by clip-anytorch, imported without the package's ``__init__``."""
    spec = importlib.util.find_spec("clip")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the CLIP replica needs clip-anytorch (pip install clip-anytorch==2.6.0)")
    path = Path(spec.submodule_search_locations[0]) / "model.py"
    module_spec = importlib.util.spec_from_file_location("clip_anytorch_model", path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_spec.name] = module
    module_spec.loader.exec_module(module)
    return module


def _plausible_norms(model: torch.nn.Module, gen: torch.Generator) -> None:
    """Trained-looking BatchNorms (CLIP initialises them to identity and zeroes ``bn3``, which hides the blocks)."""
    for name, bn in model.named_modules():
        if isinstance(bn, torch.nn.BatchNorm2d):
            n = bn.num_features
            scale = 0.2 if ".layer" in name and name.endswith(("bn3", "downsample.1")) else 1.0
            bn.weight.data = scale * (0.5 + torch.rand(n, generator=gen))
            bn.bias.data = 0.1 * torch.randn(n, generator=gen)
            bn.running_mean.copy_(0.1 * torch.randn(n, generator=gen))
            bn.running_var.copy_(0.5 + torch.rand(n, generator=gen))
            bn.num_batches_tracked.fill_(int(torch.randint(1, 10**6, (), generator=gen)))


def publish_clip(path: str | Path, seed: int = 0,
                 methods: tuple[str, ...] = ("forward", "encode_image", "encode_text")) -> Replica:
    """Write ``RN50.pt`` with random weights at ``path``; the reference is CLIP's ``encode_image`` in float32, the
    text reference its ``encode_text`` (token ids (N, 77) -> (N, 1024)).

    ``methods``: the methods traced into the archive (``clip.load`` needs all three; its state dict, every tensor of
    both towers, is the same whichever are traced). ``("encode_text",)`` skips the fp16 image forwards, which take
    most of the time on a CPU, for the tests that read the text tower only."""
    code = clip_model_code()
    torch.manual_seed(seed)
    model = code.CLIP(**RN50).eval()
    _plausible_norms(model, torch.Generator().manual_seed(seed))
    code.convert_weights(model)  # the published dtypes
    extras = {"input_resolution": RN50["image_resolution"], "context_length": RN50["context_length"],
              "vocab_size": RN50["vocab_size"]}
    for name, value in extras.items():
        if hasattr(model, name):  # plain ints in the released code, tensors of the archive's state dict
            delattr(model, name)
        model.register_buffer(name, torch.tensor(value))
    reference_model = copy.deepcopy(model).float()  # clip.load on the CPU: model.float()

    image = torch.randn(1, 3, RN50["image_resolution"], RN50["image_resolution"]).half()
    text = torch.randint(0, RN50["vocab_size"], (1, RN50["context_length"]))
    inputs = {"forward": (image, text), "encode_image": (image,), "encode_text": (text,)}
    with torch.no_grad():
        traced = torch.jit.trace_module(model, {m: inputs[m] for m in methods}, check_trace=False)
    torch.jit.save(traced, str(path))

    def reference(images: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return reference_model.encode_image(images.float())

    def text_reference(tokens: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return reference_model.encode_text(tokens)

    return Replica(reference, image_size=RN50["image_resolution"], feature_dim=RN50["embed_dim"], needs_trust=True,
                   text_reference=text_reference)
