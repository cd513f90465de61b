"""Mistake severity on real WordNet: the pairwise table against NLTK's own hypernym distances, the statistics of wrong
predictions against a direct count, and the bootstrap over kinds of images against a plain image bootstrap."""

from __future__ import annotations

import numpy as np
import pytest

from cog_pl import resources
from cog_pl.analysis.severity import class_hierarchy, mistake_severity
from cog_pl.errors import CogError
from cog_pl.results.predictions import NONE, Predictions
from cog_pl.wordnet.ontology import Ontology, synset_of

#: tench and goldfish (both cyprinids: siblings), great white shark, and cyprinid itself (the two fishes' parent).
TENCH, GOLDFISH, SHARK, CYPRINID = "n01440764", "n01443537", "n01484850", "n01439121"


def _nltk_severity(wn, a: str, b: str) -> tuple[int, bool]:
    """(steps from a up to the nearest hypernym it shares with b, whether they share a direct hypernym), from NLTK's
    ``hypernym_distances`` (every hypernym, instance hypernyms included, with each path's length)."""
    sa, sb = synset_of(wn, a), synset_of(wn, b)
    up_a: dict = {}
    for s, d in sa.hypernym_distances():
        up_a[s] = min(d, up_a.get(s, d))
    shared = {s for s, _ in sb.hypernym_distances()}
    parents = set(sa.hypernyms() + sa.instance_hypernyms()) & set(sb.hypernyms() + sb.instance_hypernyms())
    return min(d for s, d in up_a.items() if s in shared), bool(parents)


def test_the_table_is_nltks_shortest_climb_to_a_shared_hypernym(wn):
    rng = np.random.default_rng(0)
    classes = sorted({*rng.choice(sorted(resources.official_levels()["L3"]), 40, replace=False).tolist(),
                      *rng.choice(resources.in1k_wnids(), 40, replace=False).tolist(), TENCH, GOLDFISH, CYPRINID})
    h = class_hierarchy(Ontology.build(wn, classes), classes)
    i = {w: k for k, w in enumerate(classes)}
    assert h.severity[i[TENCH], i[GOLDFISH]] == 1 and h.same_parent[i[TENCH], i[GOLDFISH]]  # siblings
    assert h.severity[i[TENCH], i[CYPRINID]] == 1 and not h.same_parent[i[TENCH], i[CYPRINID]]  # its parent
    assert h.severity[i[CYPRINID], i[TENCH]] == 0  # a kind of the true concept: no step up
    assert np.all(np.diag(h.severity) == 0)
    for a, b in rng.integers(0, len(classes), (400, 2)):
        assert (h.severity[a, b], h.same_parent[a, b]) == _nltk_severity(wn, classes[a], classes[b]), (
            classes[a], classes[b])


def test_a_class_outside_wordnet_is_refused_by_name(wn):
    with pytest.raises(CogError, match="n99999999"):
        class_hierarchy(Ontology.build(wn, [TENCH]), [TENCH, "n99999999"])


def _predictions(first: list[int], label: list[int], classes: tuple[str, ...]) -> Predictions:
    top5 = np.array([[f, *([0] * 2)] for f in first])
    return Predictions.of(top5, np.array(label), np.arange(len(label)), classes)


def test_the_statistics_count_the_wrong_predictions_of_every_seed(wn):
    classes = (TENCH, GOLDFISH, SHARK)
    h = class_hierarchy(Ontology.build(wn, classes), classes)
    shark_steps = int(h.severity[0, 2])
    assert shark_steps > 1 and h.severity[2, 0] > 1
    label = [0, 0, 1, 2]
    by_seed = {22: _predictions([1, 0, 1, 0], label, classes),  # tench taken for goldfish (1 step, same parent)
               37: _predictions([2, NONE, 0, 2], label, classes)}  # tench for the shark; one image unanswered
    s = mistake_severity(by_seed, h, seed=3)
    steps = [1, int(h.severity[2, 0]), shark_steps, 1]  # the four answered errors: seed 22's two, seed 37's two
    assert (s.errors, s.unanswered, s.images, s.seeds) == (4, 1, 4, (22, 37))
    assert s.mean == pytest.approx(np.mean(steps)) and s.same_parent == pytest.approx(50.0)
    assert s.low <= s.mean <= s.high
    assert s.concept_errors.tolist() == [2, 1, 1]  # per true concept
    assert s.concept_mean[0] == pytest.approx((1 + shark_steps) / 2) and s.concept_same_parent[1] == 100.0
    again = mistake_severity(by_seed, h, seed=3)
    assert (again.low, again.high) == (s.low, s.high)  # seeded
    other = dict(by_seed)
    other[37] = Predictions.of(np.zeros((4, 3), dtype=int), np.array(label), np.arange(1, 5), classes)
    with pytest.raises(CogError, match="seed 37's predictions hold other test images"):
        mistake_severity(other, h)


def test_the_bootstrap_over_kinds_of_images_is_the_image_bootstrap(wn):
    """The interval draws a multinomial over the kinds of images; the plain bootstrap resampling images gives the same
    distribution: their quantiles agree within the noise of 4000 resamples."""
    classes = tuple(sorted(resources.official_levels()["L2"]))[:60]
    h = class_hierarchy(Ontology.build(wn, classes), classes)
    rng = np.random.default_rng(1)
    label = np.repeat(np.arange(len(classes)), 5)
    by_seed = {s: Predictions.of(np.stack([np.where(rng.random(len(label)) < 0.5, label,
                                                    rng.integers(0, len(classes), len(label)))] * 3, axis=1),
                                 label, np.arange(len(label)), classes) for s in (22, 37)}
    s = mistake_severity(by_seed, h, n_boot=4000, seed=0)
    first = np.stack([by_seed[k].top5[:, 0] for k in (22, 37)])
    wrong = first != label
    steps = np.where(wrong, h.severity[label, first], 0).sum(0)
    errors = wrong.sum(0)
    idx = np.random.default_rng(9).integers(0, len(label), (4000, len(label)))
    reps = steps[idx].sum(1) / errors[idx].sum(1)
    low, high = np.quantile(reps, [0.025, 0.975])
    assert s.mean == pytest.approx(steps.sum() / errors.sum())
    assert abs(s.low - low) < 0.1 and abs(s.high - high) < 0.1
