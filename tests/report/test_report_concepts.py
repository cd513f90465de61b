"""The report's concept-level results from stored predictions: the curve over similarity, the paired table, the most
and least right concepts, the confusions, the label-noise table, concepts.csv, report.html, and what it says of rows
without predictions."""

from __future__ import annotations

import csv
import io

import numpy as np
import pytest
from concept_fixtures import level_concepts, simulated_results

from cog_pl.cli.main import main
from cog_pl.report.build import write_report
from cog_pl.report.concepts import concept_info
from cog_pl.results import read_rows
from cog_pl.results.predictions import predictions_root, read_row_predictions, write_predictions

MODELS = {"base": 0.0, "better": 0.25, "twin": 0.0}


@pytest.fixture
def wordnet(onto, monkeypatch):
    """The session's IN-21K ontology for the report's WordNet look-ups (Lin similarity of confused concepts)."""
    import cog_pl.report.concepts as concepts

    monkeypatch.setattr(concepts, "_ontology", lambda: onto)
    return onto


@pytest.fixture
def store(tmp_path, wordnet):
    return simulated_results(tmp_path, MODELS, seeds=(22, 37), n=12, images=10)


def _csv(path):
    return list(csv.DictReader(io.StringIO(path.read_text())))


def test_report_shows_concepts_paired_differences_and_confusions(store, tmp_path):
    results, levels = store
    files = write_report(results, tmp_path / "report", baseline="base", levels=levels, html=True)
    text = files["markdown"].read_text()
    # the main table: the L1-L5 drop and the slope over similarity beside the levels
    assert "| model | IN-1K | L1 | L2 | L3 | L4 | L5 | L1−L5 | slope (points per +0.1 similarity) |" in text
    for section in ("## Concepts: top-1 against similarity to the seen concepts", "## Paired differences to base",
                    "## Concepts most and least right", "## Most frequent confusions per level",
                    "## What the IN-1K probe takes unseen concepts for (label-noise check)"):
        assert section in text
    assert "| similarity | concepts | base | better | twin |" in text and "lin similarity" in text
    rows = read_rows(results)
    top1 = {(r["model"], r["domain"], r["seed"]): r["test_top1"] for r in rows}
    # the paired table: differences from the rows, the better model significant on every domain, intervals beside
    # the relative table's differences, non-significant ones marked
    section = text.split("## Paired differences to base")[1].split("\n## ")[0]
    paired = [[c.strip() for c in ln.strip("|").split("|")] for ln in section.splitlines()
              if ln.startswith(("| better | ", "| twin | "))]
    assert len(paired) == 12
    for model, domain, diff, interval, p, images, seeds in paired:
        d = {"IN-1K": "in1k", **{f"L{i}": f"cog_l{i}" for i in range(1, 6)}}[domain]
        want = np.mean([top1[model, d, s] - top1["base", d, s] for s in (22, 37)])
        assert float(diff) == pytest.approx(want, abs=0.005) and images == "120" and seeds == "22, 37"
        low, high = (float(v) for v in interval.split("]")[0].strip("[").split(", "))
        assert low <= float(diff) <= high
        assert interval.endswith("n.s.") == (float(p) >= 0.05)
        if model == "better":
            assert float(p) < 0.01 and not interval.endswith("n.s.")
    relative = next(ln for ln in text.splitlines() if ln.startswith("| better | +"))
    assert relative.count("[") == 6  # each difference with its interval in the relative table
    assert "n.s." in text.split("## Relative to base")[1].split("##")[0]  # the twin's are not significant
    # the figures and the per-concept table
    for name in ("concepts_similarity.png", "concepts_similarity_relative.png"):
        assert (tmp_path / "report" / name).read_bytes()[:4] == b"\x89PNG"
    html = files["html"].read_text()
    assert "data:image/png;base64," in html and "Concept explorer" in html
    assert "http://" not in html and "https://" not in html and "<link" not in html  # opens with no network


def test_concepts_csv_is_the_direct_computation_from_the_stored_predictions(store, tmp_path):
    results, levels = store
    files = write_report(results, tmp_path / "report", baseline="base", levels=levels)
    lines = _csv(files["concepts"])
    assert len(lines) == 3 * 6 * 12  # models x domains x concepts
    import json

    sim = json.loads(levels.read_text())
    rows = [r for r in read_rows(results) if r["model"] == "better" and r["domain"] == "cog_l3"]
    preds = [read_row_predictions(results, r) for r in rows]
    for line in (ln for ln in lines if ln["model"] == "better" and ln["domain"] == "cog_l3"):
        c = preds[0].classes.index(line["wnid"])
        right = [p.top5[p.label == c, 0] == c for p in preds]
        assert float(line["top1"]) == pytest.approx(100 * np.mean(np.concatenate(right)), abs=1e-4)
        assert float(line["similarity"]) == pytest.approx(sim["similarity"][line["wnid"]], abs=1e-4)
        assert line["closest_seen"] == sim["closest_seen"][line["wnid"]] and line["level"] == "L3"
        assert int(line["images"]) == 10 and line["seeds"] == "2" and line["name"]
    taken = [ln for ln in lines if ln["model"] == "base" and ln["domain"] == "cog_l1"]
    assert all(ln["taken_for"] and 0 < float(ln["taken_for_share"]) <= 100 for ln in taken)  # the label-noise check
    assert all(not ln["similarity"] for ln in lines if ln["domain"] == "in1k")  # seen concepts: no similarity


