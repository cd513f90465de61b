#!/usr/bin/env bash
# Create .venv (if missing) with the pinned stack, the test and docs extras, and cog_pl installed in editable mode.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[test,docs]"
