"""The zero-shot classifier: one unit text embedding per class, built as the references build it.

Per class, each prompt's text embedding is L2-normalised, the normalised embeddings are averaged and the mean is
normalised again: CLIP_benchmark's ``F.normalize(class_embeddings, dim=-1).mean(dim=0)``, then ``/= norm``; open_clip
does the same on the normalised features ``model(text=...)`` returns, batched over classes. A class's prompts are its
names x the templates (:class:`ClassName`), so a class with several names averages over all of them, as
CLIP_benchmark does with per-class prompt lists.

Sources (what was taken from which lines: ``docs/reference/sources.md``): LAION-AI/CLIP_benchmark 48de38c
``clip_benchmark/metrics/zeroshot_classification.py``; mlfoundations/open_clip 89fb801
``src/open_clip/zero_shot_classifier.py``.

The texts of many classes go through the text encoder in one call (up to ``batch_size`` texts; a class's prompts are
never split), and the per-class means are taken with one ``index_add_``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from cog_pl.errors import CogError
from cog_pl.zeroshot.names import ClassName
from cog_pl.zeroshot.prompts import TemplateSet, check_templates

if TYPE_CHECKING:
    import torch

__all__ = ["zeroshot_classifier", "zeroshot_logits"]


def _as_class(name: str | Sequence[str] | ClassName) -> ClassName:
    if isinstance(name, ClassName):
        return name
    if isinstance(name, str):
        return ClassName((name,))
    return ClassName(tuple(name))


def _batches(texts: list[list[str]], batch_size: int) -> Iterator[list[list[str]]]:
    """Consecutive classes whose prompts add up to at most ``batch_size`` texts (a larger class goes alone)."""
    batch: list[list[str]] = []
    n = 0
    for class_texts in texts:
        if batch and n + len(class_texts) > batch_size:
            yield batch
            batch, n = [], 0
        batch.append(class_texts)
        n += len(class_texts)
    if batch:
        yield batch


def zeroshot_classifier(encode_text: Callable[[list[str]], torch.Tensor],
                        classnames: Sequence[str | Sequence[str] | ClassName],
                        templates: Sequence[str] | TemplateSet, *, batch_size: int = 1024) -> torch.Tensor:
    """The classifier ``[E, C]`` (float32, unit columns) for ``classnames`` (a name, a list of names or a
    :class:`ClassName` per class) and ``templates`` (``{c}`` marks the name), ``encode_text`` mapping a list of
    texts to their (unnormalised) embeddings ``[N, E]``, as a text tower's ``encode_text`` does."""
    import torch
    import torch.nn.functional as F

    if isinstance(templates, TemplateSet):
        templates = templates.templates
    check_templates(list(templates), "zero-shot templates")
    if not classnames:
        raise CogError("a zero-shot classifier needs at least one class")
    if batch_size < 1:
        raise CogError(f"batch_size must be at least 1, got {batch_size}")
    texts = [_as_class(c).texts(templates) for c in classnames]
    columns = []
    with torch.no_grad():
        for batch in _batches(texts, batch_size):
            emb = encode_text([t for class_texts in batch for t in class_texts])
            emb = F.normalize(emb.float(), dim=-1)
            counts = torch.tensor([len(t) for t in batch], device=emb.device)
            owner = torch.repeat_interleave(torch.arange(len(batch), device=emb.device), counts)
            sums = torch.zeros(len(batch), emb.shape[1], device=emb.device).index_add_(0, owner, emb)
            columns.append(F.normalize(sums / counts[:, None], dim=-1))
    return torch.cat(columns).T.contiguous()


def zeroshot_logits(image_features: torch.Tensor, classifier: torch.Tensor) -> torch.Tensor:
    """Cosine similarities ``[N, C]`` of L2-normalised image features ``[N, E]`` with the classifier ``[E, C]``
    (CLIP_benchmark multiplies them by 100 before its softmax, which changes no ranking)."""
    import torch
    import torch.nn.functional as F

    if image_features.shape[-1] != classifier.shape[0]:
        raise CogError(f"image features of dimension {image_features.shape[-1]} do not match the classifier's "
                       f"{classifier.shape[0]}: the image and text towers must be the same model's")
    return F.normalize(image_features.float(), dim=-1) @ classifier.to(image_features.device, torch.float32)
