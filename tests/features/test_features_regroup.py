"""Level-variant stores regrouped from real official-level stores: every row kept, concepts moved, splits kept."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from cog_pl.cli.main import main
from cog_pl.features import regroup, store
from cog_pl.features.store import StoreError, make_meta, open_store, write_store
from cog_pl.levels import variants
from cog_pl.resources import LEVELS, official_levels

PER_LEVEL = 4
SPLIT_FLAG = {"train": 0.0, "test": 1.0}


def _concepts() -> dict[str, list[str]]:
    return {lvl: sorted(official_levels()[lvl])[:PER_LEVEL] for lvl in LEVELS}


def write_level_stores(root, concepts=None, model="m", no_test=(), dim=4, **meta_fields):
    """Stores ``root/<model>/cog_l<i>/{train,test}`` whose features say which concept, split and image a row is:
    ``[concept id, split flag, dataset index, 7]`` (small integers, exact in float16)."""
    concepts = concepts or _concepts()
    everyone = sorted(w for ws in concepts.values() for w in ws)
    rng = np.random.default_rng(0)
    for i, lvl in enumerate(LEVELS, 1):
        classes = sorted(concepts[lvl])
        for split in ("train", "test"):
            n = {w: 3 + k % 3 if split == "train" else 0 if w in no_test else 2 for k, w in enumerate(classes)}
            labels = np.repeat(np.arange(len(classes)), [n[w] for w in classes])
            order = rng.permutation(len(labels))
            labels = labels[order]
            index = 100 * i + np.arange(len(labels))[order]  # the image's row in the level's dataset
            feats = np.zeros((len(labels), dim), np.float32)
            feats[:, 0] = [everyone.index(classes[y]) for y in labels]
            feats[:, 1], feats[:, 2], feats[:, 3] = SPLIT_FLAG[split], index, 7
            meta = make_meta(**{**dict(model=model, weights_sha256="ab" * 32, domain=f"cog_l{i}", split=split,
                                       num_classes=len(classes), classes=classes, transform={"crop": 32},
                                       level_file_sha256="cd" * 32, split_sha256=f"split-of-L{i}"), **meta_fields})
            write_store(root / model / f"cog_l{i}" / split, feats, labels, index, meta)
    return everyone


def write_level_file(path, ranking, measure="toy"):
    blocks = variants.equal_blocks(ranking)
    content = {"format": "cog-pl-levels", "version": 1, "levels": {k: sorted(v) for k, v in blocks.items()},
               "ranking": list(ranking), "similarity": {w: -float(k) for k, w in enumerate(ranking)},
               "settings": {"protocol": {"measure": measure, "lcs": "deepest"}}}
    path.write_text(json.dumps(content))
    return path


def _permuted(everyone, step=7):
    return [everyone[(step * k) % len(everyone)] for k in range(len(everyone))]


def _rows(store_path, everyone):
    """(wnid, split flag, dataset index) of every row, checking the label names the row's concept."""
    s = open_store(store_path)
    out = []
    for k, (x, y) in enumerate(zip(np.asarray(s.features, np.float32), s.labels)):
        wnid = everyone[int(x[0])]
        assert s.meta["classes"][y] == wnid
        assert int(s.index[k]) == int(x[2])  # every row still names its image
        out.append((wnid, float(x[1]), int(x[2])))
    return out


@pytest.fixture
def stores(tmp_path):
    return tmp_path / "features", write_level_stores(tmp_path / "features")


def test_select_rows_relabels_in_the_new_order():
    rows, labels = regroup.select_rows(np.array([0, 2, 1, 2, 0]), ["a", "b", "c"], ["c", "a"])
    assert rows.tolist() == [0, 1, 3, 4] and labels.tolist() == [1, 0, 0, 1]


