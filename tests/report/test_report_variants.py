"""The level-variants table and plot of the report, computed from result rows whose domains name the variant."""

from __future__ import annotations

import pytest

from cog_pl.protocol import split_domain, variant_domain
from cog_pl.report.build import write_report
from cog_pl.report.tables import domain_label, domains_of, summarize
from cog_pl.report.variants import OFFICIAL, variant_lines, variants_markdown
from cog_pl.results import append_row

# top-1 per (levels by, level index 1..5, seed)
OFFICIAL_TOP1 = {22: [80, 75, 70, 65, 60], 37: [82, 76, 71, 66, 61]}
WUP_TOP1 = {22: [78, 74, 71, 68, 66], 37: [77, 75, 70, 69, 67]}
TEXT_TOP1 = {22: [72, 71, 70, 69, 68]}


def _row(model, domain, seed, top1, shots=None):
    return {"model": model, "domain": domain, "shots": shots, "seed": seed, "test_top1": float(top1),
            "test_top5": min(100.0, top1 + 10.0)}


def _rows():
    rows = []
    for model in ("dino", "resnet50"):
        for seed, values in OFFICIAL_TOP1.items():
            rows.append(_row(model, "in1k", seed, 90))
            rows += [_row(model, f"cog_l{i}", seed, v) for i, v in enumerate(values, 1)]
            rows += [_row(model, f"cog_l{i}", seed, v / 2, shots=4) for i, v in enumerate(values, 1)]
    for name, table in (("wup", WUP_TOP1), ("text", TEXT_TOP1)):
        for seed, values in table.items():
            rows += [_row("dino", variant_domain(f"cog_l{i}", name), seed, v) for i, v in enumerate(values, 1)]
    return rows


def test_variant_domains_are_named_labelled_and_ordered():
    assert variant_domain("cog_l3", "wup") == "cog_l3@wup" and split_domain("cog_l3@wup") == ("cog_l3", "wup")
    assert split_domain("in1k") == ("in1k", None) and domain_label("cog_l3@wup") == "L3 (wup)"
    with pytest.raises(ValueError, match="'in1k' is not one of cog_l1"):
        variant_domain("in1k", "wup")
    with pytest.raises(ValueError, match="variant name 'a/b'"):
        variant_domain("cog_l1", "a/b")
    cells = summarize(_rows())
    assert domains_of(cells) == ["in1k", *(f"cog_l{i}" for i in range(1, 6)),
                                 *(f"cog_l{i}@text" for i in range(1, 6)), *(f"cog_l{i}@wup" for i in range(1, 6))]


def test_variant_lines_per_measure_with_a_drop_paired_by_seed():
    lines = variant_lines(_rows())
    assert [(ln.model, ln.measure) for ln in lines] == [("dino", OFFICIAL), ("dino", "wup"), ("dino", "text")]
    official, wup, text = lines
    assert official.levels["L1"].mean == pytest.approx(81) and official.levels["L1"].std == pytest.approx(1.4142, 1e-4)
    assert wup.levels["L5"].mean == pytest.approx(66.5) and wup.levels["L3"].seeds == 2
    assert official.drop.mean == pytest.approx(20.5) and official.drop.std == pytest.approx(0.7071, abs=1e-4)
    assert wup.drop.mean == pytest.approx(11.0) and wup.drop.std == pytest.approx(1.4142, abs=1e-4)
    assert (text.drop.mean, text.drop.std, text.drop.seeds) == (4.0, 0.0, 1)
    table = variants_markdown(lines)
    assert "| model | levels by | L1 | L2 | L3 | L4 | L5 | L1−L5 | seeds |" in table
    wup_line = ("| dino | wup | 77.50 ± 0.71 | 74.50 ± 0.71 | 70.50 ± 0.71 | 68.50 ± 0.71 | 66.50 ± 0.71 "
                "| 11.00 ± 1.41 | 2 |")
    assert wup_line in table
    assert "resnet50" not in table  # no variant rows: nothing to compare


def test_report_has_the_variants_table_and_plot(tmp_path):
    results = tmp_path / "results.sqlite"
    for row in _rows():
        append_row(results, row)
    files = write_report(results, tmp_path / "report")
    text = files["markdown"].read_text()
    assert "## Level variants: top-1 (%) per level for each similarity measure" in text
    assert "| dino | lin (official) | 81.00 ± 1.41 |" in text and "| dino | text | 72.00 (n = 1) |" in text  # one seed
    # the main table keeps the official domains, and the L1-L5 drop (no slope: these rows have no predictions)
    assert "| model | IN-1K | L1 | L2 | L3 | L4 | L5 | L1−L5 |\n" in text
    assert "### L1 (wup)" not in text and "### L1\n" in text  # no few-shot rows of the variants
    assert files["variants"].read_bytes()[:4] == b"\x89PNG" and files["variants"].stat().st_size > 10_000
    assert "cog_l3@wup,All,70.5000" in files["csv"].read_text()
    plain = tmp_path / "plain.sqlite"
    for row in _rows():
        if "@" not in row["domain"]:
            append_row(plain, row)
    files = write_report(plain, tmp_path / "plain")
    assert "variants" not in files and "Level variants" not in files["markdown"].read_text()


def test_fine_tuned_rows_on_the_levels_stay_out_of_the_variants_table():
    tuned = [{**_row("dino", f"cog_l{i}", 22, 99.0), "method": "finetune"} for i in range(1, 6)]
    assert variant_lines([*_rows(), *tuned]) == variant_lines(_rows())
