"""Put a seed's archived untrained evaluation back into a fresh run folder, so the next part of that
seed's grid (``hasp experiment grid --preset ...``, on another machine or later) reuses it as a cache
hit instead of measuring the untrained agent again, and all parts pair against the same answers.

    python bench/grid_restore.py --archive bench/grid_runs/v2/s42 --out outputs/grid_v2/s42 \\
        --storage outputs/grid_v2/prefect/storage

The hit needs the same cache key (code, data, library, settings, model); when anything differs, the
grid measures the untrained agent again, and merging that part into the archive is refused.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hasp.track.grid_archive import restore_untrained  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--archive", type=Path, required=True, help="the seed's archive (bench/grid_runs/...)")
    ap.add_argument("--out", type=Path, required=True, help="the grid's run folder (hasp experiment grid --out)")
    ap.add_argument("--storage", type=Path, required=True, help="the task result storage ($PREFECT_HOME/storage)")
    args = ap.parse_args(argv)
    if not args.archive.is_dir():
        print(f"{args.archive}: no archive yet; the grid measures the untrained agent")
        return 0
    written = restore_untrained(args.archive, args.out, args.storage)
    print(f"{args.archive}: restored the untrained evaluation ({len(written)} files)" if written else
          f"{args.archive}: nothing restored (no cached record archived, or {args.out}/eval_untrained exists)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
