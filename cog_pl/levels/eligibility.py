"""Which unseen ImageNet-21K concepts are eligible for the CoG levels (paper Sec. 3.2 and App. A.1).

Steps, in the order of docs/protocol.md, each reported with the count that remains:

1. drop the seen concepts (IN-1K in the paper; any set with ``cog-pl levels build --seen``);
2. drop ancestors of seen concepts ("cat" goes, since "tiger cat" is seen);
3. drop the ``person.n.01`` subtree;
4. drop concepts with fewer than 782 images;
5. drop non-leaves: with ``leaf_rule="in21k"`` a concept that is an ancestor of any IN-21K concept (App. A.1: "for any
   c1 and c2 in IN-21K, we exclude c1 if c1 is a parent of c2"; this gives 5216 = 5146 + 70 on WordNet 3.0 and Fall
   2011 counts), with ``leaf_rule="eligible"`` only an ancestor of a still-eligible concept (the main text's wording;
   5754 concepts);
6. drop the user's discard list (the paper's 70 manual discards are not public).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cog_pl.errors import CogError
from cog_pl.resources import is_wnid
from cog_pl.wordnet.ontology import Ontology

LEAF_RULES = ("in21k", "eligible")


@dataclass(frozen=True)
class Step:
    """One eligibility step: its name, how many concepts it dropped and how many remain."""

    name: str
    dropped: int
    remaining: int


def eligible_concepts(onto: Ontology, in21k: Sequence[str], in1k: Iterable[str], counts: Mapping[str, int],
                      discard: Iterable[str] = (), min_images: int = 782, person_root: str = "n00007846",
                      leaf_rule: str = "in21k", seen_name: str = "IN-1K") -> tuple[list[str], list[Step]]:
    """The eligible concepts (in ``in21k`` order) and the count after each step.

    ``in1k`` is the seen set (IN-1K in the paper), named ``seen_name`` in the steps.
    """
    if leaf_rule not in LEAF_RULES:
        raise CogError(f"unknown leaf rule {leaf_rule!r}; choose one of {', '.join(LEAF_RULES)}")
    missing = [w for w in in21k if w not in counts]
    if missing:
        raise CogError(f"no image count for {len(missing)} IN-21K synsets, e.g. {', '.join(missing[:5])}")
    steps = [Step("IN-21K concepts", 0, len(in21k))]
    current = list(in21k)

    def keep(name: str, pred) -> None:
        nonlocal current
        kept = [w for w in current if pred(w)]
        steps.append(Step(name, len(current) - len(kept), len(kept)))
        current = kept

    seen = set(in1k)
    seen_ancestors: set[str] = set()
    for w in seen:
        if w in onto.index:
            seen_ancestors |= onto.ancestor_set(w)
    person = onto.index[person_root]
    keep(f"drop {seen_name} concepts", lambda w: w not in seen)
    keep(f"drop ancestors of {seen_name} concepts", lambda w: w not in seen_ancestors)
    keep(f"drop the {person_root} (person) subtree", lambda w: person not in set(onto.ancestors[onto.index[w]]))
    keep(f"drop concepts with fewer than {min_images} images", lambda w: counts[w] >= min_images)
    basis = in21k if leaf_rule == "in21k" else current
    inner: set[str] = set()
    for w in basis:
        inner |= onto.ancestor_set(w)
    keep("drop ancestors of IN-21K concepts (keep leaves)" if leaf_rule == "in21k"
         else "drop ancestors of eligible concepts (keep leaves)", lambda w: w not in inner)
    discard = set(discard)
    keep(f"drop the discard list ({len(discard)} wnids)", lambda w: w not in discard)
    return current, steps


def read_discard_list(path: str | Path, known: Iterable[str]) -> list[str]:
    """Read a file of wnids (one per line; ``#`` starts a comment); errors name the file and the line."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise CogError(f"cannot read discard list {path}: {err}") from err
    known = set(known)
    out, problems = [], []
    for no, line in enumerate(lines, start=1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        wnid = text.split()[0]
        if not is_wnid(wnid):
            problems.append(f"{path}:{no}: {text!r} is not a wnid (expected e.g. n02123159)")
        elif wnid not in known:
            problems.append(f"{path}:{no}: {wnid} is not an ImageNet-21K synset")
        else:
            out.append(wnid)
    if problems:
        raise CogError(f"discard list has {len(problems)} bad line(s):\n" + "\n".join(problems[:20]))
    return out

