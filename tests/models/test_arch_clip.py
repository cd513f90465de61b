"""CLIP ResNet-50: OpenAI's TorchScript ``RN50.pt`` read into timm's ``resnet50_clip`` gives CLIP's ``encode_image``."""

from __future__ import annotations

import importlib.util
import warnings

import pytest
import torch

from cog_pl.models.arch.clip_resnet import FEATURE_DIM, IMAGE_SIZE, build_clip_resnet50, clip_to_timm

if importlib.util.find_spec("clip") is None:
    pytest.skip("the CLIP replica needs clip-anytorch", allow_module_level=True)

from replicas.clip_resnet import publish_clip

pytestmark = pytest.mark.slow  # tracing the fp16 model on the CPU takes seconds


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    path = tmp_path_factory.mktemp("clip") / "RN50.pt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.jit is deprecated; the published file is TorchScript
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        replica = publish_clip(path, seed=0)
        state = torch.jit.load(str(path), map_location="cpu").state_dict()
    return path, replica, state


def _visual(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k.removeprefix("visual."): v for k, v in state.items() if k.startswith("visual.")}


@pytest.fixture(scope="module")
def loaded(published):
    """timm's resnet50_clip with the file's image tower: only ``visual.*``, renamed (strict load)."""
    model = build_clip_resnet50().eval()
    model.load_state_dict(clip_to_timm(_visual(published[2])))
    return model


def test_archive_needs_the_trust_opt_in(published):
    path, replica, _ = published
    assert replica.needs_trust
    with pytest.raises(RuntimeError, match="TorchScript"), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        torch.load(path, map_location="cpu", weights_only=True)


def test_archive_layout(published):
    _, _, state = published
    for key in ("visual.conv1.weight", "visual.bn3.running_var", "visual.layer4.2.conv3.weight",
                "visual.layer1.0.downsample.0.weight", "visual.attnpool.positional_embedding",
                "visual.attnpool.c_proj.bias", "transformer.resblocks.11.attn.in_proj_weight",
                "token_embedding.weight", "text_projection", "logit_scale", "input_resolution"):
        assert key in state, key
    assert state["visual.conv1.weight"].dtype == torch.float16
    assert state["visual.attnpool.q_proj.weight"].dtype == torch.float16
    assert state["visual.bn1.weight"].dtype == torch.float32
    assert state["visual.attnpool.positional_embedding"].shape == (50, 2048)
    assert int(state["input_resolution"]) == IMAGE_SIZE


def test_every_backbone_tensor_comes_from_the_file(published, loaded):
    visual = _visual(published[2])
    own = loaded.state_dict()
    names = {key: next(iter(clip_to_timm({key: value}))) for key, value in visual.items()}
    assert sorted(names.values()) == sorted(own)  # one file tensor for each model tensor, none left over
    for key, value in visual.items():
        assert own[names[key]].dtype == (torch.float32 if value.is_floating_point() else value.dtype), key
        assert torch.equal(own[names[key]], value.to(own[names[key]].dtype)), key


def test_renaming_matches_timm_converter(published, loaded):
    from timm.models.byobnet import _convert_openai_clip

    state = published[2]
    theirs = _convert_openai_clip(state, loaded)
    ours = clip_to_timm(_visual(state))
    assert set(theirs) == set(ours)
    assert all(torch.equal(theirs[k].float(), ours[k]) for k in ours)


def test_features_equal_clip_encode_image(published, loaded):
    replica = published[1]
    images = torch.randn(2, 3, replica.image_size, replica.image_size, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours = loaded(images)
    ref = replica.reference(images)
    assert ours.shape == ref.shape == (2, FEATURE_DIM) and replica.feature_dim == FEATURE_DIM
    assert ref.abs().max() > 0 and torch.isfinite(ref).all()
    assert (ours - ref).abs().max() / ref.abs().max() < 1e-5
