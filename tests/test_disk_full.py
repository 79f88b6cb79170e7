"""Disk full on a write: an artifact keeps its old content, no temp file is left, and the next
write (space back) succeeds. The limit is real: RLIMIT_FSIZE in a child process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_a_write_that_hits_the_size_limit_keeps_the_old_artifact(tmp_path: Path) -> None:
    target = tmp_path / "candidates.json"
    target.write_text(json.dumps([{"skill_id": "old"}]))
    script = tmp_path / "full.py"
    script.write_text(textwrap.dedent(f"""
        import resource, signal, sys
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a kill, as on a full disk
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
        from hasp.atomic import write_json
        try:
            write_json([{{"skill_id": "new", "code": "x" * 100000}}], {str(target)!r})
        except OSError as e:
            print("OSError", e.errno, flush=True)
            sys.exit(3)
    """))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert r.returncode == 3 and r.stdout.startswith("OSError"), r.stderr[-500:]
    assert json.loads(target.read_text()) == [{"skill_id": "old"}]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []

    from hasp.atomic import write_json

    write_json([{"skill_id": "new"}], target)  # space back: the rerun writes it whole
    assert json.loads(target.read_text()) == [{"skill_id": "new"}]
