"""The zero-shot classifier equals CLIP_benchmark's construction, transcribed here from its source, on the same
embeddings of a deterministic fake text encoder; the logits are cosines of normalised image features."""

from __future__ import annotations

import hashlib

import pytest
import torch
import torch.nn.functional as F

from cog_pl.errors import CogError
from cog_pl.zeroshot import ClassName, get_templates, zeroshot_classifier, zeroshot_logits

DIM = 16


def fake_encode_text(texts: list[str]) -> torch.Tensor:
    """A deterministic "text tower": each text's vector is drawn from a generator seeded by its sha256, and scaled
    by its length so that the embeddings are not already unit vectors (the normalisation must matter)."""
    rows = []
    for t in texts:
        g = torch.Generator().manual_seed(int(hashlib.sha256(t.encode()).hexdigest()[:15], 16))
        rows.append(torch.randn(DIM, generator=g, dtype=torch.float64) * (1 + len(t)))
    return torch.stack(rows).float()


class FakeModel:
    def encode_text(self, tokens):
        return fake_encode_text(tokens)


def clip_benchmark_zero_shot_classifier(model, tokenizer, classnames, templates, device="cpu"):
    """LAION-AI/CLIP_benchmark clip_benchmark/metrics/zeroshot_classification.py l.16-57 (commit 48de38c), the
    autocast and tqdm left out: per class, the prompts' embeddings normalised, averaged, renormalised."""
    with torch.no_grad():
        zeroshot_weights = []
        for classname in classnames:
            if type(templates) == dict:  # noqa: E721 (as the source)
                texts = templates[classname]
            elif type(templates) == list:  # noqa: E721
                texts = [template.format(c=classname) for template in templates]
            else:
                raise ValueError("templates must be a list or a dict")
            texts = tokenizer(texts)
            class_embeddings = model.encode_text(texts)
            class_embedding = F.normalize(class_embeddings, dim=-1).mean(dim=0)
            class_embedding /= class_embedding.norm()
            zeroshot_weights.append(class_embedding)
        zeroshot_weights = torch.stack(zeroshot_weights, dim=1).to(device)
    return zeroshot_weights


CLASSES = ["tench", "goldfish", "great white shark", "tiger cat", "crane", "space heater", "wok"]


@pytest.mark.parametrize("batch_size", [1, 5, 80, 10_000])
def test_equal_to_clip_benchmark_on_the_openai_templates(batch_size):
    templates = list(get_templates("openai80").templates)
    ours = zeroshot_classifier(fake_encode_text, CLASSES, templates, batch_size=batch_size)
    ref = clip_benchmark_zero_shot_classifier(FakeModel(), lambda t: t, CLASSES, templates)
    assert ours.shape == (DIM, len(CLASSES)) and ours.dtype == torch.float32
    torch.testing.assert_close(ours, ref, atol=1e-6, rtol=0)
    torch.testing.assert_close(ours.norm(dim=0), torch.ones(len(CLASSES)), atol=1e-6, rtol=0)


def test_several_names_average_over_names_and_templates_as_per_class_prompts():
    """``lemmas``: CLIP_benchmark's per-class prompt lists (its dict branch) hold every name x template."""
    templates = list(get_templates("openai7").templates)
    classes = [("tiger cat",), ("crane", "Grus"), ("wok", "pan", "frying pan")]
    ours = zeroshot_classifier(fake_encode_text, [list(c) for c in classes], templates, batch_size=10)
    prompts = {c[0]: [t.format(c=n) for n in c for t in templates] for c in classes}
    ref = clip_benchmark_zero_shot_classifier(FakeModel(), lambda t: t, [c[0] for c in classes], prompts)
    torch.testing.assert_close(ours, ref, atol=1e-6, rtol=0)


def test_knowledge_is_appended_to_every_prompt_as_elevater_does():
    """ELEVATER feature.py l.530/537: ``template.format(name) + " ; {name} , {knowledge}"``."""
    cls = ClassName(("accordion",), "accordion free-reed_instrument wind_instrument")
    assert cls.texts(["a photo of a {c}."]) == [
        "a photo of a accordion. ; accordion , accordion free-reed_instrument wind_instrument"]
    ours = zeroshot_classifier(fake_encode_text, [cls], ["a photo of a {c}.", "art of the {c}."])
    ref = F.normalize(F.normalize(fake_encode_text(cls.texts(["a photo of a {c}.", "art of the {c}."])), dim=-1)
                      .mean(0), dim=0)
    torch.testing.assert_close(ours[:, 0], ref, atol=1e-6, rtol=0)


def test_logits_are_cosines_of_normalised_image_features():
    clf = zeroshot_classifier(fake_encode_text, CLASSES, ["a photo of a {c}."])
    images = torch.randn(5, DIM, generator=torch.Generator().manual_seed(0)) * 7
    logits = zeroshot_logits(images, clf)
    ref = 100.0 * (images / images.norm(dim=-1, keepdim=True)) @ clf  # CLIP_benchmark's logits, scaled by 100
    torch.testing.assert_close(100.0 * logits, ref, atol=1e-4, rtol=0)
    assert logits.abs().max() <= 1 + 1e-6
    with pytest.raises(CogError, match="dimension 3 do not match the classifier's 16"):
        zeroshot_logits(torch.ones(2, 3), clf)


def test_bad_templates_and_classes_are_refused_in_one_line():
    for templates, match in (([], "holds no template"), (["a photo of a {}."], "with '{c}' once"),
                             (["{c} and {c}"], "with '{c}' once"), (["a {c} {x}"], "does not format")):
        with pytest.raises(CogError, match=match) as err:
            zeroshot_classifier(fake_encode_text, CLASSES, templates)
        assert "\n" not in str(err.value)
    with pytest.raises(CogError, match="at least one class"):
        zeroshot_classifier(fake_encode_text, [], ["a {c}"])
