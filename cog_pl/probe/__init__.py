"""Phase 2 of ImageNet-CoG: linear probes on frozen features, tuned with Optuna, fast and faithful.

- ``schedule``: the per-epoch cosine rule with its one-epoch lag.
- ``data``: loading, L2 normalisation, the validation split and N-shot samples.
- ``multihead``: K probes trained side by side in one pass (the fast path); ``workspace`` holds its buffers and
  step, ``kernels`` the step's Triton kernels for CUDA (with CUDA-graph replay in ``workspace``).
- ``storage`` / ``study`` / ``tuner``: where a study lives (SQLite in WAL mode by default), a cell's study and its
  one writer, the batched or exact TPE search.
- ``workers``: how many worker processes a machine runs for a grid, and their pool (the grid itself:
  :mod:`cog_pl.evaluate.grid`).
- ``cell``: one probe (a (seed, shots) cell) and its row.
- ``attentive``: the attentive and MLP probes (methods ``attentive`` and ``mlp``), tuned like the linear probe, a
  batch of trials trained as one bank of heads.
- ``module`` / ``callback``: the Lightning shell (``LinearProbe``, the Optuna trial callback;
  its LightningCLI is :mod:`cog_pl.cli.probe_lightning`).
"""

from cog_pl._lazy import lazy_exports

#: Loaded on first use: importing a module of the package does not import torch.
_EXPORTS = {
    "SearchPlan": ".tuner",
    "cosine_factor": ".schedule",
    "few_shot": "cog_pl.data.sampling",
    "lr_sequence": ".schedule",
    "train_heads": ".multihead",
    "val_split": "cog_pl.data.sampling",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
