#!/usr/bin/env bash
# Set up (venv, pinned install, embedded model) and run the test suite, real-model tests included.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
# bytecode is written as modules are first imported (scripts/setup.sh compiles none): a machine that
# forbids it would compile every import again in every process
unset PYTHONDONTWRITEBYTECODE
# two pytest-xdist workers, one per core of a 2-core machine, each given whole modules, those that start a
# model or a service first (tests/conftest.py); HASP_TEST_WORKERS=0 runs them in this process
exec python -m pytest -q -n "${HASP_TEST_WORKERS:-2}" --dist loadscope --no-loadscope-reorder "$@"
