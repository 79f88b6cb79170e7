"""A judge for logged traces without gold answers: is the final answer supported by what the agent saw?

Why: the label-free signals (``hasp.evolve.trace_signals``) see how an episode went wrong (loops,
repeats, no evidence), not whether an answer given after a tidy search is right. Where a trace has
no gold answer, a model (the teacher, or any endpoint) is asked whether the observations state the
answer; an UNSUPPORTED verdict is the failure signal ``judge``. Where the judge's endpoint takes a
grammar (llama.cpp, vLLM) the reply is constrained to the two words. Parsing is strict, as for the
evaluation's judge (``hasp.episode.judge``): a reply that is not one of the two words is a judge
error, counted and never read as either verdict. With ``evolve.traces.judge`` on, the traces that do
carry gold are judged too, so the judge's precision and recall against EM 0 are measured beside the
other signals'.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from hasp.evolve.trace_signals import TraceSignal
from hasp.llm.gbnf import one_of
from hasp.pf.teacher import teacher_reply
from hasp.prompts import prompt, render
from hasp.records import Trajectory

log = logging.getLogger(__name__)

KIND = "judge"
#: the only replies a constrained judge can give (where its endpoint takes a grammar): an embedded base
#: model asked in free text continues the prompt instead of answering
VERDICT_GRAMMAR = one_of(("SUPPORTED", "UNSUPPORTED"))


@dataclass
class TraceJudging:
    """What the judge said: ``signals`` (qid -> the ``judge`` signal of an UNSUPPORTED answer), every
    usable verdict, and counts."""

    signals: dict[str, list[TraceSignal]] = field(default_factory=dict)
    verdicts: dict[str, bool] = field(default_factory=dict)  # qid -> SUPPORTED, for every usable verdict
    asked: int = 0
    unsupported: int = 0
    errors: int = 0
    first_error: str = ""

    def summary(self) -> dict[str, Any]:
        return {"asked": self.asked, "unsupported": self.unsupported, "errors": self.errors,
                **({"first_error": self.first_error} if self.first_error else {})}


def parse_support(text: str) -> bool | None:
    """True for SUPPORTED, False for UNSUPPORTED, None for anything else (strict)."""
    word = str(text or "").strip().strip("*\"'`").strip().rstrip(".").strip().upper()
    return {"SUPPORTED": True, "UNSUPPORTED": False}.get(word)


def evidence_of(traj: Trajectory, max_chars: int) -> str:
    """The observations of the episode's steps, in order, cut to ``max_chars`` in all."""
    parts = [f"- step {s.index}: {' '.join(str(s.observation or '').split())}" for s in traj.steps
             if str(s.observation or "").strip()]
    text = "\n".join(parts) or "(nothing: the agent searched or read nothing)"
    return text if len(text) <= max_chars else text[:max_chars] + " …"


def judge_traces(trajs: Iterable[Trajectory], judge: Any, *, max_chars: int = 1500,
                 max_tokens: int = 8) -> TraceJudging:
    """Ask ``judge`` about every answered, error-free trajectory (see the module doc)."""
    out = TraceJudging()
    system = prompt("hasp.evolve", "trace_judge", "system")
    for t in trajs:
        if t.terminated == "error" or not t.prediction.strip():
            continue  # an endpoint failure is not the agent's; no answer is the no_answer signal's
        msgs = [{"role": "system", "content": system},
                {"role": "user", "content": render("hasp.evolve", "trace_judge", "user", question=t.question,
                                                   evidence=evidence_of(t, max_chars), answer=t.prediction)}]
        out.asked += 1
        try:
            reply = teacher_reply(judge, msgs, max_tokens=max_tokens, grammar=VERDICT_GRAMMAR)
            verdict = parse_support(reply.text)
            problem = "" if verdict is not None else f"unparseable judge reply {str(reply.text)[:60]!r}"
        except Exception as e:  # noqa: BLE001 - a failed judge call is counted, the analysis goes on
            verdict, problem = None, f"{type(e).__name__}: {e}"[:200]
        if verdict is None:
            out.errors += 1
            out.first_error = out.first_error or f"{t.qid}: {problem}"
            continue
        out.verdicts[t.qid] = verdict
        if not verdict:
            out.unsupported += 1
            out.signals[t.qid] = [TraceSignal(KIND, t.qid, -1, "the judge found the answer unsupported by "
                                                                "what the agent saw")]
    if out.errors:
        log.warning("trace judge: %d of %d verdicts unusable (first: %s)", out.errors, out.asked, out.first_error)
    return out
