#!/usr/bin/env bash
# One seed of the post-training grid on benchmark v2 at 200 test questions, run from a git worktree at a
# fixed commit: edits in this checkout then change no cache key of a grid that is running or resuming.
#
#   bench/grid_v2/run.sh <seed> [more `hasp experiment grid` options, e.g. --preset E5_cpu]
#
# GRID_ROOT    run folders (default outputs/grid_v2): s<seed>/ per seed, prefect/, mlflow.db, worktree/
# GRID_COMMIT  the commit the worktree is created at (default HEAD); an existing worktree is kept as it is;
#              a part runs and resumes at one commit; parts of one grid share the untrained evaluation's key
#              (benchmark v2's grid: 31fa397 and 8a3f14b, same keys; f2fa982 changed the presets' keys only)
# GRID_PARAMS  the params file, relative to the worktree (default bench/grid_v2/params-s<seed>.yaml): a
#              variant of the grid (e.g. bench/grid_v2/hindsight/params-s<seed>.yaml) under its own GRID_ROOT
# Re-running the same command resumes from the Prefect cache. A seed's grid may run in parts (--preset),
# on fresh machines: each finished part is archived into bench/grid_runs/v2/s<seed> with
#   python bench/grid_report.py --grid $GRID_ROOT/s<seed> --ran "..." --archive bench/grid_runs/v2 --merge \
#     --records $GRID_ROOT/prefect/storage
# (bench/grid_v2/report.sh does that and reports all archived seeds together)
# and the next part (of this seed or another) starts by restoring that archive's untrained evaluation (a
# cache hit under the same key, not a re-run).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
seed=${1:?usage: bench/grid_v2/run.sh <seed> [grid options]}; shift
root=$(realpath -m "${GRID_ROOT:-$repo/outputs/grid_v2}")
wt="$root/worktree"
bash "$repo/scripts/setup.sh" >/dev/null
[ -d "$wt" ] || git -C "$repo" worktree add --detach "$wt" "${GRID_COMMIT:-HEAD}"
. "$repo/.venv/bin/activate"
export PYTHONPATH="$wt" PREFECT_HOME="$root/prefect" MLFLOW_TRACKING_URI="sqlite:///$root/mlflow.db"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
# the untrained agent does not depend on train.seed: another seed's archive holds the same evaluation
archive="$repo/bench/grid_runs/v2/s$seed"
[ -d "$archive" ] || archive=$(ls -d "$repo"/bench/grid_runs/v2/s* 2>/dev/null | head -1 || true)
[ -z "$archive" ] || python "$repo/bench/grid_restore.py" --archive "$archive" --out "$root/s$seed" \
  --storage "$PREFECT_HOME/storage"
cd "$wt"
echo "grid seed $seed at $(git rev-parse --short HEAD) -> $root/s$seed"
exec nice -n 19 python -m hasp.cli experiment grid --params "${GRID_PARAMS:-bench/grid_v2/params-s$seed.yaml}" \
  --out "$root/s$seed" --library hasp/skills/search "$@"
