"""CLIP's text tower cuts each batch after its last end-of-text token: the embeddings equal the full-context
forward's (a random tower) and open_clip's own full-context ``encode_text`` and CLIP_benchmark's classifier (a tiny
open_clip model's weights read into our tower), with texts encoded sorted by length and returned in their order."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from cog_pl.models.arch.clip_text import CLIPTextTower, CLIPTextTransformer, text_state, text_transformer_for
from cog_pl.models.checkpoints import load_into

EOT = 999  # the highest id of the test's vocabulary, as CLIP's end-of-text token is of its


def _random_net() -> CLIPTextTransformer:
    torch.manual_seed(0)
    net = CLIPTextTransformer(embed_dim=16, context_length=77, vocab_size=EOT + 1, width=64, heads=2, layers=2)
    for p in net.parameters():
        nn.init.normal_(p, std=0.2)
    return net.eval()


def _full_context(net: CLIPTextTransformer, tokens: torch.Tensor) -> torch.Tensor:
    """The untrimmed forward (openai/CLIP clip/model.py encode_text, lines 343-356): all 77 positions, the whole
    causal mask, the features at each sequence's highest id."""
    x = net.token_embedding(tokens) + net.positional_embedding
    mask = torch.full((77, 77), float("-inf")).triu_(1)
    for block in net.transformer.resblocks:
        x = block(x, mask)
    x = net.ln_final(x)
    return x[torch.arange(len(tokens)), tokens.argmax(-1)] @ net.text_projection


def test_a_batch_is_cut_after_its_last_end_token_with_the_full_contexts_embeddings():
    net = _random_net()
    seen = []
    net.transformer.register_forward_pre_hook(lambda _, args: seen.append(args[0].shape[1]))
    gen = torch.Generator().manual_seed(1)
    tokens = torch.zeros(4, 77, dtype=torch.long)
    for i, end in enumerate((3, 12, 5, 20)):  # start token, words, end token, zero padding
        tokens[i, :end] = torch.randint(1, EOT, (end,), generator=gen)
        tokens[i, end] = EOT
    with torch.inference_mode():
        ours, ref = net(tokens), _full_context(net, tokens)
        assert seen == [21]  # the positions after the last end token (20) are not computed
        assert ref.abs().max() > 0.1 and (ours - ref).abs().max() < 1e-5
        # any ids (the highest anywhere): still the full context's
        noise = torch.randint(0, EOT + 1, (6, 77), generator=gen)
        assert (net(noise) - _full_context(net, noise)).abs().max() < 1e-5


def test_a_tower_of_open_clip_weights_equals_open_clip_and_clip_benchmark(tmp_path, monkeypatch):
    pytest.importorskip("open_clip", reason="the reference is open_clip_torch's (the vlm extra)")
    from open_clip_fixtures import SEVEN, reference_classifier, tiny_open_clip

    import cog_pl.models.text as text
    from cog_pl import resources
    from cog_pl.zeroshot import class_names, zeroshot_classifier

    name = "cog-pl-cut-text"  # OpenAI's text tower layout: QuickGELU, 64-wide heads, as our tower reads it
    config = {"embed_dim": 32, "quick_gelu": True,
              "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "head_width": 16, "patch_size": 16},
              "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 64, "heads": 1, "layers": 2}}
    _, model = tiny_open_clip(tmp_path, name, seed=3, config=config)
    state = text_state(model.state_dict(), "tiny open_clip")
    net = text_transformer_for(state)
    load_into(net, state, "tiny open_clip", "clip text tower", "")
    tower = CLIPTextTower(net.eval()).requires_grad_(False)

    import open_clip

    wnids = list(resources.in1k_wnids()[:5])
    names = class_names("lemma_gloss", wnids)  # prompts of many lengths (names, then glosses)
    texts = [t for n in names for t in n.texts(SEVEN)]
    monkeypatch.setattr(text, "TEXT_BATCH", 4)  # several batches, each of like lengths, then back in order
    with torch.no_grad():
        ref = model.encode_text(open_clip.get_tokenizer(name)(texts))
    ours = tower.encode_text(texts)
    assert (ours - ref).abs().max() < 1e-5
    lemmas = [n.names[0] for n in names]
    theirs = reference_classifier(model, name, lemmas, SEVEN)
    mine = zeroshot_classifier(tower.encode_text, lemmas, SEVEN)
    assert mine.shape == theirs.shape == (32, 5) and (mine - theirs).abs().max() < 1e-5