def test_rows_without_predictions_are_named_and_left_out(tmp_path, wordnet):
    results, levels = simulated_results(tmp_path, {"base": 0.0, "old": 0.1}, seeds=(22,), legacy=("old",))
    files = write_report(results, tmp_path / "report", baseline="base", levels=levels)
    text = files["markdown"].read_text()
    assert "## Rows without stored predictions" in text
    assert "6 all-data row(s) have no stored test predictions and are left out of the concept analyses: " \
           "old/linear/cog_l1/shots=all/seed=22 (made before predictions were kept)" in text
    assert "| old | L3 | – | predictions of one model lacking |" in text
    assert "| old | " in text.split("## Relative to base")[1]  # its row-based figures are still there
    assert {ln["model"] for ln in _csv(files["concepts"])} == {"base"}


def test_the_report_refuses_predictions_that_are_not_their_rows(store, tmp_path, capsys):
    results, levels = store
    row = next(r for r in read_rows(results) if r["model"] == "twin" and r["domain"] == "cog_l4")
    other = next(r for r in read_rows(results) if r["model"] == "base" and r["domain"] == "cog_l4"
                 and r["seed"] == row["seed"])
    swapped = read_row_predictions(results, other)
    write_predictions(predictions_root(results), row["predictions"]["path"],
                      type(swapped)(swapped.top5, swapped.label, swapped.image, swapped.classes,
                                    {**swapped.meta, "model": "twin"}))
    assert main(["report", "--results", str(results), "--out", str(tmp_path / "r"), "--levels", str(levels)]) == 2
    err = capsys.readouterr().err
    assert "does not match its row twin/linear/cog_l4/None/" in err and row["predictions"]["path"] in err


def test_report_command_writes_html_unless_told_not_and_is_seeded(store, tmp_path, capsys):
    results, levels = store
    common = ["report", "--results", str(results), "--baseline", "base", "--levels", str(levels)]
    assert main([*common, "--out", str(tmp_path / "a"), "--no-html"]) == 0
    assert not (tmp_path / "a" / "report.html").exists() and (tmp_path / "a" / "concepts.csv").is_file()
    assert main([*common, "--out", str(tmp_path / "b")]) == 0  # report.html by default, as cog-pl run writes it
    assert main([*common, "--out", str(tmp_path / "c"), "--seed", "5"]) == 0
    out = capsys.readouterr().out
    assert f"page:   {tmp_path / 'c' / 'report.html'}" in out
    a, b, c = ((tmp_path / x / "report.md").read_text() for x in "abc")
    assert a == b  # the same seed, the same intervals
    assert a != c and a.split("## Concepts")[0].split("## Relative")[0] == c.split("## Concepts")[0].split(
        "## Relative")[0]  # another seed moves only the intervals


def test_similarity_from_wordnet_without_a_level_file(wordnet):
    from cog_pl import resources
    from cog_pl.wordnet.similarity import similarity_to_set

    wnids = level_concepts(3)["L4"]
    info = concept_info(None, wnids)
    sim, closest = similarity_to_set(wordnet, wnids, resources.in1k_wnids())
    assert info.measure == "lin" and "Lin similarity to the 1000 IN-1K concepts" in info.source
    assert [info.similarity[w] for w in wnids] == pytest.approx(list(sim))
    assert [info.closest[w] for w in wnids] == [resources.in1k_wnids()[i] for i in closest]


def test_a_report_reads_the_similarity_source_its_store_records_and_removes_stale_files(store, tmp_path):
    """Issue 37: without --levels, `cog-pl report` takes the similarity source the results store records (as
    `cog-pl run` records its benchmark file's), never WordNet's similarity to IN-1K in its place: the same report as
    given the file. Report files it does not write are removed; report.html is written by default. A run recording
    another source into the store is refused in one line."""
    from cog_pl.errors import CogError
    from cog_pl.report.concepts import SIMILARITY_INFO, record_similarity_source
    from cog_pl.results import read_info

    results, levels = store
    given = write_report(results, tmp_path / "given", baseline="base", levels=levels)
    assert read_info(results, SIMILARITY_INFO) is None
    record_similarity_source(results, levels)
    assert read_info(results, SIMILARITY_INFO)["file"] == str(levels.resolve())
    folder = tmp_path / "report"
    folder.mkdir()
    (folder / "methods.png").write_bytes(b"an older report's plot of a method no longer in the store")
    (folder / "report.html").write_text("an older page")
    assert main(["report", "--results", str(results), "--baseline", "base", "--out", str(folder)]) == 0
    text = (folder / "report.md").read_text()
    assert text == given["markdown"].read_text() and f"lin similarity to the seen concepts ({levels.name})" in text
    assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in given.values())
    assert "html" in given and (folder / "report.html").read_text() != "an older page"
    record_similarity_source(results, levels)  # the same source again: nothing to refuse
    with pytest.raises(CogError, match=f"results file {results} holds rows whose concept similarity comes from "
                                       f"{levels.resolve()} \\(60 concepts\\); this run's from WordNet, Lin "
                                       "similarity to the 1000 IN-1K concepts: give this run another --out"):
        record_similarity_source(results, None)
