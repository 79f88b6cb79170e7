"""Teacher-snippet mode (paper App. D.4): the teacher condenses each SEARCH, READ is disabled.

Why: rollouts then cost one bounded teacher call per search instead of long READ observations,
and they no longer depend on how well a small policy picks documents to open. The teacher sees
only the top-k documents the retriever returned, so it summarises evidence; it does not answer
from its own knowledge (the prompt says so, and the sources are listed under the snippet).

When the teacher fails (exception or empty reply) the plain retriever snippets are shown instead;
the failure is logged and counted in :class:`SnippetStats`, so a report can say how many searches
were not teacher-written.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from hasp.pf.teacher import teacher_reply
from hasp.prompts import prompt, render

from .retriever import Hit
from .tools import SearchEnvironment, _body, _shorten

__all__ = ["READ_DISABLED", "SnippetStats", "TeacherSnippetEnvironment"]

log = logging.getLogger(__name__)

READ_DISABLED = prompt("hasp.domains.search", "teacher_snippets", "read_disabled")

#: rough characters per token, to turn the token budget into a hard character cap on the reply
_CHARS_PER_TOKEN = 5


@dataclass
class SnippetStats:
    """Per-environment (per-episode) counters; the evaluation sums them."""

    calls: int = 0
    fallbacks: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    errors: list[str] = field(default_factory=list)


class TeacherSnippetEnvironment:
    """Wraps a :class:`SearchEnvironment`; same ``search``/``read`` surface as the agent loop expects."""

    def __init__(self, inner: SearchEnvironment, teacher: Any, *, max_tokens: int = 200,
                 doc_chars: int = 600) -> None:
        if teacher is None:
            raise ValueError("teacher-snippet mode needs a teacher (set teacher.embedded or teacher.base_url in params.yaml)")
        self.inner = inner
        self.teacher = teacher
        self.max_tokens = max_tokens
        self.doc_chars = doc_chars
        self.stats = SnippetStats()

    def _documents(self, hits: list[Hit]) -> str:
        parts = []
        for i, h in enumerate(hits, 1):
            doc = self.inner.retriever.get(h.id)
            text = _body(doc) if doc else h.snippet
            parts.append(f"[{i}] {h.title}\n{_shorten(text, self.doc_chars)}")
        return "\n\n".join(parts)

    def search(self, query: str) -> tuple[str, list[Hit]]:
        plain, hits = self.inner.search(query)
        if not hits:  # nothing retrieved: the inner message already tells the agent what to do
            return plain, hits
        self.stats.calls += 1
        words = max(10, int(self.max_tokens * 0.7))
        messages = [{"role": "system", "content": render("hasp.domains.search", "teacher_snippets", "system", words=words)},
                    {"role": "user", "content": f"Query: {query.strip()}\n\nDocuments:\n{self._documents(hits)}"}]
        try:
            reply = teacher_reply(self.teacher, messages, max_tokens=self.max_tokens)
            self.stats.prompt_tokens += reply.prompt_tokens
            self.stats.completion_tokens += reply.completion_tokens
            text = " ".join(reply.text.split())
            if not text:
                raise ValueError("the teacher returned an empty snippet")
        except Exception as e:  # noqa: BLE001 - any teacher failure degrades to plain snippets, counted
            self.stats.fallbacks += 1
            self.stats.errors.append(f"{type(e).__name__}: {e}"[:300])
            log.warning("teacher snippet for %r failed (%s: %s); showing plain search results",
                        query[:80], type(e).__name__, e)
            return plain, hits
        text = _shorten(text, self.max_tokens * _CHARS_PER_TOKEN)
        sources = "; ".join(f"[{h.id}] {h.title}" for h in hits)
        return f"Summary of the top {len(hits)} results: {text}\nSources: {sources}", hits

    def read(self, ref: str) -> tuple[str, dict[str, Any] | None]:
        return READ_DISABLED, None
