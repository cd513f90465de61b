"""Leaving the process quickly once a command has written everything.

With torch loaded, the interpreter's teardown (freeing thousands of modules, then the libraries' static
destructors) takes 0.6-0.9 s after the work is done. Commands whose every output is closed by the time they return
(``probe tune``, ``probe protocol``: results and studies are committed transactions, files are written atomically)
mark themselves ``fast_exit`` and the console entry points skip that teardown. ``main()`` functions never exit, so
calling them from Python (tests, notebooks) is unaffected.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import NoReturn


def finish(code: int, fast: bool) -> NoReturn:
    """Exit with ``code``; with ``fast``, flush logging and the standard streams and skip the teardown."""
    if not fast:
        sys.exit(code)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)
