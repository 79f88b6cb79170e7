"""Cheap, pure helpers the web-search seed PFs share (``hasp/skills/search/*/pf.py``).

Why a module: 26 seed PFs ask the same small questions of the step context — how
many steps are left, what the last READ returned, is the question multi-hop, is an
answer grounded in what was read. One copy here keeps their triggers consistent
and keeps each ``pf.py`` about *when* and *how*, not about text plumbing.

Everything here is pure (no I/O, no model calls) and precompiles its regexes, so
it is safe inside ``should_activate``, which runs on every step. The text scans are
memoised on the text itself: the same results / document text is looked at by several
PFs and again on later steps, and the harness budget per step is a few hundred µs. Only the step
context keys of ``hasp.agent.context.EpisodeState.to_ctx`` are read.
"""

from __future__ import annotations

import re
from functools import lru_cache, partial
from typing import Any

from hasp.textutil import content_token_set, content_tokens

_SENTENCE = re.compile(r"[^.!?\n]+[.!?]?")
_OF = re.compile(r"\bof\b", re.I)
_POSSESSIVE = re.compile(r"\w's\b")
_RELATIVE = re.compile(r"\b(who|which|that|whose|where)\b", re.I)
_WH_OPENING = re.compile(r"^\s*(?:(?:in|at|on|from|for|by|to)\s+)?(?:who|whom|whose|which|what|where|when)\b", re.I)
_WH_OF = re.compile(r"^\s*(who|what)\s+(is|was)\s+the\s+\w+\s+of\b", re.I)
_WH_START = re.compile(r"^\s*(who|which|what|where|when|in which|in what|how)\b", re.I)
# Capitalised word runs ("Holor Textiles", "Verzi Thal"); a sentence-initial function word is dropped.
_NAME = re.compile(r"\b[A-Z][\w'\-]*(?:\s+(?:of\s+|de\s+|von\s+)?[A-Z][\w'\-]*)*")
_LEADING_FUNCTION = frozenset("The A An In On At Of He She It They His Her Its Their This That These Those "
                              "Who What Which When Where How Contrary According However".split())
# the leading function words of a name match, each a whole word ("The Hague" -> "Hague")
_strip_leading = partial(re.compile(r"^(?:(?:%s)(?:\s+|$))+" % "|".join(sorted(_LEADING_FUNCTION))).sub, "")
_ACTION = re.compile(r"^\s*(SEARCH|READ|FINAL)\[(.*)\]\s*$", re.S)

#: a shared per-episode budget for PFs that turn a FINAL into another action: without it
#: seven independent FINAL-redirecting PFs could keep a 5-step episode from ever answering
FINAL_REDIRECT_KEY = "_final_redirects"
MAX_FINAL_REDIRECTS = 3


def sentences(text: str) -> list[str]:
    """Sentences (or lines) of ``text``, stripped, empty ones dropped."""
    return [s for s, _ in sentence_tokens(text)]


@lru_cache(maxsize=1024)
def _sentence_tokens(text: str) -> tuple[tuple[str, frozenset[str]], ...]:
    return tuple((s, content_token_set(s)) for s in map(str.strip, _SENTENCE.findall(text)) if s)


def sentence_tokens(text: str) -> tuple[tuple[str, frozenset[str]], ...]:
    """``(sentence, its content tokens)`` for each sentence of ``text`` (memoised, immutable)."""
    return _sentence_tokens(text or "")


@lru_cache(maxsize=1024)
def count_matches(pattern: re.Pattern[str], text: str) -> int:
    """``len(pattern.findall(text))``, memoised: cue counts over the same results text recur."""
    return len(pattern.findall(text))


def steps_left(ctx: dict[str, Any]) -> int:
    """Steps still available after the current one (``max_steps`` and 0-based ``step_count``)."""
    return int(ctx.get("max_steps", 0) or 0) - int(ctx.get("step_count", 0) or 0) - 1


def can_redirect_final(ctx: dict[str, Any]) -> bool:
    """May a PF turn this FINAL into SEARCH/READ? Only if a later step can still answer and
    the episode's shared redirect budget is not used up."""
    return steps_left(ctx) >= 1 and int(ctx.get(FINAL_REDIRECT_KEY, 0) or 0) < MAX_FINAL_REDIRECTS


