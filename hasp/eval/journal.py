"""A cell's journal: the episodes an evaluation cell has finished, kept on disk as they finish.

Why: a cell of a few hundred questions runs for half an hour on a CPU engine, and its trajectory file
is written once, when the cell ends (atomically, so a reader never sees half of it). A run killed
midway (Ctrl-C, a SIGKILL, the end of a scheduled slot) would lose every finished episode. The journal,
``<dataset>/<label>.journal.jsonl`` beside the cell's outputs, appends each finished episode; a later run
of the *same* cell reads it back and runs only the questions it lacks. Journals stay until the whole
evaluation has written its metrics, so a finished cell of an interrupted evaluation is not run again.

"The same cell" is a key over everything an episode's outcome depends on (the evaluation code, the
questions, the arm and its agent settings, the library's content, the policy's identity); a journal
under another key is set aside. A policy or teacher that cannot say what it is (no ``identity()``) gets
no journal: resuming it could mix two models' episodes in one score. A remote endpoint says only its
model's name and URL: its owner is trusted not to swap the weights behind them mid-evaluation. An
episode that ended in an error is not journaled, so a resumed run tries it again (an endpoint killed
with the run is the usual cause). A torn last line (the process died while writing it) ends the read
there, logged.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from hasp.episode.records import EpisodeRecord
from hasp.fingerprint import key_of, module_closure, source_key

log = logging.getLogger(__name__)

SUFFIX = ".journal.jsonl"

#: what an evaluation episode executes: the runner, the datasets, the agent variants and all they import
EVAL_MODULES = ("hasp.eval.runner", "hasp.eval.datasets", "hasp.agent.variants")


def evaluation_code_key() -> str:
    """Code key of an evaluation: the modules above and the agent's prompt files. A journal written by
    other code is set aside, and the grid's untrained evaluation keys its cache on it (editing a
    recipe does not re-run the untrained agent)."""
    prompts = sorted((Path(__file__).resolve().parents[1] / "agent" / "prompts").glob("*.yaml"))
    return source_key([*module_closure(EVAL_MODULES), *prompts])


def identity_of(obj: Any) -> Any:
    """``obj.identity()`` (what a policy or teacher decodes with), None when it cannot say."""
    fn = getattr(obj, "identity", None)
    return fn() if callable(fn) else None


def cell_key(*parts: Any) -> str | None:
    """The journal key of a cell from what its episodes depend on; None if any part is unknown (None)."""
    return None if any(p is None for p in parts) else key_of(*parts)


class CellJournal:
    """Finished episodes of one cell under ``key`` in ``path``; ``done`` maps the item's index in the
    cell's question list (which the key pins) -> record."""

    def __init__(self, path: Path, key: str) -> None:
        self.path, self.key = path, key
        self.done: dict[int, EpisodeRecord] = self._read()
        if not self.done:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"journal": key}) + "\n", encoding="utf-8")
        self._f = open(path, "a", encoding="utf-8")

    def _read(self) -> dict[int, EpisodeRecord]:
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError):
            return {}
        try:
            head = json.loads(lines[0]) if lines else {}
        except json.JSONDecodeError:
            head = {}
        if not isinstance(head, dict) or head.get("journal") != self.key:
            if lines:
                log.warning("%s: a journal of another cell (other questions, settings, skills or model); "
                            "starting the cell afresh", self.path)
            return {}
        done: dict[int, EpisodeRecord] = {}
        for n, line in enumerate(lines[1:], 2):
            try:
                row = json.loads(line)
                done[int(row["item"])] = EpisodeRecord.from_dict(row["record"])
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
                log.warning("%s:%d: unreadable journal line (%s); the episodes from here on run again",
                            self.path, n, type(e).__name__)
                break
        if done:
            log.info("%s: resuming with %d finished episode(s)", self.path, len(done))
        return done

    def append(self, item: int, rec: EpisodeRecord) -> None:
        """Keep the episode of the cell's ``item``-th question (not one that ended in an error)."""
        if rec.error or rec.traj.terminated == "error":
            return
        self._f.write(json.dumps({"item": item, "record": rec.to_dict()}) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()


def journal_path(out_dir: Path, dataset: str, label: str) -> Path:
    return out_dir / dataset / f"{label}{SUFFIX}"
