"""Levels built relative to any seen set (issue 22): the IN-1K build unchanged, a 100-concept subset of IN-1K checked
step by step against WordNet itself, a benchmark file run end to end, and the run's warning of seen level concepts."""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import re

import pytest
from conftest_data import jpeg_bytes, write_synset

from cog_pl.benchmark import Benchmark
from cog_pl.cli.main import main
from cog_pl.levels.builder import build_levels, load_level_file, write_level_file
from cog_pl.levels.measures import similarity_to_set
from cog_pl.levels.seen import (
    named_seen_set,
    read_seen_file,
    resolve_seen,
    seen_warnings,
)
from cog_pl.models.zoo import resolve_spec, seen_of_timm_tag
from cog_pl.pipeline import run_seen_warnings
from cog_pl.protocol import DOMAINS, LEVEL_OF_DOMAIN
from cog_pl.resources import LEVELS, fall11_image_counts, in1k_wnids, in21k_wnids
from cog_pl.wordnet.ontology import synset_of

#: sha256 of ``json.dumps({levels, ranking, eligibility}, sort_keys=True)`` of the default build (``cog-pl levels
#: build --out FILE``) made before seen sets existed (issue 22): the IN-1K build must not move.
DEFAULT_BUILD_SHA256 = "423d03010759b5a4d8efc9e1d222440d15d1a2e7309e8260c0d492d163bfb5a8"
LEVEL_DOMAINS = list(LEVEL_OF_DOMAIN)


@pytest.fixture(scope="module")
def subset_content(onto):
    return build_levels(onto=onto, seen="in1k-100")


def _without_run_stamps(path) -> bytes:
    """The file's bytes with its two run-dependent fields (``timings``, ``created``) blanked."""
    data = json.loads(path.read_text())
    data["timings"] = data["created"] = None
    return json.dumps(data, indent=1).encode()


def test_seen_in1k_is_todays_default_build(onto, level_content, tmp_path):
    explicit = build_levels(onto=onto, seen="in1k")
    write_level_file(tmp_path / "default.json", level_content)
    write_level_file(tmp_path / "in1k.json", explicit)
    assert _without_run_stamps(tmp_path / "default.json") == _without_run_stamps(tmp_path / "in1k.json")
    core = {k: explicit[k] for k in ("levels", "ranking", "eligibility")}
    assert hashlib.sha256(json.dumps(core, sort_keys=True).encode()).hexdigest() == DEFAULT_BUILD_SHA256
    seen = explicit["settings"]["seen"]
    assert seen["name"] == "in1k" and seen["wnids"] == list(in1k_wnids()) and seen["concepts"] == 1000
    assert [s["name"] for s in explicit["eligibility"]][1:3] == ["drop IN-1K concepts",
                                                                 "drop ancestors of IN-1K concepts"]


@pytest.mark.slow
def test_cli_seen_in1k_writes_the_default_file(level_content, tmp_path, capsys):
    assert main(["levels", "build", "--seen", "in1k", "--out", str(tmp_path / "l.json")]) == 0
    write_level_file(tmp_path / "default.json", level_content)
    assert _without_run_stamps(tmp_path / "l.json") == _without_run_stamps(tmp_path / "default.json")
    assert "relative to the seen set in1k (1000 concepts)" in capsys.readouterr().out


def _hypernym_closure(wn, wnids) -> set[str]:
    """Proper ancestors of ``wnids`` by WordNet itself (hypernyms and instance hypernyms), not by the ontology."""
    out = set()
    for w in wnids:
        s = synset_of(wn, w)
        for a in s.closure(lambda x: x.hypernyms() + x.instance_hypernyms()):
            out.add(f"n{a.offset():08d}")
    return out


def test_subset_eligibility_counts_checked_against_wordnet(subset_content, wn):
    seen = named_seen_set("in1k-100").wnids
    assert seen == in1k_wnids()[::10] and len(seen) == 100
    steps = subset_content["eligibility"]
    assert [(s["name"], s["remaining"]) for s in steps] == [
        ("IN-21K concepts", 21841), ("drop seen concepts", 21742), ("drop ancestors of seen concepts", 21530),
        ("drop the n00007846 (person) subtree", 18694), ("drop concepts with fewer than 782 images", 8094),
        ("drop ancestors of IN-21K concepts (keep leaves)", 5774), ("drop the discard list (0 wnids)", 5774)]
    in21k = set(in21k_wnids())
    ancestors = _hypernym_closure(wn, seen)
    assert steps[1]["dropped"] == len(in21k & set(seen))  # teddy bear (n04399382) is not in Fall 2011
    assert steps[2]["dropped"] == len((in21k - set(seen)) & ancestors)
    assert len(subset_content["ranking"]) == 5774


