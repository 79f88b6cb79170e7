"""The phase reporter: counts in completion order, ETA from the finished items, one result line."""

from __future__ import annotations

import io
import threading
import time

from hasp.agent.rollout import run_many
from hasp.progress import Progress, format_duration


class ClockDouble:
    """A settable monotonic clock, so ETA arithmetic is checked without sleeping."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_format_duration() -> None:
    assert format_duration(0) == "0:00"
    assert format_duration(75) == "1:15"
    assert format_duration(3725) == "1:02:05"


def test_eta_unknown_until_first_item_then_counts_down() -> None:
    clock, out = ClockDouble(), io.StringIO()
    p = Progress("A rollout", 4, stream=out, clock=clock, heartbeat_s=3600, min_interval_s=0)
    p.start()
    assert p.eta() is None and "ETA ?" in p.line()
    clock.t += 10
    p.advance()                      # 1 of 4 after 10 s: projected 40 s, 30 s left
    assert p.eta() == 30.0
    clock.t += 5                     # nothing finished for 5 s: the ETA still moves
    assert p.eta() == 25.0
    clock.t += 5
    p.advance()                      # 2 of 4 after 20 s: projected 40 s, 20 s left
    assert p.eta() == 20.0
    clock.t += 20
    p.advance(2)
    assert p.eta() == 0.0 and p.done == 4
    p.finish("4 trajectories, 1 answered")
    text = out.getvalue().splitlines()
    assert text[0] == "▶ A rollout: 4 items"
    assert "… A rollout: 1/4 items · 0:10 elapsed · ETA 0:30" in text
    assert text[-1] == "✓ A rollout: 4 trajectories, 1 answered [0:40]"


def test_failure_line_names_the_phase_and_count() -> None:
    out = io.StringIO()
    try:
        with Progress("D validate", 3, stream=out, heartbeat_s=3600) as p:
            p.advance()
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert "✗ D validate: stopped after 1/3 items" in out.getvalue()


def test_disabled_by_environment(monkeypatch) -> None:
    monkeypatch.setenv("HASP_PROGRESS", "0")
    out = io.StringIO()
    with Progress("x", 2, stream=out) as p:
        p.advance(2)
    assert out.getvalue() == ""


def test_run_many_counts_episodes_as_they_finish_and_keeps_input_order(capsys) -> None:
    """The first submitted episode is the slowest: the count must move before it ends."""
    release = threading.Event()
    seen_counts: list[str] = []

    def episode(i: int) -> int:
        if i == 0:
            release.wait(5)
        return i * 10

    def watcher() -> None:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            err = capsys.readouterr().err
            seen_counts.append(err)
            if "1/3 episodes" in "".join(seen_counts):
                break
            time.sleep(0.01)
        release.set()

    t = threading.Thread(target=watcher)
    t.start()
    out = run_many([0, 1, 2], episode, concurrency=3, desc="rollout")
    t.join()
    assert out == [0, 10, 20]
    assert "1/3 episodes" in "".join(seen_counts)


def test_summary_line_flattens_one_level_and_formats_numbers() -> None:
    from hasp.progress import summary_line

    assert summary_line({"counts": {"train": 4, "test": 4}, "hops": {2: 7}}) == "counts.train=4, counts.test=4, hops.2=7"
    assert summary_line({"em": 0.25, "skipped": True, "nested": {"deep": {"x": 1}}}) == "em=0.250, skipped"
    assert summary_line({}) == "done" and summary_line("abc123") == "abc123"
