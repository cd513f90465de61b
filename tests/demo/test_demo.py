"""The embedded demo: a miniature benchmark of real CoG concepts on disk, a pretrained backbone, the paper's effect."""

import json

import numpy as np
import pytest

from cog_pl import resources
from cog_pl.benchmark import Benchmark
from cog_pl.demo import MODEL_NAME, DemoCNN, make_demo, prepare
from cog_pl.demo.traits import TraitStyle, motifs
from cog_pl.models import build_backbone

TINY = {"n_seen": 6, "n_per_level": 3, "train_per_concept": 5, "test_per_concept": 2, "image_size": 16}


def test_make_demo_writes_a_benchmark_of_real_concepts(onto, tmp_path):
    path = make_demo(tmp_path / "a", seed=3, onto=onto, **TINY)
    bench = Benchmark.load(path)
    assert len(bench.in1k) == 6 and set(bench.in1k) <= set(resources.in1k_wnids())
    for lv in resources.LEVELS:
        assert len(bench.classes(lv)) == 3 and not set(bench.classes(lv)) & set(bench.in1k)  # levels built --seen
        assert len(bench.test[lv]) == 6 and all((tmp_path / "a" / "in21k" / p).is_file() for p in bench.test[lv])
    for w in bench.in1k:
        assert len(list((tmp_path / "a" / "in1k" / "train" / w).glob("*.JPEG"))) == 5
        assert len(list((tmp_path / "a" / "in1k" / "val" / w).glob("*.JPEG"))) == 2
    assert bench.feature_protocol().test_per_concept == 2
    sims = bench.meta["mean_lin_similarity"]
    assert sims["L1"]["seen"] > sims["L3"]["seen"] > sims["L5"]["seen"]  # the miniature keeps the level order
    # deterministic in the seed, and a finished root is left alone
    again = make_demo(tmp_path / "b", seed=3, onto=onto, **TINY)
    assert Benchmark.load(again) == bench
    some = bench.test["L2"][0]
    assert (tmp_path / "a" / "in21k" / some).read_bytes() == (tmp_path / "b" / "in21k" / some).read_bytes()
    stamp = path.stat().st_mtime_ns
    assert make_demo(tmp_path / "a", seed=3, onto=onto, **TINY) == path and path.stat().st_mtime_ns == stamp
    with pytest.raises(ValueError, match="made with other settings"):
        make_demo(tmp_path / "a", seed=4, onto=onto, **TINY)


def test_generation_resumes_after_an_interruption(onto, tmp_path):
    path = make_demo(tmp_path / "a", seed=1, onto=onto, **TINY)
    bench = Benchmark.load(path)
    w = bench.classes("L4")[0]
    for f in (tmp_path / "a" / "in21k" / w).iterdir():
        f.unlink()
    (tmp_path / "a" / "in21k" / w).rmdir()
    path.unlink()  # as if stopped before the end
    assert Benchmark.load(make_demo(tmp_path / "a", seed=1, onto=onto, **TINY)) == bench
    assert len(list((tmp_path / "a" / "in21k" / w).iterdir())) == 7


def test_motifs_resemble_along_wordnet(onto):
    style = TraitStyle()
    dog, wolf, car = (onto.index[w] for w in ("n02084071", "n02114100", "n02958343"))  # dog, wolf, car
    canine = onto.index["n02083346"]
    m = motifs(onto, [dog, wolf, car, canine], seed=0, style=style).reshape(4, -1)
    corr = np.corrcoef(m)
    assert corr[0, 3] > 0.5 and corr[0, 1] > corr[0, 2]  # a child looks like its parent, siblings alike


def test_prepare_trains_once_and_the_checkpoint_loads_as_a_backbone(onto, tmp_path):
    assets = prepare(tmp_path, **TINY, epochs=1, onto=onto)
    assert (assets.model, assets.transform.crop) == (MODEL_NAME, 16) and assets.benchmark.is_file()
    from cog_pl.data.roots import read_data_dir

    assert read_data_dir(tmp_path).image_size == 16  # cog-pl run --data reads the images at it (issue 47)
    backbone = build_backbone(MODEL_NAME, checkpoint=assets.checkpoint)
    assert backbone.spec.feature_dim == DemoCNN().feature_dim == 96 and backbone.weights_sha256
    record = json.loads((tmp_path / "demo_cnn.json").read_text())
    assert record["epochs"] == 1 and 0 <= record["seen_test_top1"] <= 1
    stamp = assets.checkpoint.stat().st_mtime_ns
    assert prepare(tmp_path, **TINY, epochs=1, onto=onto) == assets and assets.checkpoint.stat().st_mtime_ns == stamp


