#!/usr/bin/env bash
# The test suite: sets up .venv and WordNet first when they are missing, then runs pytest.
#   bash scripts/test.sh          the fast tier: every test not marked slow (about 9 minutes on 2 cores)
#   bash scripts/test.sh --all    every test, the slow ones too (whole demos, kill loops, a PostgreSQL server): CI
# Other arguments go to pytest; with a -m of their own they replace the fast tier's `-m "not slow"`.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/cog-pl ] || bash scripts/setup.sh
export NLTK_DATA="${NLTK_DATA:-$PWD/.venv/nltk_data}"
export HF_HUB_OFFLINE=1
.venv/bin/cog-pl wordnet install >/dev/null
tier=(-m "not slow")
args=()
for arg in "$@"; do
    case "$arg" in
        --all) tier=(--durations=30) ;;  # CI: the 30 slowest tests listed, to keep the suite in its budget
        -m|-m*) tier=(); args+=("$arg") ;;
        *) args+=("$arg") ;;
    esac
done
# one pytest-xdist worker per core (COG_TEST_WORKERS=0: one process), each test file on one worker (its module
# fixtures, a PostgreSQL server or a SLURM cluster, made once); tests/conftest.py starts the longest files first
workers=(-n "${COG_TEST_WORKERS:-auto}" --dist loadfile)
.venv/bin/python -m pytest -q "${workers[@]}" "${tier[@]}" "${args[@]}"