def test_subset_levels_are_unseen_leaves_far_from_seen_in_order(subset_content, wn, onto):
    seen = set(named_seen_set("in1k-100").wnids)
    levels = subset_content["levels"]
    level_wnids = [w for lv in LEVELS for w in levels[lv]]
    assert [len(levels[lv]) for lv in LEVELS] == [1000] * 5 and len(set(level_wnids)) == 5000
    assert not set(level_wnids) & (seen | _hypernym_closure(wn, seen))
    person = "n00007846"
    assert not [w for w in level_wnids if person in _hypernym_closure(wn, [w])]
    counts = fall11_image_counts()
    assert min(counts[w] for w in level_wnids) >= 782
    # the other 900 IN-1K concepts are unseen for this model: some are level concepts now
    assert set(level_wnids) & (set(in1k_wnids()) - seen)
    sim = subset_content["similarity"]
    means = [sum(sim[w] for w in levels[lv]) / 1000 for lv in LEVELS]
    assert means == sorted(means, reverse=True) and means[0] - means[4] > 0.5
    for upper, lower in itertools.pairwise(LEVELS):  # blocks of the ranking: every L_k concept at least as similar
        assert min(sim[w] for w in levels[upper]) >= max(sim[w] for w in levels[lower])
    # similarity is the largest over the seen set, attained by closest_seen
    probe = [sorted(levels[lv])[7] for lv in LEVELS]
    ordered = [w for w in in1k_wnids() if w in seen]
    for w in probe:
        each = [float(similarity_to_set("lin", [w], [s], onto)[0][0]) for s in ordered]
        assert sim[w] == pytest.approx(max(each), abs=1e-12)
        assert each[ordered.index(subset_content["closest_seen"][w])] == pytest.approx(max(each), abs=1e-12)


def test_level_size_when_the_pool_is_smaller(onto, subset_content):
    import dataclasses

    from cog_pl.protocol import LevelProtocol

    big = dataclasses.replace(LevelProtocol(), level_size=2000)
    with pytest.raises(ValueError, match="the 5774 concepts eligible relative to the seen set in1k-100 .* cannot "
                                         "fill 5 levels of 2000; use a level size of at most 1154"):
        build_levels(big, onto=onto, seen="in1k-100")
    fitted = build_levels(big, onto=onto, seen="in1k-100", fit=True)
    assert [len(v) for v in fitted["levels"].values()] == [1154] * 5
    assert fitted["settings"]["protocol"]["level_size"] == 1154 and fitted["ranking"] == subset_content["ranking"]
    with pytest.raises(ValueError, match="only 0 concept.*in21k-p.*fewer than 782 images 0.*lower --min-images"):
        build_levels(onto=onto, seen="in21k-p")


def test_named_sets_and_seen_files(tmp_path):
    sizes = {"in1k": 1000, "in1k-100": 100, "in21k-p": 10450, "in21k-p-fall11": 11221, "in12k": 11821,
             "in21k": 21841}
    for name, n in sizes.items():
        s = named_seen_set(name)
        assert len(s.wnids) == len(set(s.wnids)) == n
    assert resolve_seen("IN21K_P") == named_seen_set("in21k-p") and resolve_seen(None).name == "in1k"
    good = tmp_path / "seen.txt"
    good.write_text("# my pretraining classes\nn01440764 tench\n\nn01443537\nn01440764\n")
    s = read_seen_file(good)
    assert s.wnids == ("n01440764", "n01443537") and resolve_seen(str(good)) == s
    bad = tmp_path / "bad.txt"
    bad.write_text("n01440764\ncat\nn99999999\n")
    with pytest.raises(ValueError, match=r"bad.txt:2: 'cat' is not a wnid.*bad.txt:3: n99999999 is not an "):
        read_seen_file(bad)
    (tmp_path / "empty.txt").write_text("# nothing\n")
    with pytest.raises(ValueError, match="empty.txt holds no wnid"):
        read_seen_file(tmp_path / "empty.txt")
    with pytest.raises(ValueError, match="'in5k' is neither a named set .*in21k-p.* nor a file"):
        resolve_seen("in5k")


