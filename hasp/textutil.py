"""Small text helpers shared by PFs, detectors and clustering (one copy of each)."""

from __future__ import annotations

import re

STOPWORDS = frozenset(
    "a an the of in on at to for from by with and or is was were be been who whom whose which what "
    "when where why how did does do that this these those it its as into than then there their his her "
    "he she they them i you we our your name year city".split())
_TOKEN = re.compile(r"[A-Za-z0-9]+")


def tokens(text: str) -> list[str]:
    return [t.lower() for t in _TOKEN.findall(text or "")]


def content_tokens(text: str) -> list[str]:
    return [t for t in tokens(text) if t not in STOPWORDS]


def jaccard(a: str, b: str) -> float:
    sa, sb = set(tokens(a)), set(tokens(b))
    if not sa or not sb:
        return 0.0
    return len(sa & sb) / len(sa | sb)


def keyword_query(text: str, max_words: int = 8) -> str:
    """A short search query: the text's content words, capitalised names first."""
    words = _TOKEN.findall(text or "")
    caps = [w for w in words if w[:1].isupper() and w.lower() not in STOPWORDS]
    rest = [w for w in words if w not in caps and w.lower() not in STOPWORDS]
    seen: list[str] = []
    for w in caps + rest:
        if w.lower() not in {s.lower() for s in seen}:
            seen.append(w)
    return " ".join(seen[:max_words])
