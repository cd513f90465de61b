"""Feature definitions beyond the paper's (issue 40): each equal to a reference written here from the publishers'
code, on timm's model internals run by hand (patch embedding, position embedding, the blocks one by one, the final
norm), never through ``forward_intermediates`` as the code under test reads them.

References: DINOv2 ``create_linear_input`` (facebookresearch/dinov2 dinov2/eval/linear.py l.171-183) on
``get_intermediate_layers(n, return_class_token=True)`` whose ``norm=True`` applies the final norm to every block
taken (dinov2/models/vision_transformer.py l.299-313); DINOv3's linear input appends the patch average
(facebookresearch/dinov3 dinov3/eval/linear.py l.148-160); AIM's ``AverageLayers`` (apple/ml-aim
aim-v1/aim/v1/torch/layers.py l.324-340) on the blocks' outputs before ``post_trunk_norm`` (models.py l.77-94)."""

from __future__ import annotations

import pytest
import timm
import torch

from cog_pl.errors import CogError, UnknownNameError
from cog_pl.extract.module import FeatureExtractor
from cog_pl.models.arch.demo_cnn import DemoCNN
from cog_pl.models.definitions import parse_feature
from cog_pl.models.features import feature_module


@pytest.fixture(scope="module")
def vit():
    torch.manual_seed(0)
    return timm.create_model("vit_tiny_patch16_224", img_size=64, depth=6, num_classes=0).eval()


@pytest.fixture(scope="module")
def images():
    return torch.randn(3, 3, 64, 64, generator=torch.Generator().manual_seed(1))


def _blocks(vit, x):
    """Every block's output, [B, P + 16, D], running timm's VisionTransformer by hand."""
    x = vit.norm_pre(vit.patch_drop(vit._pos_embed(vit.patch_embed(x))))
    outs = []
    for block in vit.blocks:
        x = block(x)
        outs.append(x)
    return outs


def _grid(patches, size):
    """[B, 16, D] patch tokens (4 x 4, row-major) averaged in non-overlapping windows to size x size."""
    b, n, d = patches.shape
    side, step = int(n ** 0.5), int(n ** 0.5) // size
    grid = patches.reshape(b, size, step, size, step, d).mean(dim=(2, 4))
    assert side == size * step
    return grid.reshape(b, size * size, d)


def _reference(vit, x, name):
    outs, p, norm = _blocks(vit, x), vit.num_prefix_tokens, vit.norm
    last = norm(outs[-1])
    table = {
        "cls": last[:, 0],
        "cls_last4": torch.cat([norm(o)[:, 0] for o in outs[-4:]], dim=-1),
        "patch_mean": last[:, p:].mean(dim=1),
        "cls+patch_mean": torch.cat([last[:, 0], last[:, p:].mean(dim=1)], dim=-1),
        "cls_last4+patch_mean": torch.cat([*(norm(o)[:, 0] for o in outs[-4:]), last[:, p:].mean(dim=1)], dim=-1),
        "mean_last6": torch.stack(outs[-6:], dim=-1).mean(dim=-1)[:, p:].mean(dim=1),
        "mean_last2": torch.stack(outs[-2:], dim=-1).mean(dim=-1)[:, p:].mean(dim=1),
        "tokens1x1": torch.cat([last[:, :1], _grid(last[:, p:], 1)], dim=1),
        "tokens2x2": torch.cat([last[:, :1], _grid(last[:, p:], 2)], dim=1),
        "tokens4x4": torch.cat([last[:, :1], last[:, p:]], dim=1),
        "tokens_full": torch.cat([last[:, :1], last[:, p:]], dim=1),
    }
    return table[name]


NAMES = ("cls", "cls_last4", "patch_mean", "cls+patch_mean", "cls_last4+patch_mean", "mean_last6", "mean_last2",
         "tokens1x1", "tokens2x2", "tokens4x4", "tokens_full")


@pytest.mark.parametrize("name", NAMES)
def test_each_definition_equals_the_reference_on_a_vit(vit, images, name):
    with torch.no_grad():
        got, want = feature_module(vit, name)(images), _reference(vit, images, name)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_a_distilled_deit_reads_its_class_token_and_leaves_the_distillation_token_out():
    torch.manual_seed(0)
    deit = timm.create_model("deit_tiny_distilled_patch16_224", img_size=32, num_classes=0).eval()
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    assert deit.num_prefix_tokens == 2
    with torch.no_grad():
        for name in ("cls", "patch_mean", "tokens_full"):
            torch.testing.assert_close(feature_module(deit, name)(x), _reference(deit, x, name), rtol=1e-5,
                                       atol=1e-5)


def test_the_zoo_deit_feature_cls_equals_the_papers_feature():
    """deit_s's paper feature is its class token after the final norm (naver/cog model_loaders_deit.py): ``cls``
    gives the same numbers, under another name in the store's identity."""
    paper = FeatureExtractor("deit_s", random_weights=True)
    named = FeatureExtractor("deit_s", random_weights=True, feature="cls")
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        torch.testing.assert_close(named(x), paper(x))
    a, b = paper.store_meta(precision="32-true"), named.store_meta(precision="32-true")
    assert (a["feature"], b["feature"]) == ("cls_token", "cls") and a["definition"] != b["definition"]
    assert "tokens" not in b


