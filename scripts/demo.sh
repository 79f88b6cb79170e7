#!/usr/bin/env bash
# Set up (venv, pinned install, embedded model) and run one demo evolution epoch on the embedded
# default model as a Prefect flow; prints the results table and how to open the MLflow UI.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
# bytecode is written as modules are first imported (scripts/setup.sh compiles none): a machine that
# forbids it would compile every import again in every process
unset PYTHONDONTWRITEBYTECODE
export HASP_LLM_THREADS=${HASP_LLM_THREADS:-2}  # the demo has the machine to itself
exec hasp demo "$@"
