#!/usr/bin/env bash
# Archive one finished part of a seed's grid and report every archived seed of benchmark v2 together.
#
#   bench/grid_v2/report.sh <seed> "<remark on how the part ran>" <preset>...
#
# GRID_ROOT   the run's root, as given to bench/grid_v2/run.sh (default outputs/grid_v2)
# RAN_SUFFIX  appended to the part's "ran" command, e.g. ", run twice: the second resumed the first"
#
# Two steps, so that the results section names a command a clone can re-run and a clean commit:
# 1. the part's finished presets are merged into bench/grid_runs/v2/s<seed> (with the untrained
#    evaluation's Prefect record) and that archive is committed;
# 2. the section "Post-training grid at 200 benchmark-v2 test questions, archived part by part" of
#    bench/RESULTS.md is written again from the archives alone; the remark is appended to its note.
#    This step leaves bench/RESULTS.md uncommitted, for review.
# A part still running is archived with its finished presets only (step 1 prints which); the archive
# commit's message names the part's presets, so amend it then.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
seed=${1:?usage: bench/grid_v2/report.sh <seed> "<remark>" <preset>...}
remark=${2:?usage: bench/grid_v2/report.sh <seed> "<remark>" <preset>...}
shift 2
[ $# -gt 0 ] || { echo "report.sh: name the part's presets" >&2; exit 2; }
root=$(realpath -m "${GRID_ROOT:-$repo/outputs/grid_v2}")
section="Post-training grid at 200 benchmark-v2 test questions, archived part by part"
py="$repo/.venv/bin/python"
commit=$(git -C "$root/worktree" rev-parse --short HEAD)
flags=""; for p in "$@"; do flags="$flags --preset $p"; done
cd "$repo"
git diff --quiet -- bench/RESULTS.md || { echo "report.sh: bench/RESULTS.md has uncommitted edits" >&2; exit 2; }

nice "$py" bench/grid_report.py --grid "$root/s$seed" \
  --ran "bench/grid_v2/run.sh $seed$flags${RAN_SUFFIX:-} (GRID_ROOT=$root, worktree at $commit)" \
  --archive bench/grid_runs/v2 --merge --records "$root/prefect/storage" --section scratch
git checkout -- bench/RESULTS.md
git add "bench/grid_runs/v2/s$seed"
git commit -qm "Grid archive: seed $seed's $(IFS=+; echo "$*") (benchmark v2, 200 test questions)"

note=$(grep -m1 '^- note: In progress, archived part by part' bench/RESULTS.md | sed 's/^- note: //' || true)
args=()
for archive in bench/grid_runs/v2/s*; do
  s=${archive##*/s}
  args+=(--grid "$archive" --ran "bench/grid_v2/run.sh $s in parts, see its part lines for each part's commit (GRID_ROOT=$root); report from the archive")
done
HASP_BENCH_NOTE="${note:+$note }$remark" nice "$py" bench/grid_report.py "${args[@]}" --section "$section" | tail -1
