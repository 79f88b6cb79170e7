"""What one evaluated episode leaves besides its trajectory (kept out of ``Trajectory`` on purpose:
the trajectory format is shared with training data, these fields only matter to evaluation)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hasp.records import Trajectory
from hasp.domains.search.teacher_snippets import SnippetStats
from hasp.episode.judge import JudgeVerdict


@dataclass
class EpisodeRecord:
    traj: Trajectory
    start_ns: int  # wall-clock start (Unix ns): anchors the MLflow trace on real time
    snippet: SnippetStats | None = None
    judge: JudgeVerdict | None = None
    error: str = ""  # the episode raised (endpoint down, harness bug); traj.terminated == "error"

    @property
    def teacher_prompt_tokens(self) -> int:
        """Teacher tokens the agent used: PF calls (if the loop counts them) plus snippets."""
        return int(getattr(self.traj, "teacher_prompt_tokens", 0) or 0) + (self.snippet.prompt_tokens if self.snippet else 0)

    @property
    def teacher_completion_tokens(self) -> int:
        return (int(getattr(self.traj, "teacher_completion_tokens", 0) or 0)
                + (self.snippet.completion_tokens if self.snippet else 0))

    def extras(self) -> dict[str, Any]:
        """One line of ``<variant>.episodes.jsonl`` (joins the trajectory file on ``qid``)."""
        return {"qid": self.traj.qid, "start_ns": self.start_ns, "error": self.error,
                "judge": self.judge.to_dict() if self.judge else None,
                "snippet": None if self.snippet is None else {
                    "calls": self.snippet.calls, "fallbacks": self.snippet.fallbacks,
                    "prompt_tokens": self.snippet.prompt_tokens,
                    "completion_tokens": self.snippet.completion_tokens, "errors": self.snippet.errors},
                "teacher_prompt_tokens": self.teacher_prompt_tokens,
                "teacher_completion_tokens": self.teacher_completion_tokens}

    def to_dict(self) -> dict[str, Any]:
        """The whole record as JSON data (an evaluation's journal keeps finished episodes this way)."""
        return {"traj": self.traj.to_dict(), **self.extras()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "EpisodeRecord":
        snippet, judge = d.get("snippet"), d.get("judge")
        return cls(traj=Trajectory.from_dict(d["traj"]), start_ns=int(d["start_ns"]),
                   snippet=SnippetStats(**snippet) if snippet is not None else None,
                   judge=JudgeVerdict(**judge) if judge is not None else None, error=str(d.get("error", "")))
