"""The report's ridge section: per level and shot setting, Spearman's rho of the models' ridge and linear-probe top-1
(n, not defined for n < 3), the mean gap, and on all data the gap's paired interval from the stored predictions;
rows written through the results API, the whole report written."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import spearmanr

from cog_pl.analysis.paired import paired_difference
from cog_pl.report.build import write_report
from cog_pl.report.ridge import agreement_rows, ridge_markdown
from cog_pl.report.tables import summarize
from cog_pl.results import append_row, read_rows
from cog_pl.results.predictions import Predictions

SEEDS = (22, 37)
IMAGES = 60
#: Per model: the chance of a right answer of the linear probe and of ridge on every level.
MODELS = {"a": (0.70, 0.66), "b": (0.55, 0.57), "c": (0.45, 0.35), "d": (0.30, 0.38)}


def _predictions(right: np.ndarray) -> Predictions:
    label = np.arange(IMAGES) % 5
    first = np.where(right, label, (label + 1) % 5)
    return Predictions.of(np.stack([(first + k) % 5 for k in range(5)], 1), label, np.arange(IMAGES))


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Four models' linear and ridge rows on IN-1K and L1 (all data, with predictions; 5 shots, without), and two
    models' on L5; the correctness arrays drawn."""
    tmp = tmp_path_factory.mktemp("ridge_report")
    results, rng, drawn = tmp / "results.sqlite", np.random.default_rng(0), {}
    for model, chances in MODELS.items():
        for method, p in zip(("linear", "ridge"), chances):
            domains = ("in1k", "cog_l1") + (("cog_l5",) if model in ("a", "b") else ())
            for domain in domains:
                for seed in SEEDS:
                    right = drawn[model, method, domain, seed] = rng.random(IMAGES) < p
                    preds = _predictions(right)
                    append_row(results, {"model": model, "method": method, "domain": domain, "shots": None,
                                         "seed": seed, "test_top1": preds.top1, "test_top5": 100.0,
                                         "predictions": preds})
                    append_row(results, {"model": model, "method": method, "domain": domain, "shots": 5,
                                         "seed": seed, "test_top1": 100 * p + seed / 10, "test_top5": 100.0})
    return results, drawn, tmp


def test_rho_gap_and_paired_interval_per_level(store):
    results, drawn, _ = store
    rows = read_rows(results)
    found = {(a.domain, a.shots): a for a in agreement_rows(summarize(rows), results, rows)}
    assert list(found) == [("in1k", None), ("cog_l1", None), ("cog_l5", None), ("in1k", 5), ("cog_l1", 5),
                           ("cog_l5", 5)]
    for domain in ("in1k", "cog_l1"):
        level = found[domain, None]
        linear = [np.mean([drawn[m, "linear", domain, s].mean() for s in SEEDS]) * 100 for m in MODELS]
        ridge = [np.mean([drawn[m, "ridge", domain, s].mean() for s in SEEDS]) * 100 for m in MODELS]
        assert level.models == tuple(MODELS) and level.rho == pytest.approx(spearmanr(ridge, linear).statistic)
        assert level.gap == pytest.approx(np.mean(np.subtract(ridge, linear)))
        a = np.stack([drawn[m, "ridge", domain, s] for m in MODELS for s in SEEDS])
        b = np.stack([drawn[m, "linear", domain, s] for m in MODELS for s in SEEDS])
        assert level.paired == paired_difference(a, b, seeds=SEEDS)
        assert level.paired.difference == pytest.approx(level.gap)  # every model's seeds and images: the same gap
    assert found["cog_l5", None].models == ("a", "b") and found["cog_l5", None].rho is None
    few = found["in1k", 5]  # from the cells' means: ridge swaps c and d, the linear probe's last two
    assert few.paired is None and few.rho == pytest.approx(0.8)
    assert few.gap == pytest.approx(np.mean([100 * (r - lin) for lin, r in MODELS.values()]))


def test_the_section_is_in_the_written_report(store):
    results, _, tmp = store
    files = write_report(results, tmp / "report", html=False)
    text = files["markdown"].read_text()
    section = text[text.index("## Ridge beside the linear probe: ranking agreement per level"):]
    table = section[section.index("| shots | level |"):].split("\n\n")[0].splitlines()
    assert table[2].startswith("| All | IN-1K | 4 | ") and "[" in table[2] and "2 seed(s) × 60 images" in table[2]
    assert table[4].startswith("| All | L5 | 2 | not defined for n < 3 | ")
    assert table[5].startswith("| 5 | IN-1K | 4 | ") and table[5].endswith(" | – |")
    assert ridge_markdown(summarize([r for r in read_rows(results) if r["method"] == "linear"])) == ""
