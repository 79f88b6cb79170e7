"""The batch of traces a scheduled run has not read: new lines and new files after the watermark."""

from __future__ import annotations

from pathlib import Path

from hasp.evolve.trace_batches import new_batch


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def test_each_batch_holds_only_what_came_after_the_last(tmp_path, caplog):
    logs = tmp_path / "logs"
    (logs / "day1").mkdir(parents=True)
    (logs / "day1" / "eval.jsonl").write_text('{"a": 1}\n{"a": 2}\n{"a": 3, "partial"')  # last line unfinished
    first = new_batch(logs, None, tmp_path / "b1")
    assert first.n_lines == 2 and first.files == {"day1/eval.jsonl": 2}
    assert _lines(tmp_path / "b1" / "day1" / "eval.jsonl") == ['{"a": 1}', '{"a": 2}']
    # the unfinished line is finished, one more arrives, and a new file appears
    (logs / "day1" / "eval.jsonl").write_text('{"a": 1}\n{"a": 2}\n{"a": 3}\n{"a": 4}\n')
    (logs / "day2.jsonl").write_text('{"b": 1}\n')
    second = new_batch(logs, first.mark, tmp_path / "b2")
    assert second.files == {"day1/eval.jsonl": 2, "day2.jsonl": 1} and not second.reread
    assert _lines(tmp_path / "b2" / "day1" / "eval.jsonl") == ['{"a": 3}', '{"a": 4}']
    assert new_batch(logs, second.mark, tmp_path / "b3").n_lines == 0  # nothing new: an empty batch
    # a rotated file (its read part rewritten) is read again from its start, with one line saying so
    (logs / "day2.jsonl").write_text('{"c": 1}\n')
    third = new_batch(logs, second.mark, tmp_path / "b4")
    assert third.files == {"day2.jsonl": 1} and third.reread == ["day2.jsonl"]
    assert "day2.jsonl: its first 1 lines changed since the last run" in caplog.text


def test_a_watermark_of_another_source_reads_the_new_one_whole(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text('{"x": 1}\n')
    b.write_text('{"y": 1}\n{"y": 2}\n')
    mark = new_batch(a, None, tmp_path / "ba").mark
    assert new_batch(b, mark, tmp_path / "bb").n_lines == 2


def test_a_mark_counts_bytes_and_a_mark_of_lines_and_hash_alone_still_reads_on(tmp_path):
    from hasp.evolve.trace_batches import TAIL, _prefix_hash

    log = tmp_path / "a.jsonl"
    rows = [f'{{"i": {i}, "pad": "{"x" * 300}"}}\n' for i in range(40)]  # past TAIL bytes
    log.write_text("".join(rows[:30]))
    mark = new_batch(log, None, tmp_path / "b1").mark
    entry = mark["files"]["a.jsonl"]
    assert entry["lines"] == 30 and entry["bytes"] == log.stat().st_size > TAIL
    log.write_text("".join(rows))
    assert new_batch(log, mark, tmp_path / "b2").files == {"a.jsonl": 10}
    # a watermark kept as (lines, hash of them) is checked that way, then kept with bytes
    old = {"source": str(log), "files": {"a.jsonl": {"lines": 30, "hash": _prefix_hash(
        [r.encode() for r in rows[:30]])}}}
    again = new_batch(log, old, tmp_path / "b3")
    assert again.files == {"a.jsonl": 10} and not again.reread
    assert again.mark["files"]["a.jsonl"]["bytes"] == log.stat().st_size
