"""SEARCH / READ tools the search-domain agent calls, as observation text for the policy.

Why so forgiving: the default policy is a 135M model. It writes READ[1], READ[Varnok Telis],
READ["doc0012"], or pastes a whole result line. Each of those should reach the intended document,
and a miss should explain how to ask correctly instead of raising, because an exception would end
the episode and teach the Teach/Evolve loops nothing.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from typing import Any, Protocol

from .retriever import Hit

__all__ = ["SearchEnvironment", "SupportsSearch"]


class SupportsSearch(Protocol):
    """What the environment needs from a retriever (BM25Retriever, an HTTP client, a fake).
    An optional ``titles() -> {doc_id: title}`` enables title and fuzzy-title READs."""

    def search(self, query: str, k: int = 3) -> list[Hit]: ...

    def get(self, doc_id: str) -> dict[str, Any] | None: ...



def _titles_of(retriever: Any) -> dict[str, str]:
    """doc id -> title when the retriever can list them (local BM25); {} for remote retrievers,
    in which case READ resolves ids and result ranks only."""
    titles = getattr(retriever, "titles", None)
    return dict(titles()) if callable(titles) else {}


_BRACKET_ID = re.compile(r"\[([^\[\]]+)\]")
_NUMBER = re.compile(r"^(?:#|no\.?|result|doc(?:ument)?)?\s*#?\s*(\d{1,3})\.?$", re.IGNORECASE)


def _clean(arg: str) -> str:
    """Strip the wrappers a sloppy policy adds: quotes, brackets, trailing punctuation."""
    s = arg.strip().strip("\"'`\u201c\u201d\u2018\u2019").strip()  # incl. curly quotes
    if len(s) > 2 and s[0] in "[(<" and s[-1] in "])>":
        s = s[1:-1].strip()
    return s.rstrip(".,;:!?").strip()


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def _body(doc: dict[str, Any]) -> str:
    """Document text without the leading title line (Search-R1 ``contents`` start with it)."""
    contents = str(doc.get("contents", ""))
    first, _, rest = contents.partition("\n")
    title = str(doc.get("title", ""))
    return rest.strip() if rest and first.strip().strip('"') == title else contents.strip()


def _shorten(text: str, limit: int | None) -> str:
    if limit is None or len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0]
    return cut + "…"


class SearchEnvironment:
    """Stateful per-episode tool surface: remembers the last search so READ[2] works."""

    def __init__(self, retriever: SupportsSearch, top_k: int = 3, snippet_chars: int = 200,
                 read_chars: int | None = 2000, fuzzy_cutoff: float = 0.75) -> None:
        self.retriever = retriever
        self.top_k = top_k
        self.snippet_chars = snippet_chars
        self.read_chars = read_chars
        self.fuzzy_cutoff = fuzzy_cutoff
        self.last_hits: list[Hit] = []
        self._titles = _titles_of(retriever)  # doc_id -> title
        self._lower_ids = {d.lower(): d for d in self._titles}
        self._by_title: dict[str, list[str]] = {}
        for doc_id, title in self._titles.items():
            self._by_title.setdefault(_norm(title), []).append(doc_id)

    # ------------------------------------------------------------------ SEARCH
    def search(self, query: str) -> tuple[str, list[Hit]]:
        """Run a query; observation is numbered lines ``1. [doc_id] Title: snippet…``."""
        q = _clean(query or "")
        if not q:
            self.last_hits = []
            return "Empty search query. Write keywords, e.g. SEARCH[founder of Quellbrook Systems].", []
        hits = self.retriever.search(q, k=self.top_k)
        self.last_hits = hits
        if not hits:
            return (f"No results for '{q}'. Try fewer or different keywords, such as a full name "
                    "from the question."), []
        lines = []
        for i, h in enumerate(hits, 1):
            doc = self.retriever.get(h.id)
            text = _body(doc) if doc else h.snippet
            lines.append(f"{i}. [{h.id}] {h.title}: {_shorten(text, self.snippet_chars)}")
        return "\n".join(lines), hits

    # ------------------------------------------------------------------ READ
    def resolve(self, ref: str) -> tuple[str | None, str]:
        """Map a sloppy reference to a doc id. Returns (doc_id or None, how it was resolved)."""
        raw = (ref or "").strip()
        for m in _BRACKET_ID.finditer(raw):  # a pasted result line: "2. [doc0012] Title: ..."
            if self.retriever.get(m.group(1).strip()) is not None:
                return m.group(1).strip(), "id"
        s = _clean(raw)
        if not s:
            return None, "empty"
        recent = [h.id for h in self.last_hits]
        if s in recent:
            return s, "id"
        num = _NUMBER.match(s)
        # a small number is a result rank ("READ[1]"), even when numeric doc ids exist (Search-R1 wiki)
        if num and 1 <= int(num.group(1)) <= len(self.last_hits):
            return self.last_hits[int(num.group(1)) - 1].id, "rank"
        for cand in (s, s.replace(" ", "")):
            if self.retriever.get(cand) is not None:
                return cand, "id"
        if s.lower() in self._lower_ids:
            return self._lower_ids[s.lower()], "id"
        key = _norm(s.split(":", 1)[0]) if ":" in s else _norm(s)
        exact = self._by_title.get(key) or self._by_title.get(_norm(s))
        if exact:
            return self._prefer_recent(exact), "title"
        return self._fuzzy(key), "fuzzy"

    def _prefer_recent(self, ids: Sequence[str]) -> str:
        recent = [h.id for h in self.last_hits]
        return next((i for i in ids if i in recent), ids[0])

    def _fuzzy(self, key: str) -> str | None:
        """Closest title; ties and near-ties go to titles shown in the last search."""
        if len(key) < 3:
            return None
        recent = {h.id for h in self.last_hits}
        best: tuple[float, int, str] | None = None
        for norm_title, ids in self._by_title.items():
            ratio = difflib.SequenceMatcher(None, key, norm_title).ratio()
            if key in norm_title or norm_title in key:  # "Velm" -> "Velm River"
                ratio = max(ratio, 0.8)
            for doc_id in ids:
                score = (round(ratio, 3), int(doc_id in recent), doc_id)
                if ratio >= self.fuzzy_cutoff and (best is None or score[:2] > best[:2]):
                    best = score
        return best[2] if best else None

    def similar_titles(self, doc_id: str, n: int = 3) -> list[str]:
        """Other titles close to this one (look-alike entities the agent should not confuse)."""
        title = _norm(self._titles.get(doc_id, ""))
        others = [t for t in self._by_title if t != title]
        close = difflib.get_close_matches(title, others, n=n, cutoff=0.8)
        return [self._titles[self._by_title[t][0]] for t in close]

    def read(self, doc_id_or_title: str) -> tuple[str, dict[str, Any] | None]:
        """Open a document by id, result number, exact or fuzzy title; never raises."""
        doc_id, how = self.resolve(doc_id_or_title)
        doc = self.retriever.get(doc_id) if doc_id else None
        if doc is None or doc_id is None:
            shown = ", ".join(f"{i}=[{h.id}] {h.title}" for i, h in enumerate(self.last_hits, 1))
            hint = f" Last results: {shown}." if shown else " Run SEARCH first."
            return (f"No document matches '{_clean(doc_id_or_title or '')}'. READ takes a doc id like "
                    f"[doc0012], a result number, or a title from the search results.{hint}"), None
        title = str(doc.get("title") or self._titles.get(doc_id, doc_id))
        text = f"[{doc_id}] {title}\n{_shorten(_body(doc), self.read_chars)}"
        if how == "fuzzy":
            text = f"(closest match for '{_clean(doc_id_or_title)}')\n" + text
        similar = self.similar_titles(doc_id)
        if similar:
            text += f"\nNote: similar titles exist: {', '.join(similar)}."
        return text, doc
