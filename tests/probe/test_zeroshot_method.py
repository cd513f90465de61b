"""The ``zeroshot`` probe method: a tiny open_clip model of random weights, saved as a file, through the whole path
(its stores' meta -> the text tower read from the same file -> the concepts' names and prompts -> the classifier ->
a row with predictions), ``cog-pl run --methods linear zeroshot``, resuming, and the refusals."""

from __future__ import annotations

import numpy as np
import pytest
from run_stages import probe_stage

from cog_pl import resources
from cog_pl.errors import CogError
from cog_pl.evaluate import get_method, list_methods
from cog_pl.evaluate.runner import run_on_stores
from cog_pl.results import NO_SEED, append_row, delete_row, read_rows, row_key
from cog_pl.results.predictions import read_row_predictions

open_clip = pytest.importorskip("open_clip", reason="zero-shot needs open_clip_torch (the vlm extra)")
from open_clip_fixtures import SEVEN, reference_classifier, tiny_open_clip  # noqa: E402
from open_clip_fixtures import write_pair as write_store_pair  # noqa: E402

NAME = "cog-pl-zs-tiny"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_open_clip(tmp_path_factory.mktemp("open_clip"), NAME, seed=5)


def write_pair(root, weights, wnids, features_of, *, arch=f"open_clip:{NAME}", per_class=(4, 3), seed=0):
    return write_store_pair(root, weights, wnids, features_of, arch=arch, per_class=per_class, seed=seed)


def _lemma(wnid: str) -> str:
    return resources.concept_name(wnid).split(", ")[0]


@pytest.fixture(scope="module")
def wnids():
    return list(resources.in1k_wnids()[:4])


def test_zeroshot_is_registered_after_the_linear_probe():
    assert list_methods()[:3] == ("linear", "linear_text_init", "zeroshot")  # the text-initialised probe 2nd
    assert get_method("zeroshot").title == "zero-shot"


def _zeroshot(root, results, *, names=None, templates=None, check_only=False, **kw):
    """The zero-shot method's grid on the stores at ``root`` (its options: ``names``, ``templates``)."""
    options = {k: v for k, v in (("names", names), ("templates", templates)) if v is not None}
    return run_on_stores("zeroshot", root, results, options=options, check_only=check_only, **kw)


def test_zeroshot_row_of_an_open_clip_model_read_from_its_file(tiny, wnids, tmp_path):
    path, model = tiny
    ref = reference_classifier(model, NAME, [_lemma(w) for w in wnids], SEVEN)
    # each test image lies on its concept's text embedding, nudged: a right classifier gets them all
    root = write_pair(tmp_path / "feats" / "cog_l1", path, wnids,
                      lambda y, rng: ref.T.numpy()[y] + 0.01 * rng.normal(size=(len(y), ref.shape[0])))
    results = tmp_path / "r.sqlite"
    rows = _zeroshot(root, results, model="m", domain="cog_l1", seeds=(22, 37), shots=(None, 2),
                      names="lemma", templates="openai7")
    assert len(rows) == 1
    row = read_rows(results)[0]
    assert (row["method"], row["shots"], row["seed"], row["seedless"]) == ("zeroshot", None, NO_SEED, True)
    assert row["test_top1"] == 100.0 and row["test_rows"] == 12
    assert row["zeroshot"]["names"] == "lemma" and row["zeroshot"]["templates"] == "openai7"
    assert row["text_tower"]["model"] == f"open_clip:{NAME}" and row["text_tower"]["weights"] == str(path)
    preds = read_row_predictions(results, row)
    assert preds.classes == tuple(wnids) and list(preds.image) == list(range(100, 112))
    assert (preds.top5[:, 0] == preds.label).all()
    # the classifier is cached: what it holds is the reference's
    cached = list((tmp_path / "r.zeroshot" / "m" / "cog_l1").glob("*.npy"))
    assert len(cached) == 1 and np.allclose(np.load(cached[0]), ref.numpy(), atol=1e-5)

    # resumed: the row of the same identity is skipped
    assert _zeroshot(root, results, model="m", domain="cog_l1", seeds=(22,), names="lemma",
                      templates="openai7") == []
    # other names or templates: refused in one line, nothing replaced
    with pytest.raises(CogError, match=r"^\S*r.sqlite: row m/zeroshot/cog_l1/shots=all/seed=none was made with "
                                       r"names=lemma, this run has names=lemmas; pass --overwrite to replace it$"):
        _zeroshot(root, results, model="m", domain="cog_l1", seeds=(22,), names="lemmas", templates="openai7")
    with pytest.raises(CogError, match="was made with templates=openai7, templates_sha256=.*this run has "
                                       "templates=openai80"):
        _zeroshot(root, results, model="m", domain="cog_l1", seeds=(22,), names="lemma", templates="openai80",
                  check_only=True)
    assert read_rows(results) == [row]
    # --overwrite: made again with the new names, the classifier encoded again (a new cache entry)
    again = _zeroshot(root, results, model="m", domain="cog_l1", seeds=(22,), names="lemmas", templates="openai7",
                       overwrite=True)
    assert len(again) == 1 and [r["zeroshot"]["names"] for r in read_rows(results)] == ["lemmas"]
    assert not again[0]["classifier"]["cached"]