def test_regroup_keeps_every_row_and_moves_concepts_to_their_variant_level(stores, tmp_path):
    root, everyone = stores
    ranking = _permuted(everyone)
    levels_file = write_level_file(tmp_path / "toy.json", ranking)
    result = regroup.regroup_variant(root, "m", level_file=levels_file)
    assert result.variant == "toy" and len(result.written) == 10 and not result.skipped
    assert result.moves.sum() == 20 and result.moves.sum(axis=0).tolist() == [4] * 5
    assert np.trace(result.moves) < 20  # the toy ranking moves concepts
    sha = hashlib.sha256(result.level_file.read_bytes()).hexdigest()
    for split, flag in SPLIT_FLAG.items():
        source = [r for i in range(1, 6) for r in _rows(root / "m" / f"cog_l{i}" / split, everyone)]
        regrouped = []
        for i, lvl in enumerate(LEVELS, 1):
            path = root / "m" / f"cog_l{i}@toy" / split
            rows = _rows(path, everyone)
            want = sorted(ranking[(i - 1) * 4: i * 4])
            assert sorted({w for w, _, _ in rows}) == want  # the concepts of the variant's level, no other
            assert all(f == flag for _, f, _ in rows)  # test rows stay test rows, train rows train rows
            meta = open_store(path).meta
            assert (meta["domain"], meta["split"], meta["classes"], meta["num_classes"]) == (
                f"cog_l{i}@toy", split, want, 4)
            assert meta["level_file_sha256"] == sha and meta["variant"]["level"] == lvl
            assert meta["variant"]["source_level_file"]["sha256"] == hashlib.sha256(
                levels_file.read_bytes()).hexdigest()
            assert meta["model"] == "m" and meta["weights_sha256"] == "ab" * 32 and "split_sha256" not in meta
            assert sum(s["rows"] for s in meta["regrouped_from"]) == len(rows)
            assert {s["split_sha256"] for s in meta["regrouped_from"]} <= {f"split-of-L{k}" for k in range(1, 6)}
            regrouped += rows
        assert sorted(regrouped) == sorted(source)  # every row of every concept, once


def test_a_subset_of_the_level_file_is_recut_into_five_equal_blocks(stores, tmp_path):
    root, everyone = stores
    extra = sorted(official_levels()["L3"])[-5:]  # ranked by the file, without features
    ranking = _permuted(everyone)
    for k, w in enumerate(extra):
        ranking.insert(3 * k + 1, w)
    result = regroup.regroup_variant(root, "m", level_file=write_level_file(tmp_path / "big.json", ranking))
    available = [w for w in ranking if w in set(everyone)]
    for i in range(1, 6):
        meta = open_store(root / "m" / f"cog_l{i}@toy" / "test").meta
        assert meta["classes"] == sorted(available[(i - 1) * 4: i * 4])
        assert "cut into five blocks of 4" in meta["variant"]["concepts"]
    saved = json.loads(result.level_file.read_text())
    assert saved["ranking"] == available and set(saved["similarity"]) == set(everyone)


def test_finished_stores_are_skipped_and_a_killed_regroup_resumes(stores, tmp_path, monkeypatch):
    root, everyone = stores
    levels_file = write_level_file(tmp_path / "toy.json", _permuted(everyone))
    finish, calls = store.StoreWriter.finish, []

    def dies_on_the_third(self, meta):
        calls.append(self.path)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return finish(self, meta)

    monkeypatch.setattr(store.StoreWriter, "finish", dies_on_the_third)
    with pytest.raises(KeyboardInterrupt):
        regroup.regroup_variant(root, "m", level_file=levels_file)
    monkeypatch.undo()
    assert not (root / "m" / "cog_l2@toy" / "train").exists()  # the killed store never looks finished
    assert not list((root / "m" / "cog_l2@toy").glob(".*partial"))
    stamp = (root / "m" / "cog_l1@toy" / "test" / "features.npy").stat().st_mtime_ns
    again = regroup.regroup_variant(root, "m", level_file=levels_file)
    assert len(again.skipped) == 2 and len(again.written) == 8
    assert (root / "m" / "cog_l1@toy" / "test" / "features.npy").stat().st_mtime_ns == stamp
    assert len(regroup.regroup_variant(root, "m", level_file=levels_file).skipped) == 10
    other = write_level_file(tmp_path / "other.json", _permuted(everyone, step=3))
    saved = root / "m" / "variants" / "toy.json"
    before = saved.read_bytes()
    with pytest.raises(StoreError, match="regrouped from another level file"):
        regroup.regroup_variant(root, "m", level_file=other)
    assert saved.read_bytes() == before  # the refused run leaves the variant as it was: it still resumes
    assert len(regroup.regroup_variant(root, "m", level_file=levels_file).skipped) == 10
    redone = regroup.regroup_variant(root, "m", level_file=other, overwrite=True)
    assert len(redone.written) == 10
    assert open_store(root / "m" / "cog_l1@toy" / "train").meta["classes"] == sorted(_permuted(everyone, 3)[:4])


