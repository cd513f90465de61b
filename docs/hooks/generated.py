"""MkDocs hook: pages whose content is generated from the code when the site is built, so they cannot go stale.

A page holding ``<!-- generated: cli -->`` gets every ``cog-pl`` command and option from the parsers
(:func:`cog_pl.cli.reference.cli_markdown`); ``<!-- generated: configs -->`` the table of packaged configs;
``<!-- generated: methods -->`` the table of the registered evaluation methods (:mod:`cog_pl.evaluate.table`).
"""

from __future__ import annotations

import functools

MARKERS = {"<!-- generated: cli -->": "cli_markdown", "<!-- generated: configs -->": "configs_markdown",
           "<!-- generated: methods -->": "methods_markdown"}


@functools.cache
def _generated(function: str) -> str:
    from cog_pl.cli import reference

    return getattr(reference, function)()


def on_page_markdown(markdown: str, **kwargs) -> str:
    for marker, function in MARKERS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, _generated(function))
    return markdown
