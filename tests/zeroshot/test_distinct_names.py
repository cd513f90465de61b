"""Concepts of a domain that share a name get distinct prompts (sarahpratt/CuPL issue 2: with one name, two classes get
one text embedding and the second is never predicted), qualified by WordNet's hypernym or gloss (real WordNet), the
rule recorded in the classifier's identity; and a domain with a shared name, run through the ``zeroshot`` method with
a text tower on CLIP's tokenizer, no longer scores 0 on the second concept."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from cog_pl import resources
from cog_pl.errors import CogError
from cog_pl.evaluate.runner import run_on_stores
from cog_pl.features.pair import open_pair
from cog_pl.models.registry import BackboneSpec, register_backbone, unregister_backbone
from cog_pl.results import read_rows
from cog_pl.results.predictions import read_row_predictions
from cog_pl.zeroshot import (
    DISTINCT_NAMES,
    check_zeroshot_identity,
    class_names,
    get_templates,
    shared_names,
    zeroshot_classifier,
    zeroshot_identity,
    zeroshot_logits,
)
from cog_pl.zeroshot.names import hypernym_path

pytest.importorskip("open_clip", reason="the text tower reads CLIP's tokenizer from open_clip_torch")
from open_clip_fixtures import write_pair

CRANE_BIRD, CRANE_MACHINE = "n02012849", "n03126707"  # IN-1K classes 134 and 517, both WordNet's "crane"
CARDIGAN_DOG, CARDIGAN_SWEATER = "n02113186", "n02963159"
MAILLOT_TIGHTS, MAILLOT_SWIMSUIT = "n03710637", "n03710721"
DOMAIN = [CRANE_BIRD, CARDIGAN_DOG, MAILLOT_TIGHTS, CRANE_MACHINE, CARDIGAN_SWEATER, MAILLOT_SWIMSUIT]
MODEL = "bow_text_test"


def test_shared_names_are_qualified_by_the_hypernym_or_the_gloss(wn):
    from cog_pl.wordnet.ontology import synset_of

    bird, machine = class_names("lemma", [CRANE_BIRD, CRANE_MACHINE])
    assert (bird.names, machine.names) == (("crane (wading bird)",), ("crane (lifting device)",))
    assert [synset_of(wn, w).hypernyms()[0].name() for w in (CRANE_BIRD, CRANE_MACHINE)] == [
        "wading_bird.n.01", "lifting_device.n.01"]
    # alone in its domain, a concept keeps its name; the scheme's own names stay available
    assert class_names("lemma", [CRANE_BIRD])[0].names == ("crane",)
    assert [c.names for c in class_names("lemma", [CRANE_BIRD, CRANE_MACHINE], distinct=False)] == [("crane",)] * 2
    # OpenAI's curated names name two pairs alike (CuPL issue 2's missile and sunglasses)
    in1k = list(resources.in1k_wnids())
    openai = {w: c.names[0] for w, c in zip(in1k, class_names("openai", in1k))}
    assert (openai["n03773504"], openai["n04008634"]) == ("missile (rocket)", "missile (weapon)")
    assert len(set(openai.values())) == 1000
    for scheme in ("lemma", "lemmas", "openai"):  # no two IN-1K classes share a prompt any more
        classes = class_names(scheme, in1k)
        texts = [frozenset(c.texts(["{c}"])) for c in classes]
        assert all(not (a & b) for i, a in enumerate(texts) for b in texts[i + 1:]), scheme
        assert shared_names(scheme, in1k)  # (the polysemy is still reported as the scheme names it)
    # hypernyms of one name: the glosses (lemmas: the cougar and the lynx are both "catamount", both wildcats)
    cougar, lynx = "n02125311", "n02127052"
    assert [hypernym_path(w, 2)[1] for w in (cougar, lynx)] == ["wildcat", "wildcat"]
    names = dict(zip((cougar, lynx), class_names("lemmas", [cougar, lynx])))
    assert f"catamount ({resources.concept_gloss(lynx)})" in names[lynx].names
    assert f"catamount ({resources.concept_gloss(cougar)})" in names[cougar].names
    # knowledge that already differs (the glosses of lemma_gloss) keeps ELEVATER's prompts as they are
    assert [c.names for c in class_names("lemma_gloss", [CRANE_BIRD, CRANE_MACHINE])] == [("crane",)] * 2


def test_concepts_wordnet_cannot_tell_apart_are_refused_in_one_line():
    # two IN-21K synsets named "gutta-percha tree", both trees, with one gloss
    pair = ["n12775070", "n12775393"]
    assert len({resources.concept_gloss(w) for w in pair}) == 1
    with pytest.raises(CogError, match=r"^concepts n12775070, n12775393 are all named 'gutta-percha tree' with the "
                                       r"same hypernym and gloss in WordNet: zero-shot cannot give them distinct "
                                       r"prompts; keep one of them in the domain$"):
        class_names("lemma", pair)


def test_the_rule_is_part_of_the_classifiers_identity():
    ident = zeroshot_identity("lemma", "openai7")
    assert ident["distinct_names"] == DISTINCT_NAMES == "hypernym_or_gloss"
    before = {k: v for k, v in ident.items() if k != "distinct_names"}  # a row made before the rule
    with pytest.raises(CogError, match=r"made with distinct_names None, not the study's distinct_names "
                                       r"'hypernym_or_gloss'"):
        check_zeroshot_identity(before, "lemma", "openai7")


class BagOfTokens(nn.Module):
    """A text tower on CLIP's tokenizer (open_clip's ``SimpleTokenizer``): the mean of a seeded random vector per
    token, start, end and padding left out. Texts that share words are near, so it names a concept by the words
    of its prompts; two classes given the same prompts get the same embedding, as any text tower gives them."""

    embed_dim = 64

    def __init__(self) -> None:
        super().__init__()
        from open_clip.tokenizer import SimpleTokenizer

        self.tokenizer = SimpleTokenizer()
        self.vectors = nn.Embedding(self.tokenizer.vocab_size, self.embed_dim)
        nn.init.normal_(self.vectors.weight, generator=torch.Generator().manual_seed(0))

    def encode_text(self, texts: list[str]) -> torch.Tensor:
        tokens = self.tokenizer(list(texts))
        words = (tokens > 0) & (tokens < self.tokenizer.sot_token_id)
        with torch.no_grad():
            return (self.vectors(tokens) * words[..., None]).sum(1) / words.sum(1, keepdim=True).clamp(min=1)


def build_bow_tower(name: str, weights: str | None, trust: bool = False) -> BagOfTokens:
    """The backbone's text tower builder (its spec's ``text_tower``)."""
    return BagOfTokens()


@pytest.fixture
def bow_backbone():
    register_backbone(MODEL, BackboneSpec(MODEL, MODEL, BagOfTokens.embed_dim, image_size=32, group="user", seen=None,
                                          text_tower=f"{__name__}:build_bow_tower"), replace=True)
    yield
    unregister_backbone(MODEL)


def test_a_domain_with_a_shared_name_no_longer_scores_0_on_its_second_concept(bow_backbone, tmp_path):
    """Each test image lies near its concept's hypernym, written out ("a photo of a wading bird."); the domain holds
    three pairs of IN-1K concepts WordNet names alike. With the scheme's own names the second of each pair scores
    0; through the method, which qualifies them, every concept is named."""
    tower = BagOfTokens()
    hypernyms = [hypernym_path(w, 2)[1].replace("_", " ") for w in DOMAIN]
    pictures = tower.encode_text([f"a photo of a {h}." for h in hypernyms])
    root = write_pair(tmp_path / "feats" / "cog_l1", "bow.pt", DOMAIN,
                      lambda y, rng: pictures.numpy()[y] + 0.02 * rng.normal(size=(len(y), BagOfTokens.embed_dim)),
                      arch=MODEL, per_class=(2, 5))
    results = tmp_path / "r.sqlite"
    rows = run_on_stores("zeroshot", root, results, model="bow", domain="cog_l1", seeds=(0,),
                         options={"names": "lemma", "templates": "openai7"})
    row = read_rows(results)[0]
    assert len(rows) == 1 and row["zeroshot"]["distinct_names"] == DISTINCT_NAMES
    assert set(row["shared_names"]) == {"crane", "cardigan", "maillot"}
    preds = read_row_predictions(results, row)
    per_class = [float(np.mean(preds.top5[preds.label == c, 0] == c)) for c in range(len(DOMAIN))]
    assert min(per_class) > 0.5, per_class
    assert row["test_top1"] == 100.0, per_class

    # the same images against the classifier of the scheme's own names: the second of each pair is never predicted
    same = zeroshot_classifier(tower.encode_text, class_names("lemma", DOMAIN, distinct=False),
                               get_templates("openai7"))
    assert torch.equal(same[:, 0], same[:, 3])  # one text embedding for both cranes
    test = open_pair(root).test
    predicted = zeroshot_logits(torch.tensor(np.array(test.features, dtype=np.float32)), same).argmax(dim=1)
    labels = torch.tensor(np.array(test.labels))
    assert torch.equal(labels, torch.tensor(preds.label))
    for second in (3, 4, 5):
        assert (labels == second).sum() == 5 and (predicted[labels == second] == second).sum() == 0  # 0 %