def test_a_stale_partial_store_of_another_shape_is_discarded(stores, tmp_path):
    root, everyone = stores
    out = root / "m" / "cog_l1@toy" / "train"
    stale = store.StoreWriter(out, 3, 2)  # a killed regroup of other stores: another shape
    stale.write(np.arange(1), np.ones((1, 2)), np.zeros(1))
    del stale
    ranking = _permuted(everyone)
    result = regroup.regroup_variant(root, "m", level_file=write_level_file(tmp_path / "toy.json", ranking))
    assert len(result.written) == 10 and not list(out.parent.glob(".*partial"))
    assert sorted({w for w, _, _ in _rows(out, everyone)}) == sorted(ranking[:4])


def test_saved_level_file_is_reused_not_recomputed(stores, monkeypatch):
    root, everyone = stores
    ranking, calls = _permuted(everyone), []

    def toy_rerank(concepts, measure, lcs="deepest", onto=None, seen=None, description=None):
        calls.append(measure)
        assert sorted(concepts) == everyone
        return {"format": "cog-pl-levels", "version": 1,
                "levels": {k: sorted(v) for k, v in variants.equal_blocks(ranking).items()}, "ranking": ranking,
                "settings": {"protocol": {"measure": measure, "lcs": lcs}, "concepts": description}}

    monkeypatch.setattr(variants, "rerank", toy_rerank)
    first = regroup.regroup_variant(root, "m", measure="wup")
    assert calls == ["wup"] and len(first.written) == 10

    def refuses(*args, **kwargs):
        raise AssertionError("the ranking was computed again")

    monkeypatch.setattr(variants, "rerank", refuses)
    saved = first.level_file.read_bytes()
    again = regroup.regroup_variant(root, "m", measure="wup")
    assert len(again.skipped) == 10 and first.level_file.read_bytes() == saved
    assert again.moves.tolist() == first.moves.tolist()
    with pytest.raises(AssertionError, match="computed again"):  # another subsumer rule is another ranking
        regroup.regroup_variant(root, "m", measure="wup", lcs="max-ic")


def test_saved_or_given_level_file_without_levels_is_named(stores, tmp_path):
    root, everyone = stores
    (root / "m" / "variants").mkdir()
    (root / "m" / "variants" / "wup.json").write_text(json.dumps({"format": "cog-pl-levels", "ranking": []}))
    with pytest.raises(ValueError, match=r"variants/wup\.json has no 'levels' mapping .*--overwrite"):
        regroup.regroup_variant(root, "m", measure="wup")
    given = tmp_path / "nolevels.json"
    given.write_text(json.dumps({"ranking": everyone}))
    with pytest.raises(ValueError, match=r"nolevels\.json has no 'levels' mapping"):
        regroup.regroup_variant(root, "m", level_file=given)


def test_imported_stores_origin_is_not_inherited(tmp_path):
    everyone = write_level_stores(tmp_path, source={"imported_from": "/x/X_Y.pth"}, benchmark="bench",
                                  arch="resnet50", precision="32")
    regroup.regroup_variant(tmp_path, "m", level_file=write_level_file(tmp_path / "t.json", _permuted(everyone)))
    meta = open_store(tmp_path / "m" / "cog_l3@toy" / "test").meta
    assert "source" not in meta and "benchmark" not in meta  # they describe the source stores, not this one
    source = open_store(tmp_path / "m" / "cog_l1" / "test").meta
    for key in ("format", "version", "model", "weights_sha256", "transform", "versions", "arch", "precision"):
        assert meta[key] == source[key]
    assert meta["variant"]["regrouped_by"].startswith("cog_pl ")
    assert {s["domain"] for s in meta["regrouped_from"]} <= {f"cog_l{i}" for i in range(1, 6)}


def test_stores_regrouped_from_other_features_are_refused(stores, tmp_path):
    root, everyone = stores
    levels_file = write_level_file(tmp_path / "toy.json", _permuted(everyone))
    regroup.regroup_variant(root, "m", level_file=levels_file)
    for change in ({"transform": {"crop": 77}}, {"weights_sha256": "ef" * 32}):  # extracted again, another way
        for i in range(1, 6):
            for split in ("train", "test"):
                s = open_store(root / "m" / f"cog_l{i}" / split)
                write_store(s.path, s.features, s.labels, s.index, {**s.meta, **change}, overwrite=True)
        with pytest.raises(StoreError, match=f"cog_l1@toy/train was regrouped from other features than the stores.*"
                                             f"differ in {next(iter(change))}"):
            regroup.regroup_variant(root, "m", level_file=levels_file)
        redone = regroup.regroup_variant(root, "m", level_file=levels_file, overwrite=True)
        assert len(redone.written) == 10
        key, value = next(iter(change.items()))
        assert open_store(root / "m" / "cog_l5@toy" / "test").meta[key] == value


