#!/usr/bin/env bash
# The main job on the embedded default (no ImageNet, no downloads): `cog-pl demo`, the whole ImageNet-CoG pipeline on
# a miniature benchmark generated on the spot. Extra arguments go to `cog-pl demo` (see `cog-pl demo --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/cog-pl ] || bash scripts/setup.sh
export NLTK_DATA="${NLTK_DATA:-$PWD/.venv/nltk_data}"
export HF_HUB_OFFLINE=1
.venv/bin/cog-pl wordnet install > /dev/null  # errors still reach stderr
.venv/bin/cog-pl demo "$@"