def test_zeroshot_row_is_made_once_whatever_the_seeds(tiny, wnids, tmp_path):
    path, _ = tiny
    results = tmp_path / "r.sqlite"
    for domain in ("cog_l1", "cog_l2"):
        root = write_pair(tmp_path / "feats" / domain, path, wnids, lambda y, rng: rng.normal(size=(len(y), 32)))
        first = _zeroshot(root, results, model="m", domain=domain, seeds=(22, 37), names="lemma",
                           templates="openai7")
        again = _zeroshot(root, results, model="m", domain=domain, seeds=(5, 6), names="lemma", templates="openai7")
        assert len(first) == 1 and again == []  # a run with another first seed finds the row and skips it
    assert [(r["domain"], r["seed"]) for r in read_rows(results)] == [("cog_l1", NO_SEED), ("cog_l2", NO_SEED)]

    # a file of an older cog-pl: the row keyed by its run's first seed (seed_is_key) is the domain's row
    old = {k: v for k, v in read_rows(results, domain="cog_l1")[0].items() if k != "seedless"}
    delete_row(results, row_key(old))
    append_row(results, {**old, "seed": 22, "seed_is_key": True})
    root = tmp_path / "feats" / "cog_l1"
    assert _zeroshot(root, results, model="m", domain="cog_l1", seeds=(5,), names="lemma", templates="openai7") == []
    assert len(read_rows(results, domain="cog_l1")) == 1
    # --overwrite makes it again under the seedless key and drops the older one
    _zeroshot(root, results, model="m", domain="cog_l1", seeds=(5,), names="lemma", templates="openai7",
               overwrite=True)
    assert [r["seed"] for r in read_rows(results, domain="cog_l1")] == [NO_SEED]


def test_zeroshot_refuses_a_model_without_a_text_tower(tmp_path, wnids):
    root = write_pair(tmp_path / "cog_l1", "r50.pth", wnids, lambda y, rng: rng.normal(size=(len(y), 8)),
                      arch="resnet50")
    with pytest.raises(CogError, match=r"^zero-shot needs a text tower and the features of m \(architecture "
                                       r"resnet50\) have none; the models with one: clip.*open_clip:<name>$"):
        _zeroshot(root, tmp_path / "r.sqlite", seeds=(0,))


def test_run_methods_linear_zeroshot(tiny, wnids, tmp_path):
    from cog_pl.cli.main import build_parser
    from cog_pl.cli.run import _config
    from cog_pl.pipeline import ExtractOptions

    path, model = tiny

    def config(*extra):
        args = build_parser().parse_args(["run", "--model", f"open_clip:{NAME}", "--checkpoint", str(path),
                                          "--in21k-root", str(tmp_path), "--domains", "cog_l1", "cog_l2",
                                          "--seeds", "22", "--shots", "all", "--trials", "2", "--epochs", "2",
                                          "--probe-device", "cpu", "--probe-precision", "32-true",
                                          "--out", str(tmp_path / "out"), *extra])
        return _config(args, ExtractOptions(), args.methods, model=args.model[0], checkpoint=str(path), in1k_root=None,
                       in21k_root=args.in21k_root, out=args.out, domains=tuple(args.domains), benchmark=None,
                       check=False, overwrite=False)

    cfg = config("--methods", "linear", "zeroshot", "--zeroshot-templates", "openai7")
    assert cfg.methods == ("linear", "zeroshot") and cfg.method_options["zeroshot"].templates == "openai7"
    out = tmp_path / "out"
    ref = reference_classifier(model, NAME, [_lemma(w) for w in wnids], SEVEN)
    for i, domain in enumerate(cfg.domains):
        write_pair(out / "features" / "m" / domain, path, wnids, lambda y, rng: ref.T.numpy()[y] + 0.3 * rng.normal(
            size=(len(y), ref.shape[0])), per_class=(12, 4), seed=i)
    assert probe_stage(cfg, out, "m") == 2 * 2  # methods x domains
    assert sorted((r["method"], r["domain"]) for r in read_rows(out / "results.sqlite")) == [
        ("linear", "cog_l1"), ("linear", "cog_l2"), ("zeroshot", "cog_l1"), ("zeroshot", "cog_l2")]
    assert probe_stage(cfg, out, "m") == 0  # resumed
    from cog_pl.report.tables import summarize
    from cog_pl.report.zeroshot import zeroshot_markdown

    stored = read_rows(out / "results.sqlite")
    section = zeroshot_markdown(summarize(stored), stored)
    top1 = {(r["method"], r["domain"]): r["test_top1"] for r in stored}
    assert f"| m | zero-shot | {top1['zeroshot', 'cog_l1']:.2f} | {top1['zeroshot', 'cog_l2']:.2f} |" in section
    ratio = 100 * top1["zeroshot", "cog_l1"] / top1["linear", "cog_l1"]
    assert f"| m | ratio (%) | {ratio:.1f} |" in section
    assert "| m | L1, L2 | lemma | openai7 (7 templates, sha256 " in section
    with pytest.raises(CogError, match=r"^zeroshot needs a text tower and resnet50 has none; the models with one: "
                                       r".*\(drop zeroshot from --methods\)$"):
        config("--methods", "zeroshot").__class__(model="resnet50", in1k_root=None, in21k_root=str(tmp_path),
                                                  domains=("cog_l1",), methods=("zeroshot",), random_weights=True)
    with pytest.raises(CogError, match="^--zeroshot-names: set for a run without zeroshot or linear_text_init; add "
                                       "zeroshot to --methods$"):
        config("--zeroshot-names", "lemmas")
    with pytest.raises(CogError, match="unknown name scheme 'lema'"):
        config("--methods", "zeroshot", "--zeroshot-names", "lema")
