"""``cog_pl.device``: the one place every stage resolves its device, its precision and whether data fits."""

from __future__ import annotations

import typing

import lightning as L
import pytest
import torch

import cog_pl.device
from cog_pl.device import FIT_FRACTION, PRECISIONS, fits, free_bytes, resolve_device, resolve_precision, trainer_options


def test_auto_is_the_current_gpu_else_the_cpu_and_names_are_checked():
    expected = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    assert resolve_device("auto") == resolve_device(None) == expected
    assert resolve_device("cpu") == resolve_device(torch.device("cpu")) == torch.device("cpu")
    with pytest.raises(ValueError, match="device 'gpu0': not a device name"):
        resolve_device("gpu0")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="device 'cuda:1': this machine has no CUDA device"):
            resolve_device("cuda:1")
    else:
        with pytest.raises(ValueError, match="CUDA device"):
            resolve_device(f"cuda:{torch.cuda.device_count()}")


def test_one_precision_vocabulary_lightnings_with_auto(monkeypatch):
    from lightning.fabric.connector import _PRECISION_INPUT

    lightning = {str(v) for literal in typing.get_args(_PRECISION_INPUT) for v in typing.get_args(literal)}
    assert set(PRECISIONS) == lightning  # what a stage accepts, the Trainer takes
    for fast, expected in ((True, "bf16-mixed"), (False, "32-true")):
        monkeypatch.setattr(cog_pl.device, "fast_bf16", lambda device, fast=fast: fast)
        assert resolve_precision("auto", "cpu") == expected
    assert resolve_precision(32) == "32" and resolve_precision("16-mixed", "cpu") == "16-mixed"
    with pytest.raises(ValueError, match="precision 'fp8'; expected auto or one of 32-true, bf16-mixed"):
        resolve_precision("fp8", "cpu")
    probe = ("32-true", "bf16-mixed")
    with pytest.raises(ValueError, match="precision '16-mixed'; expected auto or one of 32-true, bf16-mixed$"):
        resolve_precision("16-mixed", "cpu", allowed=probe)
    monkeypatch.setattr(cog_pl.device, "fast_bf16", lambda device: True)
    assert resolve_precision("auto", "cpu", allowed=("32-true",)) == "32-true"  # auto stays within what is allowed


def test_trainer_options_are_what_a_real_trainer_runs_with(monkeypatch):
    monkeypatch.setattr(cog_pl.device, "fast_bf16", lambda device: str(device) == "cpu")
    kw = trainer_options("cpu", 1, "auto")
    assert kw == {"accelerator": "cpu", "devices": 1, "precision": "bf16-mixed"}
    trainer = L.Trainer(**kw, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    assert (trainer.num_devices, str(trainer.precision)) == (1, "bf16-mixed")
    assert trainer_options("auto")["accelerator"] == resolve_device("auto").type


def test_fits_keeps_one_margin_and_the_host_always_fits():
    assert fits(10**15, "cpu") and free_bytes("cpu") is None
    assert fits(int(FIT_FRACTION * 1000), "cuda", free=1000)
    assert not fits(int(FIT_FRACTION * 1000) + 1, "cuda", free=1000, what="features")
