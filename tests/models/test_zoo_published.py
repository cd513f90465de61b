"""The paper's 31 models from replicas of the files their authors publish (tests/replicas/, built from each
publisher's saving code): each loads through ``cog-pl models check`` and ``cog-pl extract``, every backbone tensor
comes from the file (contents compared, not names), and the features equal an independent reference forward of the
paper's definition (class token, TF-SAME padding, BGR input, EMA weights...) to 1e-5 relative."""

from __future__ import annotations

import hashlib
import importlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest_data import tiny  # noqa: F401 - fixture

from cog_pl.cli.main import main
from cog_pl.extract.datamodule import ExtractionDataModule
from cog_pl.features.store import open_store
from cog_pl.io import file_sha256
from cog_pl.models import PAPER_MODELS, build_backbone
from cog_pl.models.checkpoints import is_torchscript

REPLICA_MODULES = ("torchvision_family", "deit", "t2t_vit", "nat", "pycls_effnet", "tf_resnet", "clip_resnet")
#: Replicas over ~200 MB or slow on 2 cores: the slow tier. efficientnet_b1 (its pycls network keeps a fast test in
#: test_arch_pycls_effnet.py), inception_v3 and clip (TorchScript's opt-in keeps a fast test in
#: test_models_refusals.py): 59, 50 and 48 s on the shared 2-core machine, 2026-12-01.
SLOW = {"vgg19", "deit_b_distilled", "efficientnet_b4", "resnet152", "efficientnet_b1", "inception_v3", "clip"}


def publishers() -> dict[str, Callable]:
    found = {}
    for module in REPLICA_MODULES:
        mod = importlib.import_module(f"replicas.{module}")
        found.update({name: getattr(mod, f"publish_{name}") for name in PAPER_MODELS
                      if hasattr(mod, f"publish_{name}")})
    return found


PUBLISHERS = publishers()


def test_every_paper_model_has_a_replica_of_its_published_file():
    assert sorted(PUBLISHERS) == sorted(PAPER_MODELS)


def _walk(obj) -> Iterator[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _walk(v)
    elif isinstance(obj, list | tuple):
        for v in obj:
            yield from _walk(v)


def file_tensors(path: Path) -> list[torch.Tensor]:
    """Every tensor the file holds (the test trusts its own replica)."""
    if is_torchscript(path):
        return list(torch.jit.load(str(path), map_location="cpu").state_dict().values())
    return list(_walk(torch.load(path, map_location="cpu", weights_only=False)))


def _digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.detach().float().contiguous().numpy().tobytes()).hexdigest()


def assert_every_tensor_from_the_file(model: torch.nn.Module, path: Path) -> None:
    """Each backbone tensor equals a file tensor, or (where the architecture fuses or reshapes them, e.g. a qkv
    projection) consists of values the file holds; a tensor left at its initialisation fails."""
    tensors = file_tensors(path)
    whole = {_digest(t) for t in tensors}
    rest = [(k, v) for k, v in model.state_dict().items()
            if not k.endswith("num_batches_tracked") and _digest(v) not in whole]
    if rest:
        pool = np.unique(np.concatenate([t.detach().float().flatten().numpy() for t in tensors]))
        for key, value in rest:
            values = value.detach().float().flatten().numpy()
            assert np.isin(values, pool).all(), f"{key} holds values the file does not"
            assert np.unique(values).size > 2 or values.size <= 2, f"{key} is a constant, not from the file"


def relative_error(got: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-12))


@pytest.fixture
def roots(tiny, tmp_path):  # noqa: F811
    return tiny.make_in1k(tmp_path / "in1k", n_train=1, n_val=2), tiny.make_in21k(tmp_path / "in21k")


def _params(names):
    return [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in names]


@pytest.mark.parametrize("name", _params(sorted(PAPER_MODELS)))
def test_published_file_loads_as_published_and_gives_the_papers_features(name, roots, tmp_path, capsys):
    spec = PAPER_MODELS[name]
    path = tmp_path / "published.pth"
    replica = PUBLISHERS[name](path, seed=0)
    trust = ["--trust-checkpoint"] if replica.needs_trust else []
    assert (replica.image_size, replica.feature_dim) == (spec.image_size, spec.feature_dim)
    try:
        # cog-pl models check: the table, then one JSON line
        assert main(["models", "check", name, str(path), *trust]) == 0
        facts = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert facts["sha256"] == file_sha256(path) and facts["feature_dim"] == spec.feature_dim
        assert facts["missing"] == 0 and facts["loaded"] > 0 and facts["trusted"] == replica.needs_trust
        backbone = build_backbone(name, path, trust_checkpoint=replica.needs_trust)
        assert_every_tensor_from_the_file(backbone.model, path)
        # cog-pl extract: the test images of IN-1K through the published file
        out = tmp_path / "features"
        args = ["extract", "--model.model", name, "--model.checkpoint", str(path),
                "--data.in1k_root", str(roots[0]), "--data.in21k_root", str(roots[1]), "--data.out", str(out),
                "--data.domains", "[in1k]", "--data.splits", "[test]", "--data.dtype", "float32",
                "--data.num_workers", "0", "--data.batch_size", "3", "--trainer.accelerator", "cpu",
                "--trainer.devices", "1"]
        if replica.needs_trust:
            args += ["--model.trust_checkpoint", "true"]
        assert main(args) == 0
        store = open_store(out / f"{spec.name}@published" / "in1k" / "test")  # a replica: not the publisher's
        assert store.meta["model"] == f"{spec.name}@published"  # digest, so not under the paper's label
        assert store.meta["definition"] == spec.definition()
        assert store.meta["trusted_checkpoint"] is replica.needs_trust
        assert store.meta["transform"]["crop"] == spec.image_size
        dm = ExtractionDataModule(out=str(tmp_path / "unused"), model_name="x", in1k_root=str(roots[0]),
                                  in21k_root=str(roots[1]), transform=backbone.transform_config)
        dataset, _ = dm.datasets("in1k")["test"]
        images = torch.stack([dataset[i]["image"] for i in range(len(dataset))])
        with torch.inference_mode():
            ref = replica.reference(images).float().numpy()
        assert ref.shape == (len(dataset), spec.feature_dim)
        assert relative_error(np.asarray(store.features, np.float32), ref) < 1e-5
    finally:
        path.unlink(missing_ok=True)  # up to 550 MB (VGG19-BN): not left in pytest's kept temp dirs
