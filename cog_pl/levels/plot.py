"""Figure: similarity to IN-1K against rank, with the level bands (paper Fig. 2)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cog_pl.io import atomic_open
from cog_pl.resources import LEVELS

COLORS = ("#1b9e77", "#66a61e", "#e6ab02", "#d95f02", "#e7298a")


def plot_levels(content: Mapping[str, Any], out: str | Path, title: str | None = None) -> Path:
    """Write a PNG of the ranked similarity curve with one shaded band per level."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ranking = content["ranking"]
    sim = content["similarity"]
    pos = {w: i for i, w in enumerate(ranking)}
    fig, ax = plt.subplots(figsize=(8, 4), dpi=120)
    ax.plot(range(len(ranking)), [sim[w] for w in ranking], color="black", lw=1.2, label="eligible concepts")
    for color, lvl in zip(COLORS, LEVELS):
        ranks = [pos[w] for w in content["levels"][lvl] if w in pos]
        if ranks:
            ax.axvspan(min(ranks), max(ranks), color=color, alpha=0.3, lw=0)
            ax.text((min(ranks) + max(ranks)) / 2, 0.02, lvl, ha="center", va="bottom", fontsize=11,
                    transform=ax.get_xaxis_transform())
    measure = content.get("settings", {}).get("protocol", {}).get("measure", "lin")
    ax.set_xlabel("rank of unseen concept (most similar to IN-1K first)")
    ax.set_ylabel(f"{measure} similarity to IN-1K")
    ax.set_title(title or f"ImageNet-CoG levels: {len(ranking)} eligible concepts")
    ax.set_xlim(0, len(ranking))
    ax.grid(alpha=0.3)
    fig.tight_layout()
    out = Path(out)
    with atomic_open(out, "wb") as fh:
        fig.savefig(fh, format="png")
    plt.close(fig)
    return out
