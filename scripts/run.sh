#!/usr/bin/env bash
# The main job on the embedded default (no ImageNet needed): build the CoG levels from WordNet 3.0 with the
# package's Fall 2011 image counts, report eligibility and agreement with the official levels, plot them.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/cog-pl ] || bash scripts/setup.sh
export NLTK_DATA="${NLTK_DATA:-$PWD/.venv/nltk_data}"
.venv/bin/cog-pl wordnet install
mkdir -p out
.venv/bin/cog-pl levels build --out out/levels.json --plot out/levels.png "$@"
.venv/bin/cog-pl levels show out/levels.json