def test_cli_refuses_bad_seen_requests(tmp_path, capsys):
    out = str(tmp_path / "l.json")
    assert main(["levels", "build", "--seen", "in5k", "--out", out]) == 2
    assert "seen set 'in5k' is neither a named set" in capsys.readouterr().err
    assert main(["levels", "build", "--seen", "in1k-100", "--benchmark", str(tmp_path / "b.json"), "--out", out]) == 2
    assert "--benchmark draws each concept's test images from your IN-21K: give --in21k-root" in capsys.readouterr().err
    assert main(["levels", "build", "--concepts", "official", "--seen", "in1k-100", "--out", out]) == 2
    assert "--seen: eligibility options" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["levels", "build", "--level-size", "0", "--out", out])
    assert "level size 0: must be at least 1" in capsys.readouterr().err
    assert not (tmp_path / "l.json").exists()


def test_registry_seen_sets_and_run_warnings():
    assert resolve_spec("resnet50").seen == "in1k" and resolve_spec("clip").seen is None
    assert seen_of_timm_tag("timm:vit_base_patch16_224.augreg_in21k") == "in21k"
    assert seen_of_timm_tag("timm:convnext_base.fb_in22k_ft_in1k") == "in21k"
    assert seen_of_timm_tag("timm:tresnet_m.miil_in21k") == "in21k-p-fall11"
    assert seen_of_timm_tag("timm:vit_base_patch16_224.augreg2_in21k_ft_in1k") == "in21k"
    assert seen_of_timm_tag("timm:resnet50.a1_in1k") == "in1k" and seen_of_timm_tag("timm:resnet50") is None
    assert resolve_spec("timm:vit_base_patch16_224.augreg_in21k").seen == "in21k"
    # the paper's setting: IN-1K models on the official levels
    assert run_seen_warnings("resnet50", None, None, DOMAINS) == []
    assert run_seen_warnings("resnet50", "in1k-100", None, DOMAINS) == []
    # an IN-21K-pretrained timm model on the official levels: every level concept was seen
    (msg,) = run_seen_warnings("timm:vit_base_patch16_224.augreg_in21k", None, None, DOMAINS)
    assert "registry entry of timm:vit_base_patch16_224.augreg_in21k says its pretraining covered in21k" in msg
    assert "5000 of the 5000 concepts" in msg and "L1 1000/1000" in msg and "--seen in21k" in msg
    # IN-21K-P covers part of them; only the levels evaluated count
    (msg,) = run_seen_warnings("timm:resnet50", "in21k-p", None, ["in1k", "cog_l5"])
    shared = set(named_seen_set("in21k-p").wnids) & set(Benchmark.official().classes("L5"))
    assert f"holds {len(shared)} of the 1000 concepts of the levels evaluated (L5 {len(shared)}/1000" in msg
    assert run_seen_warnings("timm:vit_base_patch16_224.augreg_in21k", None, None, ["in1k"]) == []
    # --seen describes the user's checkpoint: it replaces the registry entry's set
    assert run_seen_warnings("timm:vit_base_patch16_224.augreg_in21k", "in1k", None, DOMAINS) == []



def test_seen_warnings_take_the_registry_entrys_set_from_the_caller():
    """The levels layer asks no model registry: a name no registry knows is fine, its seen set comes from the caller
    (the run looks it up, :func:`cog_pl.pipeline.run_seen_warnings`), and ``--seen`` still wins over it."""
    levels = {"L5": Benchmark.official().classes("L5")}
    assert seen_warnings("no_such_model", None, levels) == []
    (msg,) = seen_warnings("no_such_model", None, levels, registry_seen="in21k")
    assert "the registry entry of no_such_model says its pretraining covered in21k" in msg and "L5 1000/1000" in msg
    assert seen_warnings("no_such_model", "in1k", levels, registry_seen="in21k") == []