_FINGERPRINT = """
import hashlib, json, sys
from pathlib import Path
from cog_pl import resources
from cog_pl.demo.traits import clutter_bank, concept_images
from cog_pl.wordnet import get_wordnet
from cog_pl.wordnet.ontology import Ontology
root = Path(sys.argv[1])
if root.name == "small":  # a few hundred IN-21K concepts, many with two parents
    onto = Ontology.build(get_wordnet(), resources.in21k_wnids()[:400])
    bank = clutter_bank(onto, 0)
    imgs = concept_images(onto, "n02084071" if "n02084071" in onto.index else onto.wnids[0], 4, 16, 0, (0,),
                          clutter=bank)
    print(json.dumps({"wnids": onto.wnids, "parents": onto.parent_idx,
                      "images": hashlib.sha256(bank.tobytes() + imgs.tobytes()).hexdigest()}))
else:
    from cog_pl.demo import make_demo
    make_demo(root, seed=3, **json.loads(sys.argv[2]))
    print(json.dumps({str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
                      for p in sorted(root.rglob("*")) if p.is_file()}))
"""


def _fingerprint(root, hash_seed: int, *extra: str) -> dict:
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONHASHSEED": str(hash_seed)}
    out = subprocess.run([sys.executable, "-c", _FINGERPRINT, str(root), *extra], env=env, capture_output=True,
                         text=True, timeout=600, check=True).stdout
    return json.loads(out)


@pytest.mark.slow
def test_ontology_and_images_do_not_depend_on_the_hash_seed(tmp_path):
    """NLTK keeps a synset's hypernyms in a set: node numbering, and the demo's clutter and images, followed
    PYTHONHASHSEED until parents were sorted."""
    a, b = (_fingerprint(tmp_path / "small", seed) for seed in (1, 2))
    assert a["wnids"] == b["wnids"] and a["parents"] == b["parents"]
    assert a["images"] == b["images"]


@pytest.mark.slow
def test_demo_benchmark_is_byte_identical_across_processes(tmp_path):
    """The whole miniature (concepts, benchmark file, every JPEG) made in two processes with other hash seeds."""
    a = _fingerprint(tmp_path / "a", 1, json.dumps(TINY))
    b = _fingerprint(tmp_path / "b", 2, json.dumps(TINY))
    assert len(a) > 50 and a == b


@pytest.mark.slow  # two demos at their smallest, as processes
def test_a_demo_run_again_with_other_settings_is_refused_naming_an_option_it_takes(tmp_path):
    """Issue 47: the refusal of a second demo under the same --out with other settings said "pass --overwrite", which
    the demo did not accept; it does now, and replaces the rows made with the other settings."""
    import subprocess

    from bad_input_cases import COG_PL

    from cog_pl.results import read_rows

    small = ["--out", str(tmp_path / "demo"), "--seen", "2", "--per-level", "2", "--train-per-concept", "5",
             "--test-per-concept", "2", "--image-size", "16", "--pretrain-epochs", "1", "--ssl-epochs", "0",
             "--no-finetune", "--seeds", "22", "--shots", "all", "--epochs", "2", "--variants", "--methods", "linear"]

    def demo(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(COG_PL), "demo", *small, *extra], capture_output=True, text=True, timeout=900)

    assert demo("--trials", "2").returncode == 0
    again = demo("--trials", "3")
    last = again.stderr.strip().splitlines()[-1]
    assert again.returncode == 2 and "pass --overwrite to replace it" in last and "trials=2" in last, again.stderr
    assert demo("--trials", "3", "--overwrite").returncode == 0
    assert {r["protocol"]["trials"] for r in read_rows(tmp_path / "demo" / "results.sqlite")} == {3}