def test_a_cnn_token_store_is_its_last_feature_map_pooled_with_the_global_average_first():
    torch.manual_seed(0)
    net = DemoCNN().eval()
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        fmap = net.features[:-2](x)  # before AdaptiveAvgPool2d and Flatten: [B, 96, 8, 8]
        cells = fmap.flatten(2).transpose(1, 2)
        want = torch.cat([net(x)[:, None], _grid(cells, 2)], dim=1)  # the CNN's own feature is the class token
        torch.testing.assert_close(feature_module(net, "tokens2x2")(x), want, rtol=1e-5, atol=1e-5)
        full = feature_module(net, "tokens_full")(x)
    assert full.shape == (2, 65, 96)
    torch.testing.assert_close(full[:, 1:], cells)


def test_a_timm_cnn_reads_its_forward_features_map():
    torch.manual_seed(0)
    net = timm.create_model("resnet10t", num_classes=0).eval()
    x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        fmap = net.forward_features(x)
        got = feature_module(net, "tokens1x1")(x)
    torch.testing.assert_close(got[:, 0], net(x))
    torch.testing.assert_close(got[:, 1], fmap.mean(dim=(2, 3)))


def test_names_are_parsed_once_and_unknown_ones_refused_in_one_line():
    d = parse_feature("cls_last4+patch_mean")
    assert (d.cls_blocks, d.patch_mean, d.tokens) == (4, True, False)
    assert parse_feature("tokens4x4").grid == (4, 4) and parse_feature("tokens_full").grid is None
    assert parse_feature("mean_last6").mean_last == 6
    for bad, close in (("cls_lst4", "cls_last4"), ("token2x2", "tokens2x2"), ("mean_last0", "mean_last6")):
        with pytest.raises(UnknownNameError) as err:
            parse_feature(bad)
        msg = str(err.value)
        assert msg.startswith(f"unknown feature definition {bad!r}; did you mean {close!r}? known: cls, ") \
            and "\n" not in msg


def test_a_definition_the_network_cannot_give_is_refused(vit):
    with pytest.raises(CogError, match=r"^feature 'cls_last4' reads a ViT's blocks .*a CNN takes the token "
                                       r"definitions only"):
        feature_module(DemoCNN(), "cls_last4", "demo_cnn")
    with pytest.raises(CogError, match=r"^feature 'mean_last8': vit has 6 blocks$"):
        feature_module(vit, "mean_last8", "vit")
    with pytest.raises(UnknownNameError, match="unknown feature definition 'clss'"):
        FeatureExtractor("demo_cnn", random_weights=True, feature="clss")


def test_a_torchvision_cnn_reads_the_input_of_its_average_pool():
    """torchvision's ResNet has no forward_features: its last feature map is what its ``avgpool`` receives, and the
    class token its penultimate feature (the paper's)."""
    paper = FeatureExtractor("torchvision:resnet18", random_weights=True)
    tokens = FeatureExtractor("torchvision:resnet18", random_weights=True, feature="tokens_full", transform=64)
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(6))
    net = paper.backbone.model
    with torch.no_grad():
        stem = torch.nn.Sequential(net.conv1, net.bn1, net.relu, net.maxpool, net.layer1, net.layer2, net.layer3,
                                   net.layer4)
        fmap = stem(x)  # [2, 512, 2, 2]
        got = tokens(x)
        torch.testing.assert_close(got[:, 0], paper(x))
    torch.testing.assert_close(got[:, 1:], fmap.flatten(2).transpose(1, 2))
    assert tokens.feature_shape == (5, 512) and tokens.token_layout() == {"cls": 1, "grid": [2, 2]}


def test_a_token_grid_larger_than_the_feature_map_is_refused_naming_both(vit):
    """Issue 47, item 4: ``tokens9x9`` of the demo CNN's 4 x 4 map at 16 px was extracted (pooling repeats its
    cells); refused when the definition is applied (``with_feature``, before any image) and wherever the layout is
    asked at another input size (``token_layout``, the store meta of the size the images are read at). A grid the
    map can give, up to its own size, is taken. (Through the installed command: tests/bad_input_cases.py.)"""
    from cog_pl.models import build_backbone
    from cog_pl.models.features import token_layout, with_feature

    demo = build_backbone("external:demo_cnn", random_weights=True)
    with pytest.raises(CogError, match=r"^feature 'tokens9x9': demo_cnn's last feature map is 4 x 4 at 16 px, "
                                       r"smaller than the 9 x 9 grid \(its cells would be repeated\); choose "
                                       r"tokens<h>x<w> with h <= 4 and w <= 4, or tokens_full$"):
        with_feature(demo, "tokens9x9", 16)
    four = with_feature(demo, "tokens4x4", 16)
    assert token_layout(four.model, 16) == {"cls": 1, "grid": [4, 4]}
    with pytest.raises(CogError, match=r"^feature 'tokens4x4': demo_cnn's last feature map is 2 x 2 at 8 px"):
        token_layout(four.model, 8, "demo_cnn")  # the same module, images read smaller
    with pytest.raises(CogError, match=r"^feature 'tokens5x5': the backbone's patch grid is 4 x 4 at 64 px"):
        token_layout(feature_module(vit, "tokens5x5"), 64)  # a ViT's 16 px patches at 64 px
    assert token_layout(feature_module(vit, "tokens4x2"), 64) == {"cls": 1, "grid": [4, 2]}
