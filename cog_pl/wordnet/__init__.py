"""WordNet 3.0 through NLTK: provisioning, the IN-21K ontology and bulk similarity measures."""

from __future__ import annotations

import functools
import logging
from pathlib import Path

from cog_pl.wordnet.provision import (
    WordNetUnavailable,
    check_corpus,
    default_data_dir,
    install,
    open_reader,
    verified_reader,
)

logger = logging.getLogger(__name__)

__all__ = ["WordNetUnavailable", "check_corpus", "get_wordnet", "install", "open_reader"]


@functools.lru_cache(maxsize=1)
def get_wordnet():
    """NLTK's WordNet 3.0 reader; installs WordNet on first use when NLTK cannot find it."""
    import nltk

    try:
        return verified_reader(Path(nltk.data.find("corpora/wordnet")))[0]
    except (LookupError, WordNetUnavailable) as err:
        logger.warning("WordNet 3.0 is not available to NLTK (%s); installing it into %s "
                       "(run `cog-pl wordnet install` to choose where).", str(err).splitlines()[0][:120],
                       default_data_dir())
        install()
    return verified_reader(Path(nltk.data.find("corpora/wordnet")))[0]
