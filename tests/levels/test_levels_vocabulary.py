"""Seen sets from a vocabulary (issue 41): MetaCLIP's entry counts with a threshold, or a lemma list, mapped to noun
synsets through WordNet 3.0's lemmas, ambiguous, unmatched and outside entries reported, and the level builder run
relative to the result. The synsets expected were read from WordNet 3.0 (``wn.synsets(lemma, "n")``) by hand."""

from __future__ import annotations

import json

import pytest

from cog_pl.cli.main import main
from cog_pl.errors import CogError
from cog_pl.levels.builder import load_level_file
from cog_pl.levels.seen import read_seen_file, resolve_seen, vocabulary_seen_set
from cog_pl.levels.vocabulary import vocabulary_kind

CRANE_MACHINE, CRANE_BIRD = "n03126707", "n02012849"  # crane.n.04, crane.n.05: IN-1K classes 517 and 134
TIGER_CAT = "n02123159"  # tiger_cat.n.02 (tiger_cat.n.01, the wildcat n02126465, is no ImageNet-21K synset)
SPECTACLES = "n04272054"  # the one synset with the lemma "glasses" (glass.n.* are not matched: no morphology)
TENCH, GOLDFISH, WHITE_SHARK = "n01440764", "n01443537", "n01484850"
DOG, ANDIRON = "n02084071", "n02710044"  # dog.n.01 and andiron.n.01 (lemma "dog"); dog's persons are not ImageNet's
GERMAN_SHEPHERD = "n02106662"

#: A small vocabulary in MetaCLIP's entry_counts_400m.json format (entry -> count; "_" for a space as bethgelab writes).
COUNTS = {"tiger cat": 120, "crane": 50, "dog": 3, "zzzqqq": 999, "glasses": 10, "the": 0, "German_shepherd": 7,
          "idea": 40, "tench": 12, "goldfish": 500, "great white shark": 30}


@pytest.fixture
def counts_file(tmp_path):
    path = tmp_path / "entry_counts_400m.json"
    path.write_text(json.dumps(COUNTS))
    return path


def test_metaclip_counts_above_a_threshold_map_to_synsets_with_the_ambiguous_reported(counts_file):
    seen, match = vocabulary_seen_set(counts_file, min_count=10)
    assert set(seen.wnids) == {TIGER_CAT, CRANE_MACHINE, CRANE_BIRD, SPECTACLES, TENCH, GOLDFISH, WHITE_SHARK}
    assert match.ambiguous == {"crane": (CRANE_MACHINE, CRANE_BIRD)}  # WordNet's sense order
    assert match.unmatched == ["zzzqqq"] and match.outside == ["idea"]  # idea.n.*: no ImageNet-21K synset
    report = match.report()
    assert report["min_count"] == 10 and report["entries"] == 8 and report["ambiguous"] == {
        "crane": [CRANE_MACHINE, CRANE_BIRD]}
    assert "MetaCLIP entry counts, 8 entries with count >= 10" in seen.source and "1 ambiguous" in seen.source
    # the default threshold, 1: "dog" (3) names dog.n.01 and andiron.n.01; "the" (0) stays out
    seen1, match1 = vocabulary_seen_set(counts_file)
    assert match1.ambiguous["dog"] == (DOG, ANDIRON) and {DOG, ANDIRON, GERMAN_SHEPHERD} <= set(seen1.wnids)
    assert "the" not in match1.unmatched and len(seen1.wnids) == len(seen.wnids) + 3
    # the first sense alone
    first, _ = vocabulary_seen_set(counts_file, min_count=10, senses="first")
    assert set(seen.wnids) - set(first.wnids) == {CRANE_BIRD}


