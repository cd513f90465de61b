"""What a zero-shot classifier depends on beyond the model and data: names, templates, and how texts become tokens.

A row records :func:`zeroshot_identity`: the name scheme (a registry name), the template set (a user's file by its key
and the digest of its templates), the rule that gives concepts of a domain sharing a name distinct prompts
(:data:`~cog_pl.zeroshot.names.DISTINCT_NAMES`) and, given the text tower, how it turns texts into tokens
(:func:`~cog_pl.models.text.text_handling`: tokenizer, cleaning, context length, padding, the position read). A
row made otherwise is refused in one line by :func:`check_zeroshot_identity`, so a results store never mixes
prompts or tokenizations unseen.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cog_pl.errors import CogError
from cog_pl.zeroshot.names import DISTINCT_NAMES, NameScheme, get_name_scheme
from cog_pl.zeroshot.prompts import TemplateSet, get_templates

if TYPE_CHECKING:
    from cog_pl.models.text import TextTower

__all__ = ["check_zeroshot_identity", "zeroshot_identity"]


def zeroshot_identity(names: str | NameScheme, templates: str | TemplateSet,
                      tower: TextTower | None = None) -> dict[str, Any]:
    """The identity fields of a zero-shot classifier: ``names`` (scheme), ``templates`` (set name),
    ``templates_sha256`` (the templates' digest), ``distinct_names`` (how shared names are told apart) and, with
    ``tower``, ``text`` (how it makes tokens); unknown names are refused with the closest known one."""
    scheme, tset = get_name_scheme(names), get_templates(templates)
    ident = {"names": scheme.name, "templates": tset.name, "templates_sha256": tset.sha256(),
             "distinct_names": DISTINCT_NAMES}
    if tower is not None:
        from cog_pl.models.text import text_handling  # (torch, only where a tower is given)

        ident["text"] = text_handling(tower)
    return ident


def check_zeroshot_identity(recorded: Mapping[str, Any], names: str | NameScheme, templates: str | TemplateSet,
                            what: str = "a zero-shot result", tower: TextTower | None = None) -> None:
    """Refuse, in one line, ``recorded`` identity fields made with other names, templates, shared-name rule or (with
    ``tower``) tokenization than the study's."""
    expected = zeroshot_identity(names, templates, tower)
    differ = [k for k, v in expected.items() if recorded.get(k) != v]
    if differ:
        made = ", ".join(f"{k} {recorded.get(k)!r}" for k in differ)
        want = ", ".join(f"{k} {expected[k]!r}" for k in differ)
        raise CogError(f"{what} was made with {made}, not the study's {want}: evaluate it again with the study's "
                       "names, templates and text tower (or --overwrite)")
