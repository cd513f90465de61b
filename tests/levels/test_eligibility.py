"""Each eligibility rule on real WordNet and the Fall 2011 image counts."""

from __future__ import annotations

import pytest

from cog_pl.levels.eligibility import eligible_concepts, read_discard_list
from cog_pl.resources import fall11_image_counts, in1k_wnids, in21k_wnids, official_levels

TIGER_CAT, CAT, PERSON = "n02123159", "n02121620", "n00007846"


@pytest.fixture(scope="module")
def default_run(onto):
    return eligible_concepts(onto, list(in21k_wnids()), in1k_wnids(), fall11_image_counts())


def test_counts_after_each_step_reproduce_5146_plus_70(default_run):
    _, steps = default_run
    assert [s.remaining for s in steps] == [21841, 20842, 20081, 17254, 6840, 5216, 5216]
    assert steps[-2].remaining == 5146 + 70  # the paper's 5146 after its 70 (unpublished) manual discards


def test_official_concepts_are_all_eligible(default_run):
    eligible = set(default_run[0])
    for level in official_levels().values():
        assert set(level) <= eligible


def test_seen_and_their_ancestors_and_persons_are_dropped(onto, default_run):
    eligible = set(default_run[0])
    assert TIGER_CAT not in eligible and CAT not in eligible  # seen, and ancestor of a seen concept
    persons = [w for w in in21k_wnids() if onto.index[PERSON] in set(onto.ancestors[onto.index[w]].tolist())]
    assert len(persons) > 2000 and not eligible & set(persons)


def test_min_images_threshold_is_inclusive(onto, default_run):
    eligible, _ = default_run
    w = sorted(eligible)[0]
    counts = dict(fall11_image_counts())
    counts[w] = 782
    assert w in eligible_concepts(onto, list(in21k_wnids()), in1k_wnids(), counts)[0]
    counts[w] = 781
    assert w not in eligible_concepts(onto, list(in21k_wnids()), in1k_wnids(), counts)[0]


def test_leaf_rules(onto):
    in21k = list(in21k_wnids())
    counts = fall11_image_counts()
    strict, _ = eligible_concepts(onto, in21k, in1k_wnids(), counts, leaf_rule="in21k")
    loose, steps = eligible_concepts(onto, in21k, in1k_wnids(), counts, leaf_rule="eligible")
    assert set(strict) < set(loose) and steps[-1].remaining == 5754
    extra = next(iter(set(loose) - set(strict)))  # has an IN-21K descendant, but none still eligible
    i = onto.index[extra]
    assert any(i in set(onto.ancestors[onto.index[w]].tolist()) for w in in21k if w != extra)
    with pytest.raises(ValueError, match="unknown leaf rule"):
        eligible_concepts(onto, in21k, in1k_wnids(), counts, leaf_rule="roots")


def test_discard_list_file(onto, default_run, tmp_path):
    eligible, _ = default_run
    f = tmp_path / "discard.txt"
    f.write_text(f"# ambiguous\n{eligible[0]}  # first\n\n{eligible[1]}\n")
    discard = read_discard_list(f, in21k_wnids())
    out, steps = eligible_concepts(onto, list(in21k_wnids()), in1k_wnids(), fall11_image_counts(), discard)
    assert steps[-1].dropped == 2 and eligible[0] not in out and len(out) == len(eligible) - 2


def test_discard_list_errors_name_file_and_line(tmp_path):
    f = tmp_path / "bad.txt"
    f.write_text("n02123159\nhello\nn99999999\n")
    with pytest.raises(ValueError) as err:
        read_discard_list(f, in21k_wnids())
    text = str(err.value)
    assert "2 bad line" in text and f"{f}:2" in text and "'hello'" in text
    assert f"{f}:3: n99999999 is not an ImageNet-21K synset" in text
    with pytest.raises(ValueError, match="cannot read discard list"):
        read_discard_list(tmp_path / "missing.txt", in21k_wnids())


def test_missing_counts_are_named(onto):
    counts = dict(fall11_image_counts())
    del counts["n02123159"]
    with pytest.raises(ValueError, match="no image count for 1 IN-21K synsets, e.g. n02123159"):
        eligible_concepts(onto, list(in21k_wnids()), in1k_wnids(), counts)
