#!/usr/bin/env bash
# Set up (venv, pinned install, embedded model) and run the test suite, real-model tests included.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
# Two workers (pytest-xdist): the tests that start the model or a service run in order on one of them
# (tests/conftest.py groups them), the quick tests on the other beside them. `-n 0` runs everything in one.
exec python -m pytest -q -n "${HASP_TEST_WORKERS:-2}" --dist loadgroup "$@"
