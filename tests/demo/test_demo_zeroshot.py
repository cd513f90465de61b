"""``cog-pl demo --zeroshot``: the demo's tiny CLIP (``demo_clip``) trained on the seen concepts' captions, then its
zero-shot beside its linear probe on every domain in the demo's one report (issue 41, Must show)."""

from __future__ import annotations

import pytest

from cog_pl.cli.main import main
from cog_pl.results import read_rows

PER_LEVEL = 3  # every evaluated domain, IN-1K too, has as many concepts (cog_pl.demo.domains): chance is 1 in 3
TINY = ["--seen", "8", "--per-level", str(PER_LEVEL), "--train-per-concept", "24", "--test-per-concept", "6",
        "--pretrain-epochs", "1", "--ssl-epochs", "0", "--trials", "2", "--epochs", "2", "--seeds", "22",
        "--shots", "all", "--variants", "--no-finetune", "--no-html", "--no-noise-predictions"]


@pytest.mark.slow  # a whole demo: two pretrainings, two extractions, the probes, zero-shot, the report
def test_the_demo_shows_the_tiny_clips_zero_shot_beside_its_linear_probe(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), *TINY, "--zeroshot", "--clip-epochs", "30"]) == 0
    assert (out / "data" / "demo_clip.pt").is_file()
    rows = read_rows(out / "results.sqlite")
    clip = [r for r in rows if "demo_clip" in r["model"]]
    model = clip[0]["model"]
    domains = {r["domain"] for r in rows if r["method"] == "linear" and r["model"] != model}
    assert len(domains) == 6
    assert {(r["method"], r["domain"]) for r in clip} == {(m, d) for m in ("linear", "zeroshot") for d in domains}
    zeroshot = {r["domain"]: r for r in clip if r["method"] == "zeroshot"}
    assert {(r["zeroshot"]["names"], r["zeroshot"]["templates"]) for r in zeroshot.values()} == {
        ("demo_ancestors", "openai7")}
    assert zeroshot["in1k"]["test_top1"] > 1.5 * 100 / PER_LEVEL, zeroshot  # above chance, loosely
    text = (out / "report" / "report.md").read_text()
    section = text[text.index("## Zero-shot beside the linear probe"):]
    assert f"| {model} | zero-shot | " in section and f"| {model} | linear probe | " in section
    assert "ratio (%)" in section and "demo_ancestors" in section and "openai7" in section
    assert "demo_cnn" in text  # the baseline in the same report


def test_clip_epochs_without_zeroshot_is_refused(tmp_path, capsys):
    assert main(["demo", "--out", str(tmp_path / "demo"), "--clip-epochs", "3"]) == 2
    assert "--clip-epochs: set for a demo without the tiny CLIP; add --zeroshot" in capsys.readouterr().err
    assert not (tmp_path / "demo").exists()  # refused before any work
