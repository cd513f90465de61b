"""The learning-rate rule: the published loop's per-epoch cosine with its one-epoch lag."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest
import torch

from cog_pl.probe.multihead import train_heads
from cog_pl.probe.schedule import cosine_factor, lr_sequence

REFERENCE = Path(__file__).resolve().parents[3] / "shared" / "bench" / "reference_protocol.py"


def published_lrs(base: float, epochs: int) -> list[float]:
    """The released loop, transcribed: train an epoch at the current lr, then set it from that epoch's index."""
    lr, out = base, []
    for epoch in range(epochs):
        out.append(lr)
        lr = base * 0.5 * (1.0 + math.cos(math.pi * epoch / epochs))
    return out


def test_sequence_matches_the_published_loop():
    for base, epochs in ((0.1, 1), (3.7, 10), (100.0, 100)):
        assert lr_sequence(base, epochs) == pytest.approx(published_lrs(base, epochs), rel=1e-12)
    seq = lr_sequence(2.0, 100)
    assert seq[0] == seq[1] == 2.0
    assert seq[2] == pytest.approx(2.0 * 0.5 * (1 + math.cos(math.pi / 100)))
    assert seq[-1] > 0.0  # the last epoch never reaches zero


def test_factor_rejects_bad_epochs():
    with pytest.raises(ValueError):
        cosine_factor(0, 0)


def test_exact_trainer_uses_the_reference_scripts_lr_sequence(monkeypatch):
    """Run the reference script's own training loop with a recording SGD; the fused trainer, started from the same
    weights and shuffles, applies the same lr every epoch and ends at the same weights."""
    if not REFERENCE.exists():
        pytest.skip(f"{REFERENCE} not present")
    spec = importlib.util.spec_from_file_location("reference_protocol", REFERENCE)
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    seen: list[float] = []
    start: list[torch.Tensor] = []
    params: list[torch.Tensor] = []

    class RecordingSGD(torch.optim.SGD):
        def step(self, closure=None):
            if not seen:
                params.extend(self.param_groups[0]["params"])
                start.extend(q.detach().clone() for q in params)
            seen.append(self.param_groups[0]["lr"])
            return super().step(closure)

    monkeypatch.setattr(torch.optim, "SGD", RecordingSGD)
    g = torch.Generator().manual_seed(0)
    x, y = torch.nn.functional.normalize(torch.randn(50, 8, generator=g), dim=1), torch.randint(0, 3, (50,))
    epochs, base = 7, 5.0
    ref.train_eval((x, y), (x, y), 3, base, 1e-6, epochs, 16, torch.Generator().manual_seed(1))
    steps = math.ceil(50 / 16)
    published = [seen[e * steps] for e in range(epochs)]
    assert published == pytest.approx(lr_sequence(base, epochs), rel=1e-12)
    weight, bias = start
    out = train_heads(x, y, [base], [1e-6], num_classes=3, epochs=epochs, batch_size=16, momentum=0.9,
                      generator=torch.Generator().manual_seed(1), init=(weight.T.unsqueeze(1), bias.unsqueeze(0)),
                      eval_x=x, eval_y=y, eval_every_epoch=True)
    torch.testing.assert_close(out.weight[:, 0].T, params[0].detach(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(out.bias[0], params[1].detach(), rtol=1e-4, atol=1e-5)
    assert len(out.history) == epochs
