"""The report's zero-shot section: zero-shot beside the linear probe per level and their ratio, zero-shot concept
top-1 against similarity to the seen concepts, and the names, prompts and polysemous concepts the rows used."""

from __future__ import annotations

import numpy as np

from cog_pl.analysis.concepts import ConceptScores
from cog_pl.report.tables import summarize
from cog_pl.report.zeroshot import zeroshot_markdown, zeroshot_ratios


def _rows():
    linear = [{"model": "m", "method": "linear", "domain": d, "shots": None, "seed": s, "test_top1": top1,
               "identity": "lin"} for d, top1 in (("cog_l1", 80.0), ("cog_l5", 40.0)) for s in (22, 37)]
    zeroshot = [{"model": "m", "method": "zeroshot", "domain": d, "shots": None, "seed": 22, "test_top1": top1,
                 "identity": "zs", "seed_is_key": True, "templates_count": 80,
                 "zeroshot": {"names": "lemma", "templates": "openai80", "templates_sha256": "ab" * 32},
                 "text_tower": {"model": "clip", "weights": "RN50.pt", "sha256": "cd" * 32},
                 "shared_names": shared} for d, top1, shared in (
                     ("cog_l1", 60.0, {}), ("cog_l5", 10.0, {"crane": ["n02012849", "n03126707"]}))]
    return linear + zeroshot


def test_zeroshot_beside_the_linear_probe_with_the_ratio_per_level():
    rows = _rows()
    ratios = zeroshot_ratios(summarize(rows))
    assert ratios["m", "cog_l1"][2] == 75.0 and ratios["m", "cog_l5"][2] == 25.0
    text = zeroshot_markdown(summarize(rows), rows)
    assert "| m | zero-shot | 60.00 | 10.00 |" in text and "| m | ratio (%) | 75.0 | 25.0 |" in text
    assert "| m | linear probe | 80.00 ± 0.00 (n = 2) | 40.00 ± 0.00 (n = 2) |" in text
    assert ("| m | L1, L5 | lemma | openai80 (80 templates, sha256 abababababab) | clip (RN50.pt, sha256 cdcdcdcdcdcd)"
            " | L5: 1 ('crane' (n02012849, n03126707)) |") in text
    assert zeroshot_markdown(summarize(rows[:4]), rows[:4]) == ""  # no zero-shot row: no section


def test_a_zeroshot_cell_counts_once_whatever_the_seeds_of_its_runs(tmp_path):
    from cog_pl.analysis.paired import aligned
    from cog_pl.report.concepts import stored_predictions
    from cog_pl.results import NO_SEED, append_row
    from cog_pl.results.predictions import Predictions

    rows = _rows()
    # an older file: a second run with another first seed added an identical row (key seed 37, seed_is_key)
    rows.append({**rows[-2], "seed": 37})
    cells = {(c.method, c.domain): c for c in summarize(rows)}
    assert cells["zeroshot", "cog_l1"].seeds == 1 and cells["zeroshot", "cog_l1"].top1 == 60.0
    assert "| m | zero-shot | 60.00 | 10.00 |" in zeroshot_markdown(summarize(rows), rows)
    assert cells["zeroshot", "cog_l1"].value == "60.00 (n = 1)"
    # a row of this version beside them (key seed NO_SEED): still one
    rows.append({**rows[-1], "seed": NO_SEED, "seedless": True, "test_top1": 60.0})
    assert {(c.method, c.domain): c.seeds for c in summarize(rows)}["zeroshot", "cog_l1"] == 1

    # the concept analyses: its predictions under NO_SEED, paired with every seed of the linear probe's row
    results = tmp_path / "r.sqlite"
    preds = Predictions.of(np.array([[0], [1], [0]]), np.array([0, 1, 2]), np.arange(3), ("a", "b", "c"))
    stored_rows = []
    for row in (rows[0], rows[1], rows[4], rows[-2]):  # linear seeds 22, 37; zero-shot keyed 22 and 37 (older rows)
        row = {**row, "predictions": preds}
        append_row(results, row)
        stored_rows.append(row)
    found, lacking = stored_predictions(results, stored_rows)
    assert not lacking and set(found["m", "zeroshot", "cog_l1"]) == {NO_SEED}
    assert aligned(found["m", "zeroshot", "cog_l1"], found["m", "linear", "cog_l1"])[2] == (22, 37)
    from cog_pl.report.probes import probe_gains

    gain = probe_gains(found, {"a": 0.1, "b": 0.2, "c": 0.3})["zeroshot"]
    assert gain.paired["m", "cog_l1"].seeds == (22, 37) and not gain.unpaired and "m" in gain.curves


def test_zeroshot_concept_top1_against_similarity():
    rows = _rows()
    wnids = tuple(f"n{i:08d}" for i in range(16))
    similarity = {w: 0.1 + 0.05 * i for i, w in enumerate(wnids)}
    top1 = np.linspace(0.0, 100.0, 16)  # the nearer the seen concepts, the better named
    scores = {("m", "zeroshot", "cog_l1"): ConceptScores("m", "zeroshot", "cog_l1", wnids, top1, np.ones(16), (22,)),
              ("m", "linear", "cog_l1"): ConceptScores("m", "linear", "cog_l1", wnids, top1[::-1], np.ones(16), (22,))}
    text = zeroshot_markdown(summarize(rows), rows, scores, similarity, "lin", seed=0)
    line = next(x for x in text.splitlines() if x.startswith("| m | 16 |"))
    slope = float(line.split("|")[3].split()[0])
    assert abs(slope - 100 / 15 / 0.05 * 0.1) < 0.006  # points per +0.1 similarity, from the zero-shot rows only
    assert "against its similarity (lin) to the seen concepts" in text
