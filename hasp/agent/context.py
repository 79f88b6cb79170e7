"""Episode state and the step-context dict PFs see (field names of paper App. C.5)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

CONFLICT_WORDS = ("however", "but", "not", "contrary", "disputed", "although", "never")


@dataclass
class EpisodeState:
    question: str
    max_steps: int
    step_count: int = 0
    search_count: int = 0
    read_count: int = 0
    empty_results: bool = False
    queries: list[str] = field(default_factory=list)
    action_history: list[str] = field(default_factory=list)
    last_search_results_text: str = ""
    last_search_hits: list[dict[str, str]] = field(default_factory=list)
    seen_hits: list[dict[str, str]] = field(default_factory=list)
    read_ids: list[str] = field(default_factory=list)
    read_contents: list[str] = field(default_factory=list)
    #: did the last executed action fail (a READ that found no document, a SEARCH with no results,
    #: a tool budget used up), and how many executed actions in a row failed
    last_failed: bool = False
    failed_streak: int = 0
    #: model replies so far that named no action (they never reach the PFs, so PFs learn of them here)
    parse_failures: int = 0
    private: dict[str, Any] = field(default_factory=dict)  # PF counters ("_"-prefixed keys)

    @property
    def has_read(self) -> bool:
        return self.read_count > 0

    def contradictory_sources(self) -> bool:
        text = " ".join(self.read_contents).lower()
        return sum(text.count(f" {w} ") for w in CONFLICT_WORDS) >= 3

    def to_ctx(self, thought: str = "") -> dict[str, Any]:
        """A fresh dict per step: PFs may write private keys, which ``absorb`` keeps."""
        return {
            "question": self.question,
            "step_count": self.step_count,
            "has_read": self.has_read,
            "search_count": self.search_count,
            "read_count": self.read_count,
            "empty_results": self.empty_results,
            "contradictory_sources": self.contradictory_sources(),
            "max_steps": self.max_steps,
            "action_history": list(self.action_history),
            # derived here, where they are known, so PFs need not re-parse history / split documents
            "last_action": self.action_history[-1].partition("[")[0] if self.action_history else "",
            "last_read": self.read_contents[-1] if self.read_contents else "",
            "last_search_results_text": self.last_search_results_text,
            "all_read_contents": "\n\n".join(self.read_contents),
            "thought": thought,
            "queries": list(self.queries),
            "last_search_hits": [dict(h) for h in self.last_search_hits],
            "seen_hits": [dict(h) for h in self.seen_hits],
            "read_ids": list(self.read_ids),
            "last_action_failed": self.last_failed,
            "failed_streak": self.failed_streak,
            "parse_failures": self.parse_failures,
            **self.private,
        }

    def record_search(self, query: str, text: str, hits: list[dict[str, str]]) -> None:
        """A SEARCH ran: ``text`` is the tool's observation, ``hits`` its results as ``{id, title}``.
        The loop and the replay of a recorded trajectory (``hasp.agent.replay``) both step the state here."""
        self.search_count += 1
        self.queries.append(query)
        self.empty_results = not hits
        self.last_search_results_text = text
        self.last_search_hits = [dict(h) for h in hits]
        known = {h["id"] for h in self.seen_hits}
        self.seen_hits += [h for h in self.last_search_hits if h["id"] not in known]

    def record_read(self, doc_id: str, contents: str) -> None:
        """A READ opened a document (the loop and the replay, as ``record_search``)."""
        self.read_count += 1
        self.read_ids.append(doc_id)
        self.read_contents.append(contents)

    def note_outcome(self, failed: bool) -> None:
        """Record whether the action just executed failed (see ``last_failed``)."""
        self.last_failed = failed
        self.failed_streak = self.failed_streak + 1 if failed else 0

    def absorb(self, ctx: dict[str, Any]) -> None:
        self.private.update({k: v for k, v in ctx.items() if k.startswith("_")})

    def snapshot(self) -> dict[str, Any]:
        """s_t for the audit record: small, so trajectories stay readable."""
        return {"step_count": self.step_count, "has_read": self.has_read,
                "search_count": self.search_count, "read_count": self.read_count,
                "empty_results": self.empty_results, "n_seen_docs": len(self.seen_hits)}
