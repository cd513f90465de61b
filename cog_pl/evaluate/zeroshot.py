"""Zero-shot classification (method ``zeroshot``): each domain's test features against the text classifier of its
concepts, no training image read.

The text classifier (:func:`cog_pl.zeroshot.zeroshot_classifier`) is built from the test store's concepts with a name
scheme and a template set (:class:`ZeroShotOptions`, ``--zeroshot-names``, ``--zeroshot-templates``) by the text tower
of the model that made the store, cached beside the results file, and applied to the test features
(:mod:`cog_pl.probe.zeroshot`). It draws nothing at random: one row per domain, whatever the run's seeds (key seed
``NO_SEED``, ``seedless: true``), whose identity holds the features', the names and templates, and the text tower's
weights digest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from cog_pl.errors import CogError
from cog_pl.evaluate.method import Cell, Inputs, Job, Method, register_method

__all__ = ["DEFAULT_NAMES", "DEFAULT_TEMPLATES", "ZeroShot", "ZeroShotOptions"]

#: The defaults of ``--zeroshot-names`` and ``--zeroshot-templates``: WordNet's first lemma (every domain has one;
#: OpenAI's curated names cover IN-1K only) and OpenAI's 80 ImageNet templates.
DEFAULT_NAMES, DEFAULT_TEMPLATES = "lemma", "openai80"


@dataclass(frozen=True)
class ZeroShotOptions:
    """The text classifier's options (zero-shot, and the text-initialised linear probe's start); refused at once
    when unknown."""

    flag_prefix: ClassVar[str] = "zeroshot"

    names: str = field(default=DEFAULT_NAMES, metadata={
        "help": "how concepts are named: lemma, lemmas, lemma_gloss, lemma_hypernym, or openai (IN-1K only)",
        "metavar": "SCHEME"})
    templates: str = field(default=DEFAULT_TEMPLATES, metadata={
        "help": "the prompt templates: openai80, openai7, or a CLIP_benchmark JSON file", "metavar": "SET|FILE[#KEY]"})
    backbone: str | None = field(default=None, metadata={
        "help": "the model whose text tower builds the classifier (default: the one that made the features)",
        "metavar": "MODEL"})
    checkpoint: str | None = field(default=None, metadata={
        "help": "the text tower's weights (default: the file the features were extracted with)", "metavar": "FILE"})

    def __post_init__(self) -> None:
        from cog_pl.zeroshot import zeroshot_identity

        zeroshot_identity(self.names, self.templates)  # an unknown name or a bad file: one line, before any work


def require_text_tower(model: str, method: str) -> None:
    """Refuse, in one line, a model without a text tower for ``method`` (naming the models that have one)."""
    from cog_pl.models.registry import has_text_tower, list_text_towers

    if not has_text_tower(model):
        raise CogError(f"{method} needs a text tower and {model} has none; the models with one: "
                       f"{', '.join(list_text_towers())}, open_clip:<name> (drop {method} from --methods)")


class ZeroShot(Method):
    """A vision-language model's text classifier on the test features."""

    name = "zeroshot"
    label = "zero-shot"
    order = 3.0
    description = "a vision-language model's text classifier of the concepts' names and prompts; one row per domain"
    options = ZeroShotOptions
    seedless = True

    def precheck(self, inputs: Inputs, options: ZeroShotOptions | None) -> None:
        require_text_tower((options and options.backbone) or inputs.model or inputs.label, self.name)

    def cells(self, job: Job) -> list[Cell]:
        from cog_pl.results import NO_SEED

        return [(None, NO_SEED)]

    def open(self, job: Job) -> Any:
        from cog_pl.features.pair import open_pair

        pair = open_pair(job.root, allow_class_mismatch=job.allow_class_mismatch)
        if not pair.classes:
            raise CogError(f"{pair.root}: zero-shot names the concepts from the stores' meta.json classes, and these "
                           "stores have none (plain stores)")
        if pair.tokens is not None:
            raise CogError(f"{pair.root}: zero-shot reads one embedding per image; these are token stores "
                           f"({pair.test.meta.get('feature', '?')})")
        return pair

    def check(self, job: Job, state: Any, cells: list[Cell]) -> None:
        """Nothing is sampled; a row made with other names or templates is named as such (before the rule of any
        other value)."""

    def identity(self, job: Job, state: Any) -> dict[str, Any]:
        from cog_pl.device import resolve_device
        from cog_pl.probe.zeroshot import text_tower, zeroshot_values

        options = job.options or ZeroShotOptions()
        tower, record = text_tower(dict(state.test.meta), options, resolve_device(job.device))
        return zeroshot_values(state, record, options, tower)

    def run_cell(self, job: Job, state: Any, cell: Cell, want: dict[str, Any]) -> dict[str, Any]:
        from cog_pl.device import resolve_device
        from cog_pl.probe.zeroshot import zeroshot_row

        return zeroshot_row(state, job.results, model=job.model, domain=job.domain,
                            options=job.options or ZeroShotOptions(), device=resolve_device(job.device))


register_method(ZeroShot())
