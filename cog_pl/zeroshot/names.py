"""Class names for zero-shot: named, recorded schemes that turn a concept's wnid into what the templates get.

Every scheme is an entry of one :class:`~cog_pl.registry.Registry`; its name goes into a zero-shot row's identity
(:func:`cog_pl.zeroshot.identity.zeroshot_identity`). WordNet's lemmas and glosses come from the package data the
rest of the package reads (``assets/synset_names.tsv.gz``, ``assets/synset_glosses.tsv.gz``: ImageNet's
``words.txt`` / ``gloss.txt``, equal to NLTK WordNet 3.0's lemma names with ``_`` as a space), hypernyms from NLTK
WordNet 3.0 (:func:`cog_pl.wordnet.get_wordnet`).

- ``lemma``: WordNet's first lemma (``tiger cat``);
- ``lemmas``: every lemma; the classifier averages over names x templates;
- ``lemma_gloss``: the first lemma, each prompt followed by the gloss as ELEVATER's
  ``KNOWLEDGE.WORDNET.USE_DEFINITION`` appends it (``template.format(name) + " ; {name} , {gloss}"``);
- ``lemma_hypernym``: the same with ELEVATER's ``KNOWLEDGE.WORDNET.USE_HIERARCHY`` knowledge: the first three names
  of the path up WordNet's hypernyms, the concept's own first lemma first, each a synset's first lemma as WordNet
  spells it (``accordion free-reed_instrument wind_instrument``, as its ``resources/knowledge`` files and
  ``hypernyms_chain`` make them);
- ``openai``: OpenAI's curated names of the 1000 IN-1K classes (IN-1K concepts only; package data
  ``assets/openai_imagenet_zeroshot.json`` from open_clip's ``zero_shot_metadata.py``, MIT);
- ``demo_ancestors``: the first lemma with every ancestor up the hypernym path as knowledge (``lemma_hypernym``'s
  format, :data:`ANCESTORS` names): the captions the demo's tiny CLIP is trained on (:mod:`cog_pl.demo.clip`),
  defined here so that a later ``cog-pl run --zeroshot-names demo_ancestors`` on the demo's outputs finds it in a
  process that never imported the demo.

Where these differ from ELEVATER: the concept's own synset is used (ELEVATER looks the class name up and takes its
first sense, ``wn.synsets(name)[0]``, which is often another concept); the hypernym followed is the first by synset
offset (NLTK's order of a synset's hypernyms is not fixed); the knowledge text is not passed through NLTK's
``word_tokenize`` (ELEVATER spaces punctuation out with it).

Concepts whose name is shared by another concept of the same domain (polysemy: ``crane`` the bird and the machine)
would get the same prompts, so the same text embedding, and the second would never be predicted (0 % on it: CuPL's
ImageNet prompts, keyed by OpenAI's names, give ``missile`` and ``sunglasses`` twice, sarahpratt/CuPL issue 2).
:func:`shared_names` lists them, and :func:`class_names` gives them distinct prompts (:func:`distinct_names`): a
name two or more concepts of the domain share, with the same knowledge text, is qualified in each by the name of the
synset's first hypernym (``crane (wading bird)``, ``crane (lifting device)``, as OpenAI's curated names qualify
``kite (bird of prey)``), or, where two of them have hypernyms of one name, by their glosses. The rule,
:data:`DISTINCT_NAMES`, is part of a zero-shot row's identity.

Sources (what was taken from which lines: ``docs/reference/sources.md``):
Computer-Vision-in-the-Wild/Elevater_Toolkit_IC 00d0af7 ``vision_benchmark/evaluation/feature.py`` (the knowledge and
the prompts); mlfoundations/open_clip 89fb801 ``src/open_clip/zero_shot_metadata.py`` (OpenAI's names);
sarahpratt/CuPL issue 2 (a shared name).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from cog_pl import resources
from cog_pl.errors import CogError
from cog_pl.registry import Registry

__all__ = ["ANCESTORS", "DISTINCT_NAMES", "ClassName", "NameScheme", "class_names", "distinct_names", "get_name_scheme",
           "hypernym_path", "list_name_schemes", "register_name_scheme", "shared_names"]

#: How :func:`distinct_names` tells apart concepts of a domain that share a name (recorded in a row's identity):
#: each qualified by its synset's first hypernym's name, or by its gloss where those hypernym names coincide.
DISTINCT_NAMES = "hypernym_or_gloss"


@dataclass(frozen=True)
class ClassName:
    """What one class's prompts are made of: its names (the classifier averages over names x templates) and the
    knowledge text ELEVATER appends to every prompt (empty: none)."""

    names: tuple[str, ...]
    knowledge: str = ""

    def texts(self, templates: Sequence[str]) -> list[str]:
        """The class's prompts: each template (``{c}``) with each name, then ``" ; {name} , {knowledge}"`` when
        there is knowledge (as ELEVATER's zero-shot prompts)."""
        if not self.names:
            raise CogError("a class needs at least one name")
        suffix = f" ; {self.names[0]} , {self.knowledge}" if self.knowledge else ""
        return [t.format(c=name) + suffix for name in self.names for t in templates]


@dataclass(frozen=True)
class NameScheme:
    """A named way to name concepts: ``build`` maps wnids to :class:`ClassName` (in order)."""

    name: str
    build: Callable[[Sequence[str]], list[ClassName]]
    description: str
    source: str


_SCHEMES: Registry[NameScheme] = Registry("name scheme")


def register_name_scheme(scheme: NameScheme, *, replace: bool = False) -> NameScheme:
    """Add a name scheme under its name."""
    return _SCHEMES.add(scheme.name, scheme, replace=replace)


def get_name_scheme(name: str | NameScheme) -> NameScheme:
    """A registered scheme; an unknown name is refused in one line with the closest known one."""
    return name if isinstance(name, NameScheme) else _SCHEMES.get(name)


def list_name_schemes() -> tuple[str, ...]:
    """Registered scheme names, in registration order."""
    return _SCHEMES.names()


def class_names(scheme: str | NameScheme, wnids: Sequence[str], *, distinct: bool = True) -> list[ClassName]:
    """The :class:`ClassName` of each wnid of a domain under ``scheme``, in the order given; names the domain's
    concepts share are qualified (:func:`distinct_names`) unless ``distinct`` is False (the scheme's own names)."""
    wnids = list(wnids)
    classes = get_name_scheme(scheme).build(wnids)
    return distinct_names(wnids, classes) if distinct else classes


def shared_names(scheme: str | NameScheme, wnids: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """Polysemy within a domain: each name (case-folded, as CLIP's tokenizer lowercases) that two or more of
    ``wnids`` carry under ``scheme`` (before :func:`distinct_names` qualifies it), mapped to those wnids in the order
    given; sorted by name."""
    owners: dict[str, list[str]] = {}
    for wnid, cls in zip(wnids, class_names(scheme, wnids, distinct=False)):
        for name in dict.fromkeys(n.casefold() for n in cls.names):
            owners.setdefault(name, []).append(wnid)
    return {name: tuple(ws) for name, ws in sorted(owners.items()) if len(ws) > 1}


def _same_prompts(classes: Sequence[ClassName]) -> dict[tuple[str, str], list[int]]:
    """The (case-folded name, knowledge) pairs two or more of ``classes`` share (so some of their prompts are the
    same text), each with the indices of those classes."""
    owners: dict[tuple[str, str], list[int]] = {}
    for i, cls in enumerate(classes):
        for name in dict.fromkeys(n.casefold() for n in cls.names):
            owners.setdefault((name, cls.knowledge), []).append(i)
    return {key: group for key, group in owners.items() if len(group) > 1}


def _qualifiers(wnids: Sequence[str], name: str) -> list[str]:
    """What tells apart the concepts ``wnids`` that share ``name``: their first hypernyms' names when these differ
    (WordNet's first lemma, ``_`` as a space), else their glosses; refused in one line when those coincide too."""
    hypernyms = [" ".join(hypernym_path(w, 2)[1:2]).replace("_", " ") for w in wnids]
    if all(hypernyms) and len({h.casefold() for h in hypernyms}) == len(wnids):
        return hypernyms
    glosses = [resources.concept_gloss(w) for w in wnids]
    if all(glosses) and len(set(glosses)) == len(wnids):
        return glosses
    raise CogError(f"concepts {', '.join(wnids)} are all named {name!r} with the same hypernym and gloss in WordNet: "
                   "zero-shot cannot give them distinct prompts; keep one of them in the domain")


def distinct_names(wnids: Sequence[str], classes: Sequence[ClassName]) -> list[ClassName]:
    """``classes`` (of ``wnids``, one domain) with every name that two or more of them share with the same knowledge
    (the same prompts) qualified in each: ``crane`` becomes ``crane (wading bird)`` and ``crane (lifting device)``
    (:func:`_qualifiers`: the hypernym's name, else the gloss). Without it the two get one text embedding and the
    second is never predicted (sarahpratt/CuPL issue 2). Classes with nothing shared come back unchanged."""
    qualify: dict[int, dict[str, str]] = {}
    for (name, _), group in _same_prompts(classes).items():
        for i, qualifier in zip(group, _qualifiers([wnids[i] for i in group], name)):
            qualify.setdefault(i, {})[name] = qualifier
    out = [replace(cls, names=tuple(f"{n} ({qualify[i][n.casefold()]})" if n.casefold() in qualify.get(i, {})
                                    else n for n in cls.names)) for i, cls in enumerate(classes)]
    for (name, _), group in _same_prompts(out).items():  # a qualified name that another class already has
        raise CogError(f"concepts {', '.join(wnids[i] for i in group)} still share the name {name!r} once qualified: "
                       "zero-shot cannot give them distinct prompts")
    return out


def _lemmas(wnid: str) -> list[str]:
    """ImageNet's (WordNet's) lemmas of a synset, ``_`` as a space; an unknown wnid is refused."""
    text = resources.concept_name(wnid)
    if text == wnid:
        raise CogError(f"no name for {wnid}: not an ImageNet-21K (Fall 2011) or IN-1K synset")
    return text.split(", ")


def _lemma(wnids: Sequence[str]) -> list[ClassName]:
    return [ClassName((_lemmas(w)[0],)) for w in wnids]


def _all_lemmas(wnids: Sequence[str]) -> list[ClassName]:
    return [ClassName(tuple(_lemmas(w))) for w in wnids]


def _lemma_gloss(wnids: Sequence[str]) -> list[ClassName]:
    return [ClassName((_lemmas(w)[0],), resources.concept_gloss(w)) for w in wnids]


def hypernym_path(wnid: str, length: int = 3) -> list[str]:
    """ELEVATER's ``path_wn[:3]``: the first lemma (WordNet's spelling) of the synset, of its hypernym, and so on
    up, ``length`` names at most; the hypernym followed is the first by offset."""
    from cog_pl.wordnet import get_wordnet
    from cog_pl.wordnet.ontology import synset_of

    synset, path = synset_of(get_wordnet(), wnid), []
    while synset is not None and len(path) < length:
        path.append(synset.lemmas()[0].name())
        synset = min(synset.hypernyms(), key=lambda s: s.offset(), default=None)
    return path


def _lemma_hypernym(wnids: Sequence[str]) -> list[ClassName]:
    return [ClassName((_lemmas(w)[0],), " ".join(hypernym_path(w))) for w in wnids]


@functools.cache
def _openai_names() -> dict[str, str]:
    from cog_pl.zeroshot.prompts import openai_metadata

    return dict(zip(resources.in1k_wnids(), openai_metadata()["classnames"], strict=True))


def _openai(wnids: Sequence[str]) -> list[ClassName]:
    table = _openai_names()
    outside = [w for w in wnids if w not in table]
    if outside:
        raise CogError(f"name scheme 'openai' names the 1000 IN-1K classes only; {len(outside)} concept(s) are not "
                       f"IN-1K classes (e.g. {outside[0]}): use lemma, lemmas, lemma_gloss or lemma_hypernym")
    return [ClassName((table[w],)) for w in wnids]


#: Names of the hypernym path kept by ``demo_ancestors`` (the deepest demo concepts have fewer).
ANCESTORS = 20


def _ancestors(wnids: Sequence[str]) -> list[ClassName]:
    return [ClassName((_lemmas(w)[0],), " ".join(hypernym_path(w, ANCESTORS))) for w in wnids]


_WN = ("WordNet 3.0 lemmas as ImageNet lists them (package data synset_names.tsv.gz, from timm 1.0.31 "
       "imagenet_synset_to_lemma.txt)")
_ELEVATER = "Computer-Vision-in-the-Wild/Elevater_Toolkit_IC vision_benchmark/evaluation/feature.py"
for _scheme in (
    NameScheme("lemma", _lemma, "WordNet's first lemma", _WN),
    NameScheme("lemmas", _all_lemmas, "all lemmas, averaged over names x templates", _WN),
    NameScheme("lemma_gloss", _lemma_gloss, "first lemma; each prompt followed by ' ; {name} , {gloss}'",
               f"{_WN}; glosses synset_glosses.tsv.gz (ImageNet's gloss.txt); as {_ELEVATER} "
               "KNOWLEDGE.WORDNET.USE_DEFINITION"),
    NameScheme("lemma_hypernym", _lemma_hypernym,
               "first lemma; each prompt followed by ' ; {name} , ' and three names up the hypernym path",
               f"{_WN}; hypernyms from NLTK WordNet 3.0; as {_ELEVATER} KNOWLEDGE.WORDNET.USE_HIERARCHY"),
    NameScheme("openai", _openai, "OpenAI's curated names of the 1000 IN-1K classes (IN-1K only)",
               "openai/CLIP notebooks/Prompt_Engineering_for_ImageNet.ipynb (MIT), as mlfoundations/open_clip "
               "src/open_clip/zero_shot_metadata.py IMAGENET_CLASSNAMES (MIT) holds them"),
    NameScheme("demo_ancestors", _ancestors, "the demo's: first lemma, every WordNet ancestor as knowledge "
               "(ELEVATER's USE_HIERARCHY format, the whole path)",
               f"{_WN}; hypernyms from NLTK WordNet 3.0; the captions of cog_pl.demo.clip's demo_clip"),
):
    register_name_scheme(_scheme)
