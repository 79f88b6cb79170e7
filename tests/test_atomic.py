"""Atomic writes: the target is old or new, never half, and ends with the mode a plain write gives."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from hasp.atomic import atomic_write, default_mode, swap_dir, write_json_atomic, write_jsonl_atomic


def _mode(p) -> int:
    return stat.S_IMODE(os.stat(p).st_mode)


def test_files_get_the_umask_mode_not_mkstemps_0600(tmp_path):
    old = os.umask(0o022)
    try:
        p = write_json_atomic({"a": 1}, tmp_path / "x.json")
        assert _mode(p) == 0o644 == default_mode()
        assert json.loads(p.read_text()) == {"a": 1}
        q = write_jsonl_atomic([{"b": 2, "a": 1}], tmp_path / "r.jsonl")
        assert q.read_text() == '{"a": 1, "b": 2}\n' and _mode(q) == 0o644
    finally:
        os.umask(old)


def test_a_failing_fill_leaves_the_old_file_and_no_temp(tmp_path):
    p = write_json_atomic([1], tmp_path / "x.json")

    def boom(f):
        f.write("half")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        atomic_write(p, boom)
    assert json.loads(p.read_text()) == [1] and [x.name for x in tmp_path.iterdir()] == ["x.json"]


def test_swap_dir_replaces_and_opens_a_mkdtemp_folder(tmp_path):
    import tempfile

    old = os.umask(0o022)
    try:
        dest = tmp_path / "lib"
        dest.mkdir()
        (dest / "old.txt").write_text("old")
        tmp = Path(tempfile.mkdtemp(dir=tmp_path))
        (tmp / "new.txt").write_text("new")
        swap_dir(tmp, dest)
        assert sorted(x.name for x in dest.iterdir()) == ["new.txt"] and _mode(dest) == 0o755
        assert sorted(x.name for x in tmp_path.iterdir()) == ["lib"]
    finally:
        os.umask(old)