def note_final_redirect(ctx: dict[str, Any]) -> None:
    """Count one FINAL redirect in the episode's private state (call from ``intervene``)."""
    ctx[FINAL_REDIRECT_KEY] = int(ctx.get(FINAL_REDIRECT_KEY, 0) or 0) + 1


def parse_history_action(entry: str) -> tuple[str, str]:
    """``"READ[doc0003]"`` -> ``("READ", "doc0003")``; unknown shapes -> ``("", entry)``."""
    m = _ACTION.match(entry or "")
    return (m.group(1), m.group(2)) if m else ("", entry or "")


def just_read(ctx: dict[str, Any]) -> bool:
    """Was the previous executed action a READ that found a document?"""
    last = ctx.get("last_action")
    if last is None:  # a context built without the runtime's derived keys
        hist = ctx.get("action_history") or []
        last = parse_history_action(hist[-1])[0] if hist else ""
    return last == "READ" and int(ctx.get("read_count", 0)) > 0


def last_read_text(ctx: dict[str, Any], tail_chars: int = 2000) -> str:
    """Text of the most recent READ document.

    The runtime passes it as ``last_read``. Without that key only ``all_read_contents``
    (documents joined by a blank line) is there: when its blank-line split yields exactly
    ``read_count`` parts the last part is the last document; otherwise (documents with
    blank lines inside) the last ``tail_chars``.
    """
    if "last_read" in ctx:
        return str(ctx["last_read"] or "")
    text = str(ctx.get("all_read_contents", "") or "")
    n = int(ctx.get("read_count", 0) or 0)
    if n <= 0 or not text:
        return ""
    parts = text.split("\n\n")
    return parts[-1] if len(parts) == n else text[-tail_chars:]


@lru_cache(maxsize=1024)  # one question per episode, asked by several PFs on several steps
def hop_markers(question: str) -> int:
    """Relation links in a question: "of", possessives, relative pronouns after the opening wh-word."""
    q = question or ""
    rest = _WH_OPENING.sub("", q, count=1)
    return len(_OF.findall(q)) + len(_POSSESSIVE.findall(q)) + len(_RELATIVE.findall(rest))


def hop_count(question: str) -> int:
    """Rough number of lookups the question needs: one per relation link, plus the asked
    relation itself unless the question opens with it ("Who is the mayor of ...")."""
    markers = hop_markers(question)
    return max(1, markers + (0 if _WH_OF.match(question or "") else 1))


def is_multi_hop(question: str) -> bool:
    """Two or more lookups: an intermediate entity must be found before the asked one
    ("Which company does the founder of X work for?")."""
    return hop_count(question) >= 2


def names(text: str) -> list[str]:
    """Capitalised name phrases in ``text`` (sentence-initial function words dropped), in order, unique."""
    return list(_names(text or ""))


@lru_cache(maxsize=1024)
def _names(text: str) -> tuple[str, ...]:
    # C-level map/filter over the matches: a read document has dozens, and this runs on the
    # first step after each READ (reading_comprehension_error's density test)
    stripped = map(_strip_leading, _NAME.findall(text))
    return tuple(dict.fromkeys(filter(None, map(" ".join, map(str.split, stripped)))))


def grounded_fraction(answer: str, evidence: str) -> float:
    """Share of the answer's content tokens that occur in ``evidence`` (1.0 for an empty answer)."""
    toks = set(content_tokens(answer))
    if not toks:
        return 1.0
    return len(toks & set(content_tokens(evidence))) / len(toks)


def evidence_text(ctx: dict[str, Any]) -> str:
    """Everything the agent has seen from the tools: read documents and the last result list."""
    return f"{ctx.get('all_read_contents', '')}\n{ctx.get('last_search_results_text', '')}"


def unread_hits(ctx: dict[str, Any]) -> list[str]:
    """Doc ids shown in search results and not read yet: last results first, then older ones."""
    read = set(ctx.get("read_ids") or [])
    out: list[str] = []
    for hit in list(ctx.get("last_search_hits") or []) + list(ctx.get("seen_hits") or []):
        doc = str(hit.get("id", "") or "")
        if doc and doc not in read and doc not in out:
            out.append(doc)
    return out