def test_a_lemma_list_and_the_file_kinds(tmp_path, counts_file):
    lemmas = tmp_path / "lemmas.txt"
    lemmas.write_text("# words a caption set named\nTiger Cat\n\ncrane  # the bird and the machine\n"
                      "great  white shark\nzzzqqq\nanklets\n")
    seen, match = vocabulary_seen_set(lemmas)
    # "anklets" is a lemma of anklet.n.02 alone (NLTK's synsets() returns it twice, also for the base form "anklet")
    assert list(seen.wnids) == [TIGER_CAT, CRANE_MACHINE, CRANE_BIRD, WHITE_SHARK, "n02713218"]
    assert match.unmatched == ["zzzqqq"] and list(match.ambiguous) == ["crane"]
    assert resolve_seen(str(lemmas)).wnids == seen.wnids  # --seen takes it as it takes a wnid file
    wnids = tmp_path / "seen.txt"
    wnids.write_text(f"{TENCH}  # tench\n{GOLDFISH}\n")
    assert [vocabulary_kind(p) for p in (counts_file, lemmas, wnids)] == ["counts", "lemmas", "wnids"]
    assert resolve_seen(str(wnids)) == read_seen_file(wnids)


@pytest.mark.parametrize("content, kwargs, match", [
    ("crane\n", {"min_count": 5}, "a count threshold needs a vocabulary with counts; .* is a lemma list"),
    (f"crane\n{TENCH}\n", {}, f":2: {TENCH} is a wnid in a lemma list"),
    ('{"crane": "many"}', {}, "expected MetaCLIP's entry counts .* got 'crane': 'many'"),
    ('{"crane": 5', {}, "cannot read the vocabulary"),
    ('["crane", "tench"]', {}, "is a JSON list; a vocabulary with counts is a JSON object"),
    ('{"crane": 5}', {"min_count": 0}, "threshold must be at least 1"),
    ('{"zzzqqq": 5, "idea": 9}', {}, "none of its 2 entries names an ImageNet-21K or IN-1K synset"),
    ("crane\n", {"senses": "most"}, "unknown sense rule 'most'"),
    # issue 47: a threshold above every count said "none of its 0 entries" of a file of 3
    ('{"dog": 1, "cat": 2, "goldfish": 3}', {"min_count": 10}, r"v\.json: none of its 3 entries is counted 10 times "
                                                               r"or more \(the highest count is 3\); lower the count "
                                                               r"threshold \(--seen-min-count\)$"),
    ("{}", {}, r"v\.json holds no entry$"),
    ('{"zzzqqq": 5, "idea": 9}', {"min_count": 2}, "none of its 2 entries counted 2 times or more names an "
                                                   "ImageNet-21K"),
])
def test_bad_vocabularies_are_refused_in_one_line(tmp_path, content, kwargs, match):
    path = tmp_path / "v.json"
    path.write_text(content)
    with pytest.raises(CogError, match=match) as err:
        vocabulary_seen_set(path, **kwargs)
    assert "\n" not in str(err.value)


def test_cli_builds_levels_relative_to_a_vocabulary(onto, monkeypatch, counts_file, tmp_path, capsys):
    import cog_pl.levels.builder as builder

    monkeypatch.setattr(builder, "build_ontology", lambda *a, **k: onto)  # the session's, not a second build
    out, report = tmp_path / "levels.json", tmp_path / "report.json"
    assert main(["levels", "build", "--seen", str(counts_file), "--seen-min-count", "10", "--seen-report",
                 str(report), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "7 seen synsets" in printed and f"ambiguous (1): 'crane' -> {CRANE_MACHINE} {CRANE_BIRD}" in printed
    assert "unmatched (1): 'zzzqqq'" in printed and "outside ImageNet-21K (1): 'idea'" in printed
    assert json.loads(report.read_text())["unmatched"] == ["zzzqqq"]
    content = load_level_file(out)
    recorded = content["settings"]["seen"]
    assert set(recorded["wnids"]) == set(vocabulary_seen_set(counts_file, 10)[0].wnids)
    assert "count >= 10" in recorded["source"]
    assert not {w for ws in content["levels"].values() for w in ws} & set(recorded["wnids"])
    # the vocabulary options without a vocabulary are refused before any build
    assert main(["levels", "build", "--seen", "in1k", "--seen-min-count", "5", "--out", str(out)]) == 2
    assert "--seen-min-count: options of a vocabulary given as --seen" in capsys.readouterr().err
