"""What a zero-shot row's numbers depend on beyond the model and data: the name scheme and the template set.

A row records :func:`zeroshot_identity` (the names are registry names; a user's template file is recorded by its
key and the digest of its templates), and a row made with other names or templates is refused in one line by
:func:`check_zeroshot_identity`, so a results store never mixes prompts unseen.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cog_pl.errors import CogError
from cog_pl.zeroshot.names import NameScheme, get_name_scheme
from cog_pl.zeroshot.prompts import TemplateSet, get_templates

__all__ = ["check_zeroshot_identity", "zeroshot_identity"]


def zeroshot_identity(names: str | NameScheme, templates: str | TemplateSet) -> dict[str, Any]:
    """The identity fields of a zero-shot row: ``names`` (scheme), ``templates`` (set name) and
    ``templates_sha256`` (the templates' digest); unknown names are refused with the closest known one."""
    scheme, tset = get_name_scheme(names), get_templates(templates)
    return {"names": scheme.name, "templates": tset.name, "templates_sha256": tset.sha256()}


def check_zeroshot_identity(recorded: Mapping[str, Any], names: str | NameScheme, templates: str | TemplateSet,
                            what: str = "a zero-shot result") -> None:
    """Refuse, in one line, ``recorded`` identity fields made with other names or templates than the study's."""
    expected = zeroshot_identity(names, templates)
    differ = [k for k, v in expected.items() if recorded.get(k) != v]
    if differ:
        made = ", ".join(f"{k} {recorded.get(k)!r}" for k in differ)
        want = ", ".join(f"{k} {expected[k]!r}" for k in differ)
        raise CogError(f"{what} was made with {made}, not the study's {want}: evaluate it again with the study's "
                       "names and templates (or --overwrite)")
