"""Small text helpers shared by PFs, detectors, clustering and the action and answer parsers (one copy of each)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache
from itertools import compress, filterfalse, islice
from operator import itemgetter, not_

STOPWORDS = frozenset("""
a an the of in on at to for from by with and or but is are was were be been being it its this that
these those which who whom whose what when where why how did does do done has have had not no yes
as into than then there their they them he she his her him i you we our your my me about after
before during over under between also only just very can could would should will shall may might
must so if else while because one any some all each other such same
""".split())

_TOKEN = re.compile(r"[a-z0-9]+")


def tokens(text: str | None) -> list[str]:
    """Lower-case alphanumeric tokens; underscores split words (``query_too_broad`` -> 3 tokens)."""
    return list(_tokens(text or ""))


# PFs re-tokenise the same question / thought / results on every step of an episode and across
# the 26 PFs of one dispatch; caching keeps harness time per step in microseconds.
@lru_cache(maxsize=4096)
def _tokens(text: str) -> tuple[str, ...]:
    return tuple(_split(text))


def _split(text: str) -> list[str]:
    """The one tokenisation rule (lower-case alphanumeric runs, underscores split words)."""
    return _TOKEN.findall(text.lower().replace("_", " "))


@lru_cache(maxsize=1 << 16)  # a C-level lookup per token instead of running this body again
def _stem(tok: str) -> str:
    """A very light plural strip so 'queries'/'query' and 'searches'/'search' meet."""
    if len(tok) > 4 and tok.endswith("ies"):
        return tok[:-3] + "y"
    if len(tok) > 4 and tok.endswith("es") and tok[-3] in "sxz":
        return tok[:-2]
    if len(tok) > 3 and tok.endswith("s") and not tok.endswith("ss"):
        return tok[:-1]
    return tok


def content_tokens(text: str | None) -> list[str]:
    """Tokens without stopwords, lightly stemmed: what 'content tokens' means everywhere here."""
    return list(_content_tokens(text or ""))


@lru_cache(maxsize=4096)
def _content_tokens(text: str) -> tuple[str, ...]:
    # map/filterfalse keep the per-token loop in C: a new document is tokenised on the first
    # step after its READ, inside the PFs' dispatch time
    return tuple(map(_stem, filterfalse(STOPWORDS.__contains__, _tokens(text))))


def content_token_set(text: str) -> frozenset[str]:
    """``frozenset(content_tokens(text))`` without the memo: for one-off texts such as the
    sentences of a newly read document, where caching would only churn the cache. The whole
    computation is C-level calls (no Python frame per token)."""
    return frozenset(map(_stem, set(_split(text)) - STOPWORDS))


def jaccard(a: Iterable[str] | str, b: Iterable[str] | str) -> float:
    """Token-set Jaccard; strings are tokenised with ``tokens`` (stopwords kept). Empty/empty = 0."""
    sa = set(_tokens(a)) if isinstance(a, str) else set(a)
    sb = set(_tokens(b)) if isinstance(b, str) else set(b)
    if not sa and not sb:
        return 0.0
    return len(sa & sb) / len(sa | sb)




_QUERY_STOP = STOPWORDS | {"name", "year", "city", "located", "born"}
_CAPITALISED = re.compile(r"(?<![A-Za-z0-9])[A-Z][A-Za-z0-9]*")  # the [A-Za-z0-9]+ words starting A-Z
_UNCAPITALISED = re.compile(r"(?<![A-Za-z0-9])[a-z0-9][A-Za-z0-9]*")  # ... and the others


def keyword_query(text: str, max_words: int = 8) -> str:
    """A short search query: the text's content words, capitalised names first."""
    return _keyword_query(text or "", max_words)


@lru_cache(maxsize=1024)  # the same question is turned into a query by several PFs and handlers
def _keyword_query(text: str, max_words: int) -> str:
    # capitalised words first, then the rest, each group in text order; stopwords dropped; the
    # first spelling of each word (case-insensitively) kept. Written as C-level calls: it runs on
    # the first FINAL/SEARCH step of an episode, inside the PFs' dispatch time.
    words = _CAPITALISED.findall(text) + _UNCAPITALISED.findall(text)
    lows = list(map(str.lower, words))
    pairs = list(compress(zip(lows, words), map(not_, map(_QUERY_STOP.__contains__, lows))))
    spelling = dict(reversed(pairs))  # lower-case word -> its first spelling
    return " ".join(map(spelling.__getitem__, islice(dict.fromkeys(map(itemgetter(0), pairs)), max_words)))


def balanced(text: str, start: int, open_ch: str, close_ch: str) -> tuple[str, int] | None:
    """Content between ``text[start] == open_ch`` and its matching ``close_ch`` (and that closer's
    index), or None when it never closes: nested pairs stay inside, so ``FINAL[(1+1+1)*8]`` and
    ``\\boxed{\\frac{1}{2}}`` keep their inner brackets."""
    depth = 0
    for i in range(start, len(text)):
        c = text[i]
        if c == open_ch:
            depth += 1
        elif c == close_ch:
            depth -= 1
            if depth == 0:
                return text[start + 1:i], i
    return None


def truncate(text: str, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters with an ellipsis when it was longer."""
    flat = " ".join((text or "").split())
    return flat if len(flat) <= limit else flat[: max(0, limit - 1)] + "…"
