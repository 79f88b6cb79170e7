"""LLM-judge accuracy: the teacher says CORRECT or INCORRECT for one predicted answer.

EM misses paraphrases ("the US" vs "United States"), which is why the paper reports an LLM-judge
score next to it. Parsing is strict on purpose: a reply that is not exactly one of the two words
(after trimming whitespace, quotes, asterisks and a final period) is a *judge error*. Judge errors
are counted and left out of the accuracy denominator; they are never read as "wrong", because
that would turn a flaky endpoint into a worse-looking agent. Where the judge's endpoint takes a
grammar the reply is constrained to the two words, so a base model cannot continue the prompt instead.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any

from hasp.llm.gbnf import one_of
from hasp.pf.teacher import teacher_reply
from hasp.prompts import prompt, render

log = logging.getLogger(__name__)
#: the only replies a constrained judge can give (where its endpoint takes a grammar, as llama.cpp does)
VERDICT_GRAMMAR = one_of(("CORRECT", "INCORRECT"))


@dataclass(frozen=True)
class JudgeVerdict:
    """``correct`` is None when there is no usable verdict (``error`` says why)."""

    correct: bool | None
    raw: str = ""
    error: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_verdict(text: str) -> bool | None:
    """True for CORRECT, False for INCORRECT, None for anything else (strict)."""
    word = text.strip().strip("*\"'`").strip().rstrip(".").strip().upper()
    return {"CORRECT": True, "INCORRECT": False}.get(word)


def judge_messages(question: str, answers: list[str], prediction: str) -> list[dict[str, str]]:
    refs = " | ".join(a for a in answers if a) or "(none)"
    return [{"role": "system", "content": prompt("hasp.episode", "judge", "system")},
            {"role": "user", "content": render("hasp.episode", "judge", "user", question=question, refs=refs,
                                               prediction=prediction)}]


def judge_answer(judge: Any, question: str, answers: list[str], prediction: str, *,
                 max_tokens: int = 8) -> JudgeVerdict:
    """One verdict. An empty prediction (no FINAL) is INCORRECT without a call; endpoint failures
    and unparseable replies come back as a verdict with ``error`` set, never as an exception."""
    if not prediction.strip():
        return JudgeVerdict(False, error="", raw="(no answer: not sent to the judge)")
    try:
        reply = teacher_reply(judge, judge_messages(question, answers, prediction), max_tokens=max_tokens,
                              grammar=VERDICT_GRAMMAR)
    except Exception as e:  # noqa: BLE001 - a failed judge call is counted as judge_error, the eval goes on
        log.warning("judge call failed: %s: %s", type(e).__name__, e)
        return JudgeVerdict(None, error=f"{type(e).__name__}: {e}"[:300])
    verdict = parse_verdict(reply.text)
    error = "" if verdict is not None else f"unparseable judge reply {reply.text[:80]!r}"
    if error:
        log.warning("%s", error)
    return JudgeVerdict(verdict, raw=reply.text[:200], error=error, prompt_tokens=reply.prompt_tokens,
                        completion_tokens=reply.completion_tokens)