def used_query(ctx: dict[str, Any], query: str) -> bool:
    """Has this query (case- and space-insensitively) been run already?"""
    norm = " ".join(query.lower().split())
    return any(" ".join(str(q).lower().split()) == norm for q in ctx.get("queries") or [])


def is_question(text: str) -> bool:
    """Does the text open like a question (wh-word)? Used to spot echoed questions."""
    return bool(_WH_START.match(text or ""))


_RANK = re.compile(r"^\s*(?:#|no\.?|result|doc(?:ument)?)?\s*#?\s*(\d{1,2})\.?\s*$", re.I)
_BRACKETED = re.compile(r"\[([^\[\]]+)\]")


def read_target(ctx: dict[str, Any], arg: str) -> str | None:
    """The doc id a READ argument points to, as far as the context can tell; the raw argument
    when it matches nothing shown (None for an empty one).

    Follows the environment's order (``SearchEnvironment.resolve``): an id among the last
    results is that document even when it reads like a rank ("doc2"); only then is a small
    number a rank; then ids and titles of everything shown so far."""
    raw = (arg or "").strip().strip("\"'`")
    m = _BRACKETED.search(raw)
    if m:
        raw = m.group(1).strip()
    hits = list(ctx.get("last_search_hits") or [])
    if any(raw == hit.get("id") for hit in hits):
        return raw
    rank = _RANK.match(raw)
    if rank and 1 <= int(rank.group(1)) <= len(hits):
        return str(hits[int(rank.group(1)) - 1].get("id", ""))
    for hit in hits + list(ctx.get("seen_hits") or []):
        if raw == hit.get("id") or raw.lower() == str(hit.get("title", "")).lower():
            return str(hit.get("id"))
    return raw or None


def shown_ids(ctx: dict[str, Any]) -> set[str]:
    """Doc ids the tools have shown in this episode (last results and every earlier one)."""
    return {str(h.get("id", "")) for h in list(ctx.get("last_search_hits") or []) + list(ctx.get("seen_hits") or [])}


_YEAR = re.compile(r"\b(1\d{3}|20\d{2})\b")
_NUMBER = re.compile(r"\b\d+(?:[.,]\d+)*\b")
_ASKS_YEAR = re.compile(r"\b(when|what year|which year|in what year|founded|born|established)\b", re.I)
_ASKS_NUMBER = re.compile(r"\bhow (many|much|old|long|far|tall|high)\b", re.I)


def answer_span(question: str, text: str) -> str | None:
    """A short span of ``text`` that answers ``question``, or None when no sentence is about it.

    Sentences are ranked by the question words they share — a relation word ("mayor",
    "founded") counts twice, a name once, since a document repeats its entity's name in
    every sentence. From the best sentence that has one, the span is a year for a
    when/what-year question, a number for a how-many one, otherwise the first name the
    question does not already contain. Deterministic and cheap: it runs inside a PF's trigger.
    """
    q_tokens = content_token_set(question or "")
    if not q_tokens or not text:
        return None
    q_names = {n.lower() for n in names(question)}
    q_name_tokens = {t for n in q_names for t in content_token_set(n)}
    ranked = sorted(((2 * len((toks & q_tokens) - q_name_tokens) + len(toks & q_name_tokens), -i, sent)
                     for i, (sent, toks) in enumerate(sentence_tokens(text))), reverse=True)
    for score, _, sent in ranked:
        if score <= 0:
            break
        span = _span_in(question, sent, q_names, q_tokens)
        if span:
            return span
    return None


def _span_in(question: str, sent: str, q_names: set[str], q_tokens: frozenset[str]) -> str | None:
    if _ASKS_YEAR.search(question):
        years = _YEAR.findall(sent)
        if years:
            return years[-1]
    if _ASKS_NUMBER.search(question):
        nums = [n for n in _NUMBER.findall(sent) if n.lower() not in question.lower()]
        counts = [n for n in nums if not _YEAR.fullmatch(n)]  # "In 1903 ... had 111 people"
        if counts or nums:
            return (counts or nums)[0]
    for name in names(sent):
        if name.lower() not in q_names and not content_token_set(name) <= q_tokens:
            return name
    return None
