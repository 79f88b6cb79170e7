#!/usr/bin/env bash
# Set up (venv, pinned install, embedded model) and run the test suite, real-model tests included.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
exec python -m pytest -q "$@"