def test_missing_stores_and_concepts_are_named(stores, tmp_path):
    root, everyone = stores
    ranking = _permuted(everyone)
    other = sorted(official_levels()["L5"])[-1]
    missing = write_level_file(tmp_path / "short.json", [other if w == everyone[6] else w for w in ranking])
    with pytest.raises(ValueError, match=f"short.json: 1 concept.* not in its ranking, e.g. {everyone[6]}"):
        regroup.regroup_variant(root, "m", level_file=missing)
    (root / "m" / "cog_l4" / "test" / "meta.json").unlink()
    with pytest.raises(StoreError, match=r"cog_l4/test: no complete feature store"):
        regroup.regroup_variant(root, "m", level_file=write_level_file(tmp_path / "ok.json", ranking))


def test_a_concept_without_test_rows_is_named(tmp_path):
    lost = _concepts()["L3"][1]
    everyone = write_level_stores(tmp_path, no_test=(lost,))
    with pytest.raises(StoreError, match=f"concept {lost} has no test rows in .*cog_l3/test"):
        regroup.regroup_variant(tmp_path, "m", level_file=write_level_file(tmp_path / "t.json", everyone))


def test_stores_of_another_model_are_refused(stores, tmp_path):
    root, everyone = stores
    for split in ("train", "test"):  # a whole level of other weights (one split alone: refused as a pair)
        s = open_store(root / "m" / "cog_l2" / split)
        meta = {**s.meta, "weights_sha256": "ef" * 32}
        write_store(root / "m" / "cog_l2" / split, s.features, s.labels, s.index, meta, overwrite=True)
    with pytest.raises(StoreError, match="weights_sha256=.*a variant regroups the features of one model"):
        regroup.regroup_variant(root, "m", level_file=write_level_file(tmp_path / "t.json", everyone))


def test_wordnet_measure_reranks_the_concepts_that_have_features(stores, onto):
    root, everyone = stores
    result = regroup.regroup_variant(root, "m", measure="wup", onto=onto)
    expected = variants.rerank(everyone, "wup", onto=onto)["levels"]
    for i, lvl in enumerate(LEVELS, 1):
        meta = open_store(root / "m" / f"cog_l{i}@wup" / "train").meta
        assert meta["classes"] == expected[lvl] and meta["variant"]["measure"] == "wup"
        assert "the 20 concepts with features, re-ranked by wup" in meta["variant"]["concepts"]
    assert json.loads(result.level_file.read_text())["levels"] == expected
    lin = regroup.regroup_variant(root, "m", measure="lin", onto=onto)
    assert np.trace(lin.moves) == 20  # Lin re-ranks any sample of the official levels into its own levels


def test_regroup_command(stores, tmp_path, capsys):
    root, everyone = stores
    levels_file = write_level_file(tmp_path / "toy.json", _permuted(everyone))
    args = ["features", "regroup", "--features-root", str(root), "--model", "m", "--levels", str(levels_file)]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert text.count("wrote ") == 10 and "level of the stores (rows)" in text and "--domain cog_l1@toy" in text
    assert main(args) == 0 and capsys.readouterr().out.count("skipped ") == 10
    assert main(["features", "regroup", "--features-root", str(tmp_path / "none"), "--model", "m",
                 "--measure", "wup"]) == 2
    assert "no complete feature store" in capsys.readouterr().err
    assert main([*args, "--lcs", "max-ic"]) == 2
    assert "error: --lcs goes with --measure" in capsys.readouterr().err


def test_rows_missing_at_extraction_stay_out_of_the_variant(stores, tmp_path):
    root, everyone = stores
    source = root / "m" / "cog_l2" / "train"
    meta = json.loads((source / "meta.json").read_text())
    meta["missing"] = [{"row": 1, "path": "/in21k/n0/bad.JPEG", "error": "not a recognised image format"}]
    (source / "meta.json").write_text(json.dumps(meta))  # as extraction with --on-error skip writes it
    lost = _rows(source, everyone)[1]
    regroup.regroup_variant(root, "m", level_file=write_level_file(tmp_path / "toy.json", _permuted(everyone)))
    regrouped = [r for i in range(1, 6) for r in _rows(root / "m" / f"cog_l{i}@toy" / "train", everyone)]
    everything = [r for i in range(1, 6) for r in _rows(root / "m" / f"cog_l{i}" / "train", everyone)]
    assert lost not in regrouped and sorted(regrouped + [lost]) == sorted(everything)
