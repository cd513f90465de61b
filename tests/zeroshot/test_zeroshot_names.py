"""Class names and prompt templates as named, recorded choices: the registries, the package data against its source
(open_clip's ``zero_shot_metadata.py``), the WordNet-based schemes against WordNet itself, polysemy, a user's
CLIP_benchmark template file, and the identity fields that refuse a row made with other names or templates."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cog_pl.errors import CogError, UnknownNameError
from cog_pl.resources import in1k_wnids, official_levels
from cog_pl.wordnet.ontology import synset_of
from cog_pl.zeroshot import (
    check_zeroshot_identity,
    class_names,
    get_name_scheme,
    get_templates,
    list_name_schemes,
    list_template_sets,
    shared_names,
    zeroshot_identity,
)
from cog_pl.zeroshot.names import ClassName, hypernym_path

REPO = Path(__file__).resolve().parents[2]
TIGER_CAT = "n02123159"  # tiger_cat.n.02, IN-1K class 282
ACCORDION = "n02672831"  # accordion.n.01, IN-1K class 401


def test_the_registries_hold_the_named_choices():
    assert list_name_schemes()[:6] == ("lemma", "lemmas", "lemma_gloss", "lemma_hypernym", "openai", "demo_ancestors")
    assert list_template_sets() == ("openai80", "openai7")
    assert [len(get_templates(n).templates) for n in ("openai80", "openai7")] == [80, 7]


@pytest.mark.parametrize("call, match", [
    (lambda: get_name_scheme("lemma_glos"), r"unknown name scheme 'lemma_glos'; did you mean 'lemma_gloss'\?"),
    (lambda: get_templates("openai8"), r"unknown template set 'openai8'; did you mean 'openai80'\?.*PATH\[#KEY\]"),
    (lambda: zeroshot_identity("lema", "openai80"), r"unknown name scheme 'lema'; did you mean 'lemma'\?"),
])
def test_unknown_names_are_refused_in_one_line_with_did_you_mean(call, match):
    with pytest.raises(UnknownNameError, match=match) as err:
        call()
    assert "\n" not in str(err.value)


def test_the_package_data_is_open_clips_file_read_by_the_script():
    """The shipped templates and names are what scripts/make_zeroshot_metadata.py reads from open_clip's
    ``zero_shot_metadata.py`` (lambdas over f-strings, a tuple of names); values checked here were copied from that
    file (open_clip 89fb801, l.3, l.82, l.89-95, l.100, l.103, l.264); the licence ships beside the data."""
    import ast
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_meta", REPO / "scripts" / "make_zeroshot_metadata.py")
    make = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make)
    assert make._template(ast.parse("lambda c: f'a photo of {c}, {{x}}.'").body[0].value) == "a photo of {c}, {{x}}."
    with pytest.raises(SystemExit, match="expected 80 and 7"):
        make.read_metadata("OPENAI_IMAGENET_TEMPLATES = (lambda c: f'a {c}',)\nSIMPLE_IMAGENET_TEMPLATES = ()\n"
                           "IMAGENET_CLASSNAMES = ('tench',)\n")
    assets = REPO / "cog_pl" / "assets"
    data = json.loads((assets / "openai_imagenet_zeroshot.json").read_text())
    assert "mlfoundations/open_clip@" in data["source"] and data["license"].startswith("MIT")
    assert "Permission is hereby granted" in (assets / "LICENSE.open_clip").read_text()
    assert "openai_imagenet_zeroshot.json" in (assets / "README.md").read_text()
    t = data["templates"]
    assert t["openai80"][0] == "a bad photo of a {c}." and t["openai80"][-1] == "a tattoo of the {c}."
    assert t["openai7"] == ["itap of a {c}.", "a bad photo of the {c}.", "a origami {c}.", "a photo of the large {c}.",
                            "a {c} in a video game.", "art of the {c}.", "a photo of the small {c}."]
    assert set(t["openai7"]) <= set(t["openai80"])
    names = data["classnames"]
    assert len(names) == 1000 and names[:3] == ["tench", "goldfish", "great white shark"]
    assert names[21] == "kite (bird of prey)" and names[-1] == "toilet paper"


def test_wordnet_schemes_agree_with_wordnet(wn):
    tiger = synset_of(wn, TIGER_CAT)
    lemma, lemmas, gloss, hyper = (class_names(s, [TIGER_CAT])[0]
                                   for s in ("lemma", "lemmas", "lemma_gloss", "lemma_hypernym"))
    assert lemma.names == ("tiger cat",) and not lemma.knowledge
    assert lemmas.names == tuple(n.replace("_", " ") for n in tiger.lemma_names())
    assert gloss.names == ("tiger cat",) and gloss.knowledge.startswith(tiger.definition()[:40])
    # up the hypernyms, the first by offset where there are several (domestic_cat.n.01 has cat.n.01 and
    # domestic_animal.n.01, in an order NLTK does not fix)
    domestic = tiger.hypernyms()[0]
    first_up = min(domestic.hypernyms(), key=lambda s: s.offset())
    assert [s.name() for s in (domestic, first_up)] == ["domestic_cat.n.01", "domestic_animal.n.01"]
    assert hyper.names == ("tiger cat",) and hyper.knowledge == "tiger_cat domestic_cat domestic_animal"
    # ELEVATER's own knowledge file for Caltech-101's accordion: path_wn[:3]
    assert hypernym_path(ACCORDION) == ["accordion", "free-reed_instrument", "wind_instrument"]
    assert class_names("openai", [TIGER_CAT, in1k_wnids()[21]]) == [type(lemma)(("tiger cat",)),
                                                                   type(lemma)(("kite (bird of prey)",))]


def test_the_demos_scheme_is_the_lemma_and_every_ancestor(wn):
    path, synset = [], synset_of(wn, TIGER_CAT)  # up the hypernyms to the root, the first by offset at each step
    while synset is not None:
        path.append(synset.lemmas()[0].name())
        synset = min(synset.hypernyms(), key=lambda s: s.offset(), default=None)
    assert path[-1] == "entity" and len(path) < 20
    assert class_names("demo_ancestors", [TIGER_CAT]) == [ClassName(("tiger cat",), " ".join(path))]


def test_the_demos_scheme_is_known_to_a_process_that_never_imported_the_demo():
    # what `cog-pl run --zeroshot-names demo_ancestors` on the demo's outputs looks up (ZeroShotOptions refuses an
    # unknown scheme at once), in a fresh interpreter
    code = ("import sys; from cog_pl.evaluate.zeroshot import ZeroShotOptions; "
            "o = ZeroShotOptions(names='demo_ancestors', templates='openai7'); "
            "assert not [m for m in sys.modules if m.startswith('cog_pl.demo')], 'cog_pl.demo imported'; "
            "print(o.names)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "demo_ancestors"


def test_openai_names_only_for_in1k_and_unknown_wnids_are_refused():
    level = official_levels()["L1"][0]
    with pytest.raises(CogError, match=r"'openai' names the 1000 IN-1K classes only; 1 concept\(s\)") as err:
        class_names("openai", [TIGER_CAT, level])
    assert "\n" not in str(err.value)
    with pytest.raises(CogError, match="no name for n99999999"):
        class_names("lemma", ["n99999999"])


def test_polysemy_lists_concepts_whose_name_another_concept_of_the_domain_shares():
    in1k = list(in1k_wnids())
    openai = shared_names("openai", in1k)
    # OpenAI's curated list names two pairs of IN-1K classes alike
    assert set(openai) == {"missile", "sunglasses"} and all(len(v) == 2 for v in openai.values())
    lemma = shared_names("lemma", in1k)
    assert set(lemma) == {"cardigan", "crane", "maillot"}
    assert lemma["crane"] == ("n02012849", "n03126707")  # the bird and the machine
    lemmas = shared_names("lemmas", in1k)
    assert len(lemmas) == 19 and set(lemma) <= set(lemmas) and "missile" in lemmas
    assert all(len(v) > 1 and set(v) <= set(in1k) for v in lemmas.values())


def test_a_users_clip_benchmark_template_file(tmp_path):
    f = tmp_path / "templates.json"
    f.write_text(json.dumps({"imagenet1k": ["a photo of a {c}.", "a drawing of a {c}."], "cars": ["a {c} car."]}))
    ts = get_templates(str(f))
    assert ts.templates == ("a photo of a {c}.", "a drawing of a {c}.") and ts.name == "file:templates.json#imagenet1k"
    assert get_templates(f"{f}#cars").templates == ("a {c} car.",)
    cases = [(f"{f}#flowers", "has no key 'flowers'"),
             (_write(tmp_path, "a.json", ["a {c}"]), "expected CLIP_benchmark's format"),
             (_write(tmp_path, "b.json", {"imagenet1k": {"tench": ["a tench"]}}), "per-class prompts"),
             (_write(tmp_path, "c.json", {"imagenet1k": ["a photo of a {}."]}), "with '{c}' once"),
             (str(tmp_path / "none.json"), "unknown template set")]
    for spec, match in cases:
        with pytest.raises(CogError, match=match) as err:
            get_templates(spec)
        assert "\n" not in str(err.value)


def _write(folder: Path, name: str, data) -> str:
    (folder / name).write_text(json.dumps(data))
    return str(folder / name)


def test_identity_names_the_choices_and_refuses_a_row_made_with_others(tmp_path):
    ident = zeroshot_identity("lemma", "openai80")
    assert ident["names"] == "lemma" and ident["templates"] == "openai80"
    assert re.fullmatch(r"[0-9a-f]{64}", ident["templates_sha256"])
    check_zeroshot_identity(ident, "lemma", "openai80")  # the same choices pass
    with pytest.raises(CogError, match=r"made with names 'lemma', not the study's names 'lemmas'") as err:
        check_zeroshot_identity(ident, "lemmas", "openai80")
    assert "\n" not in str(err.value)
    with pytest.raises(CogError, match="templates 'openai80', templates_sha256 .* not the study's templates 'openai7'"):
        check_zeroshot_identity(ident, "lemma", "openai7")
    # a user's file edited under the same name: the digest tells them apart
    f = tmp_path / "t.json"
    f.write_text(json.dumps({"imagenet1k": ["a photo of a {c}."]}))
    before = zeroshot_identity("lemma", str(f))
    f.write_text(json.dumps({"imagenet1k": ["a blurry photo of a {c}."]}))
    with pytest.raises(CogError, match="templates_sha256"):
        check_zeroshot_identity(before, "lemma", str(f))
