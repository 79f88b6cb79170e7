"""What a declared PF may say about a search step: its conditions, numeric fields and argument sources.

A declaration (``hasp.pf.declaration``) names items of this vocabulary; it never carries code.
Every item is a small pure function over a :class:`Step` (the step context, the proposed action
and its argument), written defensively: a missing or odd context key reads as "no", 0 or nothing,
so a compiled declaration cannot raise at run time. The vocabulary is also what a student model
is shown when it proposes a declarative skill, so each item has a one-line description.

The phase conditions of ``hasp.pf.conditions`` are all available here too (one vocabulary for
"when" in a skill), evaluated over a view of the step context shaped like the episode state.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from hasp.pf.conditions import SEARCH_CONDITIONS, ConditionEnv
from hasp.pf.question import QuestionFeatures
from hasp.pf.search_support import (answer_span, count_matches, is_multi_hop, is_question, just_read,
                                    last_read_text, names, read_target, shown_ids, unread_hits,
                                    used_query)
from hasp.textutil import content_token_set, content_tokens, jaccard, keyword_query

#: the action types of the search loop (what ``watches`` and a rewrite may name)
ACTIONS = ("SEARCH", "READ", "FINAL")


@dataclass(frozen=True, slots=True)
class Step:
    """One PF call: the step context, the proposed action type and its argument."""

    ctx: dict[str, Any]
    action: str
    arg: str

    def text(self, key: str) -> str:
        value = self.ctx.get(key)
        return value if isinstance(value, str) else ""

    def number(self, key: str) -> int:
        value = self.ctx.get(key)
        return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0

    def items(self, key: str) -> list[Any]:
        value = self.ctx.get(key)
        return list(value) if isinstance(value, (list, tuple)) else []

    @property
    def question(self) -> str:
        return self.text("question")


class _StateView:
    """The step context read like ``EpisodeState``, so the phase conditions apply unchanged."""

    __slots__ = ("_step",)

    def __init__(self, step: Step) -> None:
        self._step = step

    def __getattr__(self, key: str) -> Any:
        s = self._step
        if key in ("queries", "last_search_hits", "read_ids", "seen_hits"):
            return s.items(key)
        if key in ("empty_results", "has_read"):
            return bool(s.ctx.get(key))
        if key == "contradictory_sources":
            return lambda: bool(s.ctx.get("contradictory_sources"))
        return s.number(key)


@lru_cache(maxsize=256)
def _features(question: str) -> QuestionFeatures:
    return QuestionFeatures.of(question)


def _phase_condition(fn: Callable[[ConditionEnv], bool]) -> Callable[[Step], bool]:
    return lambda s: bool(fn(ConditionEnv(state=_StateView(s), question=_features(s.question))))


_DENIAL = re.compile(r"\b(not|never|no longer|contrary|however|although|disputed|incorrectly|mistakenly|"
                     r"falsely|should not be confused|unlike)\b", re.I)
_NUMBER = re.compile(r"\b\d+(?:[.,]\d+)?\b")
_CHOICE = re.compile(r"\bor\b", re.I)
_YES_NO = re.compile(r"^\s*(yes|no)\b", re.I)


def _repeats_recent_query(s: Step) -> bool:
    return s.action == "SEARCH" and any(jaccard(s.arg, str(q)) > 0.5 for q in s.items("queries")[-3:])


def _drifted(s: Step) -> bool:
    """A SEARCH sharing no content word with the question or with anything the tools returned."""
    toks = set(content_tokens(s.arg))
    if s.action != "SEARCH" or not toks or not toks.isdisjoint(content_tokens(s.question)):
        return False
    return (toks.isdisjoint(content_tokens(s.text("all_read_contents")))
            and toks.isdisjoint(content_tokens(s.text("last_search_results_text"))))


def _echoes_question(s: Step) -> bool:
    """A FINAL that only repeats the question (its words, or a question of its own)."""
    if s.action != "FINAL" or _CHOICE.search(s.question) or _YES_NO.match(s.arg):
        return False
    if is_question(s.arg) and s.arg.strip().endswith("?"):
        return True
    toks = set(content_tokens(s.arg))
    return bool(toks) and toks <= set(content_tokens(s.question))


def _arg_not_shown(s: Step) -> bool:
    """A READ whose argument names no document the tools have shown (an invented id or title)."""
    return s.action == "READ" and read_target(s.ctx, s.arg) not in shown_ids(s.ctx)


def _arg_already_read(s: Step) -> bool:
    return s.action == "READ" and bool(s.items("read_ids")) and read_target(s.ctx, s.arg) in set(s.items("read_ids"))


def _same_action_repeated(s: Step) -> bool:
    """The proposed action is exactly one of the last two executed ones."""
    rendered = f"{s.action}[{s.arg}]"
    return rendered in [str(a) for a in s.items("action_history")[-2:]]


def _times_done(s: Step) -> int:
    rendered = f"{s.action}[{s.arg}]"
    return sum(1 for a in s.items("action_history") if str(a) == rendered)


def _answer_in_evidence(s: Step) -> bool:
    """A FINAL whose content words all occur in what was read or returned."""
    toks = set(content_tokens(s.arg))
    evidence = content_token_set(f"{s.text('all_read_contents')}\n{s.text('last_search_results_text')}")
    return s.action == "FINAL" and bool(toks) and toks <= evidence


#: condition name -> (test, description)
CONDITIONS: dict[str, tuple[Callable[[Step], bool], str]] = {
    **{name: (_phase_condition(fn), "phase condition (see hasp.pf.conditions)") for name, fn in SEARCH_CONDITIONS.items()},
    "last_action_failed": (lambda s: bool(s.ctx.get("last_action_failed")),
                           "the previous action failed: READ found no document, SEARCH found nothing, budget used up"),
    "arg_not_in_results": (_arg_not_shown, "READ of a document id/title/rank that no search has shown"),
    "arg_already_read": (_arg_already_read, "READ of a document already read"),
    "same_action_repeated": (_same_action_repeated, "the proposed action equals one of the last two executed"),
    "arg_repeats_recent_query": (_repeats_recent_query, "SEARCH nearly the same as one of the last three queries"),
    "query_drifted": (_drifted, "SEARCH sharing no word with the question or the evidence"),
    "answer_echoes_question": (_echoes_question, "FINAL that only repeats the question"),
    "answer_in_evidence": (_answer_in_evidence, "FINAL whose words all occur in the evidence seen"),
    "just_read": (lambda s: just_read(s.ctx), "the previous action was a READ that found a document"),
    "chained_question": (lambda s: is_multi_hop(s.question), "the question needs two or more lookups"),
    "evidence_has_answer": (lambda s: _evidence_span(s) is not None,
                            "a sentence of the read documents or results answers the question"),
}


#: numeric field name -> (getter, description), for {field, op, value} conditions
FIELDS: dict[str, tuple[Callable[[Step], float], str]] = {
    "step_count": (lambda s: s.number("step_count"), "steps taken before this one"),
    "search_count": (lambda s: s.number("search_count"), "searches run"),
    "read_count": (lambda s: s.number("read_count"), "documents read"),
    "max_steps": (lambda s: s.number("max_steps"), "the step budget"),
    "steps_left": (lambda s: s.number("max_steps") - s.number("step_count") - 1, "steps left after this one"),
    "failed_streak": (lambda s: s.number("failed_streak"), "executed actions in a row that failed"),
    "parse_failures": (lambda s: s.number("parse_failures"), "replies so far that named no action"),
    "arg_words": (lambda s: len(s.arg.split()), "words in the proposed argument"),
    "n_results": (lambda s: len(s.items("last_search_hits")), "results of the last search"),
    "n_unread": (lambda s: len(unread_hits(s.ctx)), "shown documents not read yet"),
    "times_done": (_times_done, "how often exactly this action was executed before"),
    "denial_cues": (lambda s: count_matches(_DENIAL, s.text("last_search_results_text")),
                    "denial / contrast words in the last results"),
    "last_read_numbers": (lambda s: count_matches(_NUMBER, last_read_text(s.ctx)), "numbers in the last read document"),
    "last_read_names": (lambda s: len(names(last_read_text(s.ctx))), "names in the last read document"),
}


def _first_unused(s: Step, candidates: list[str]) -> str | None:
    return next((c for c in candidates if c and not used_query(s.ctx, c)), None)


def _evidence_span(s: Step) -> str | None:
    read = last_read_text(s.ctx) if s.number("read_count") else ""
    return answer_span(s.question, read) or answer_span(s.question, s.text("last_search_results_text"))


def _shown_results(s: Step) -> str | None:
    hits = s.items("last_search_hits")
    shown = ", ".join(f"{i}=[{h.get('id', '')}] {h.get('title', '')}" for i, h in enumerate(hits, 1)
                      if isinstance(h, dict))
    return shown or None


def _first_hit(s: Step) -> str | None:
    hits = [h for h in s.items("last_search_hits") if isinstance(h, dict) and h.get("id")]
    return str(hits[0]["id"]) if hits else None


def _last_query(s: Step) -> str | None:
    queries = s.items("queries")
    return str(queries[-1]) if queries else None


@dataclass(frozen=True)
class Source:
    """A named place a rewrite's argument (or an injected text's placeholder) comes from.

    ``kind`` says what it yields — ``doc`` (a document id), ``query`` (search words) or ``answer``
    (a short answer) — so a declaration that would READ a question or SEARCH for a doc id is
    refused at load instead of yielding nothing useful at run time."""

    get: Callable[[Step], str | None]
    kind: str
    doc: str


SOURCES: dict[str, Source] = {
    "arg": Source(lambda s: s.arg or None, "any", "the proposed argument itself"),
    "question": Source(lambda s: s.question or None, "query", "the question as asked"),
    "question_keywords": Source(lambda s: keyword_query(s.question) or None, "query",
                                "the question's content words, names first"),
    "question_entities": Source(lambda s: next(iter(names(s.question)), None), "query",
                                "the first name in the question"),
    "unused_question_query": Source(lambda s: _first_unused(s, [keyword_query(s.question), *names(s.question)]),
                                    "query", "the question's keywords or one of its names, not searched yet"),
    "last_query": Source(_last_query, "query", "the last query run"),
    "last_query_shortened": Source(lambda s: keyword_query(_last_query(s) or "", max_words=4) or None, "query",
                                   "the last query cut to its four main words"),
    "arg_shortened": Source(lambda s: keyword_query(s.arg, max_words=4) or None, "query",
                            "the proposed argument cut to its four main words"),
    "best_unread_result": Source(lambda s: next(iter(unread_hits(s.ctx)), None), "doc",
                                 "the highest-ranked shown document not read yet"),
    "top_result": Source(_first_hit, "doc", "the first result of the last search"),
    "answer_span_from_last_read": Source(
        lambda s: answer_span(s.question, last_read_text(s.ctx)) if s.number("read_count") else None, "answer",
        "the span of the last read document that answers the question"),
    "answer_span_from_results": Source(lambda s: answer_span(s.question, s.text("last_search_results_text")),
                                       "answer", "the span of the last search results that answers the question"),
    "answer_span_from_evidence": Source(_evidence_span, "answer",
                                        "the answer span from the last read document, else from the last results"),
    "shown_results": Source(_shown_results, "text", "the last results as '1=[id] title, ...' (for injected text)"),
}

#: which source kinds a rewrite to each action type may take its argument from
REWRITE_KINDS: dict[str, frozenset[str]] = {
    "SEARCH": frozenset({"query", "answer", "any"}),
    "READ": frozenset({"doc", "any"}),
    "FINAL": frozenset({"answer", "any"}),
}


def describe_vocabulary() -> str:
    """The vocabulary as lines a person or a student model can read (one item per line)."""
    own = {k: v for k, v in CONDITIONS.items() if k not in SEARCH_CONDITIONS}
    lines = ["conditions: " + ", ".join(sorted(SEARCH_CONDITIONS)) + " (phase conditions), and:"]
    lines += [f"  {name}: {doc}" for name, (_, doc) in own.items()]
    lines.append("fields (for {field, op, value}):")
    lines += [f"  {name}: {doc}" for name, (_, doc) in FIELDS.items()]
    lines.append("sources (rewrite arg, or {placeholder} in injected text):")
    lines += [f"  {name} [{src.kind}]: {src.doc}" for name, src in SOURCES.items()]
    return "\n".join(lines)
