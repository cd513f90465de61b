#!/usr/bin/env python3
"""Time the whole `cog-pl levels build` against computing the same similarities pair by pair with NLTK.

The NLTK side runs `lin_similarity` (same information content) on a random sample of (eligible, IN-1K) pairs and is
extrapolated to the full eligible x IN-1K matrix. Prints both and the ratio.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--pairs", type=int, default=20000, help="NLTK pairs to time")
    a = p.parse_args()
    warnings.filterwarnings("ignore")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "levels.json"
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "cog_pl.cli.main", "levels", "build", "--out", str(out)], check=True,
                       stdout=subprocess.DEVNULL)
        build_s = time.perf_counter() - t
        content = json.loads(out.read_text())

    from cog_pl.levels.builder import build_ontology
    from cog_pl.resources import in1k_wnids
    from cog_pl.wordnet import get_wordnet

    wn = get_wordnet()
    onto = build_ontology()
    ic = onto.nltk_ic()
    eligible = content["ranking"]
    seen = [w for w in in1k_wnids() if w in onto.index]
    rng = random.Random(0)
    pairs = [(rng.choice(eligible), rng.choice(seen)) for _ in range(a.pairs)]
    syn = {w: wn.synset_from_pos_and_offset("n", int(w[1:])) for pr in pairs for w in pr}
    t = time.perf_counter()
    for x, y in pairs:
        syn[x].lin_similarity(syn[y], ic)
    per_pair = (time.perf_counter() - t) / len(pairs)
    full = per_pair * len(eligible) * len(seen)
    print(f"eligible x IN-1K pairs:              {len(eligible)} x {len(seen)} = {len(eligible) * len(seen):,}")
    sim_s = content["timings"]["similarity_s"]
    print(f"cog-pl levels build (whole command): {build_s:8.2f} s  (similarity matrix {sim_s:.2f} s)")
    print(f"NLTK lin_similarity pair by pair:    {full:8.1f} s  (extrapolated from {len(pairs):,} pairs, "
          f"{per_pair * 1e6:.1f} us/pair)")
    print(f"ratio (build / NLTK pairs):          {build_s / full:8.4f}  ({full / build_s:.0f}x faster)")


if __name__ == "__main__":
    main()
