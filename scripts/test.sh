#!/usr/bin/env bash
# The test suite: sets up .venv and WordNet first when they are missing, then runs pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/cog-pl ] || bash scripts/setup.sh
export NLTK_DATA="${NLTK_DATA:-$PWD/.venv/nltk_data}"
export HF_HUB_OFFLINE=1
.venv/bin/cog-pl wordnet install >/dev/null
.venv/bin/python -m pytest -q "$@"
