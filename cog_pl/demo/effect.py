"""A quick look at the demo's effect: frozen demo-backbone features and a logistic regression per domain.

Not the benchmark's tuned probes (those come from :mod:`cog_pl.probe`): a fixed, cheap probe to check that the
miniature benchmark and its backbone show the paper's effect, accuracy falling from L1 to L5.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader

from cog_pl.data.imagenet import collate_images
from cog_pl.datamodules import CoGLevelDataModule, ImageDataModule, ImageNetDataModule
from cog_pl.models import build_backbone
from cog_pl.protocol import DOMAINS


@torch.no_grad()
def features(model: nn.Module, dm: ImageDataModule, split: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Features and labels of one split of a datamodule, in row order."""
    dm.setup()
    loader = DataLoader(dm.datasets[split], batch_size=256, collate_fn=collate_images)
    feats, labels = zip(*((model(b["image"]), b["label"]) for b in loader))
    return torch.cat(feats), torch.cat(labels)


def logistic_regression(x: torch.Tensor, y: torch.Tensor, x_test: torch.Tensor, y_test: torch.Tensor,
                        weight_decay: float = 1e-4, steps: int = 100) -> float:
    """Top-1 on the test rows of a multinomial logistic regression (L2-normalised, standardised features, LBFGS)."""
    x, x_test = nn.functional.normalize(x, dim=1), nn.functional.normalize(x_test, dim=1)
    mean, std = x.mean(0), x.std(0) + 1e-6
    x, x_test = (x - mean) / std, (x_test - mean) / std
    torch.manual_seed(0)
    linear = nn.Linear(x.shape[1], int(y.max()) + 1)
    opt = torch.optim.LBFGS(linear.parameters(), max_iter=steps, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(linear(x), y) + weight_decay * linear.weight.pow(2).sum()
        loss.backward()
        return loss

    with torch.enable_grad():
        opt.step(closure)
    with torch.no_grad():
        return (linear(x_test).argmax(1) == y_test).float().mean().item()


def probe_accuracies(in1k_root: str, in21k_root: str, benchmark: str, checkpoint: str | None,
                     transform, model: str = "external:demo_cnn") -> dict[str, float]:
    """Test top-1 of the quick probe on each domain (``in1k``, ``cog_l1`` .. ``cog_l5``)."""
    net = build_backbone(model, checkpoint).model.eval()
    common = {"benchmark": benchmark, "transform": transform, "num_workers": 0, "pin_memory": False}
    out = {}
    for domain in DOMAINS:
        dm = (ImageNetDataModule(in1k_root, **common) if domain == "in1k"
              else CoGLevelDataModule(domain, in21k_root, **common))
        out[domain] = round(logistic_regression(*features(net, dm, "train"), *features(net, dm, "test")), 4)
    return out