def _pick_tree(content) -> tuple[list[str], str]:
    """Ten eligible concepts spread over the ranking, one of them an IN-1K concept the subset did not see."""
    ranking = content["ranking"]
    in1k = set(in1k_wnids())
    unseen_in1k = next(w for w in ranking[len(ranking) // 3:] if w in in1k)
    others = [w for w in ranking if w not in in1k]
    step = len(others) // 9
    return sorted([*others[::step][:9], unseen_in1k]), unseen_in1k


@pytest.mark.slow
def test_benchmark_from_a_seen_subset_runs_end_to_end(subset_content, tmp_path, capsys, caplog):
    import cog_pl.demo  # noqa: F401 - registers external:demo_cnn (random weights: the run, not the accuracy)
    from cog_pl.data.splits import select_train
    from cog_pl.results import read_rows

    concepts, unseen_in1k = _pick_tree(subset_content)
    seen = named_seen_set("in1k-100").wnids
    small = next(w for w in subset_content["ranking"] if w not in concepts)  # eligible, but 3 images here
    tree = tmp_path / "in21k"
    for i, w in enumerate([*concepts, seen[1], small]):  # + a seen concept, + a small one: both dropped
        n = 3 if w == small else 8
        write_synset(tree, w, {f"{w}_{k}.JPEG": jpeg_bytes(100 * i + k) for k in range(n)}, "folder")
    levels, bench_path = tmp_path / "levels.json", tmp_path / "bench.json"
    assert main(["levels", "build", "--seen", "in1k-100", "--out", str(levels), "--benchmark", str(bench_path),
                 "--in21k-root", str(tree), "--allow-missing", "--min-images", "6", "--level-size", "2",
                 "--test-per-concept", "2"]) == 0
    shown = capsys.readouterr().out
    assert re.search(r"drop seen concepts +21742  \(-99\)\n.*\n.*\n  drop concepts with fewer than 6 images +10  "
                     r"\(-18684\)", shown)
    content = load_level_file(levels)
    assert sorted(w for lv in LEVELS for w in content["levels"][lv]) == concepts
    bench = Benchmark.load(bench_path)
    assert bench.name == "cog-seen-in1k-100" and bench.in1k == seen
    assert bench.protocol == {"test_per_concept": 2, "min_train_per_concept": 4}
    assert bench.meta["test_rule"]["rule"] == "sha256-rank-v1" and bench.meta["seen"]["name"] == "in1k-100"
    for lv in LEVELS:  # the test images: the first two by sha256('0/wnid/filename'), recomputed here
        for w in bench.classes(lv):
            names = [f"{w}_{k}.JPEG" for k in range(8)]
            first = sorted(sorted(names, key=lambda n: hashlib.sha256(f"0/{w}/{n}".encode()).hexdigest())[:2])
            assert bench.test_by_concept(lv)[w] == tuple(first) == tuple(select_train(w, names, (), 2))
    out = tmp_path / "run"
    with caplog.at_level(logging.WARNING, logger="cog_pl.pipeline"):
        assert main(["run", "--model", "external:demo_cnn", "--random-weights", "--in21k-root", str(tree),
                     "--benchmark", str(bench_path), "--out", str(out), "--domains", *LEVEL_DOMAINS, "--seen", "in1k",
                     "--num-workers", "0", "--batch-size", "16", "--accelerator", "cpu", "--devices", "1",
                     "--seeds", "22", "--shots", "all", "--trials", "2", "--epochs", "2",
                     "--probe-device", "cpu"]) == 0, capsys.readouterr().err
    warned = [r.getMessage() for r in caplog.records if "pretraining covered" in r.getMessage()]
    assert len(warned) == 1 and "holds 1 of the 10 concepts" in warned[0] and unseen_in1k in warned[0]
    rows = read_rows(out / "results.sqlite")
    assert sorted(r["domain"] for r in rows) == sorted(LEVEL_DOMAINS)
    for domain in LEVEL_DOMAINS:
        meta = json.loads((out / "features" / "demo_cnn@random" / domain / "test" / "meta.json").read_text())
        assert meta["benchmark"] == "cog-seen-in1k-100" and meta["level_file_sha256"] == bench.sha256()
