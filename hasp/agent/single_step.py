"""The single-step environment (math, code) of the one agent loop.

A single-step domain asks the policy once and reads the answer it extracts as the action
``FINAL[answer]``. In the loop (``hasp.agent.loop``) that is:

1. the opening is the domain's messages (skill summaries the harness chose in the system prompt);
2. ``extract(text) -> (thought, answer | None)`` reads a reply; no answer ends the episode;
3. ``ctx_builder(thought, answer)`` is the step context the domain's ``pre_final`` PFs read, plus the
   step count, the budget, the actions so far and the PFs' private keys;
4. the harness dispatches ``("FINAL", answer)`` — a PF may rewrite the answer (MODIFY_ACTION) or add
   hints (INJECT_CONTEXT) — lets the handlers vote, and picks the phase reminders; the step gets its
   audit event e_t (with the reminders' labels in ``phases``);
5. if PFs added hints and a second step is in the budget, the model gets ONE revision turn (its own
   reply, then a user turn with the hints); the revised answer is a second step with
   its own audit event, under the same per-episode dispatcher (so per-episode PF caps hold). A FINAL
   the handlers send back is not accepted and gets the revision turn the same way;
6. ``scorer(answer)`` grades each answered step (``feedback["score"]``); the last one is ``em = f1``.

There is no domain branch in here: prompts, extraction, context and grading come in as functions,
which is the paper's claim that one dispatcher serves web search, math and code unchanged.

The revision turn shows the PF hints only. The pre_final reminders of the math and code skills
restate what their PFs check; on the embedded model, adding them to the revision turn changed which
revisions came out right, so they are recorded (``StepRecord.reminders``, ``AuditEvent.phases``)
and the revision prompt stays the checker's findings.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from hasp.agent.context import EpisodeState
from hasp.agent.parser import ParseFailure, ParsedAction
from hasp.prompts import prompt
from hasp.records import Action, AuditEvent, StepRecord, Trajectory

#: extract(model text) -> (thought, proposed answer or None when the reply holds no answer)
Extract = Callable[[str], "tuple[str, str | None]"]
#: scorer(answer) -> score in [0, 1], or (score, feedback dict recorded in the audit's Δ_t)
Scorer = Callable[[str], "float | tuple[float, dict[str, Any]]"]
#: ctx_builder(thought, answer) -> the step context (App. C.5 names + domain keys) the PFs read
CtxBuilder = Callable[[str, str], "dict[str, Any]"]

DEFAULT_FORMAT_HINT = prompt("hasp.agent", "single_step", "format_hint")
REVISE_TEMPLATE = prompt("hasp.agent", "single_step", "revise")
NO_ANSWER = "no answer found in the reply"
_STATE_STR_CHARS = 300


def revision_message(hints: Sequence[str], format_hint: str = DEFAULT_FORMAT_HINT) -> str:
    """The user turn of the revision: the PF hints, then the instruction to answer again."""
    lines = "\n".join(f"- {c.strip()}" for c in hints if c and c.strip())
    return REVISE_TEMPLATE.format(hints=lines, format_hint=format_hint)


def _state(ctx: dict[str, Any]) -> dict[str, Any]:
    """s_t for the audit record: the context without PF-private keys and the (long) question."""
    out: dict[str, Any] = {}
    for k, v in ctx.items():
        if k.startswith("_") or k == "question":
            continue
        if isinstance(v, str) and len(v) > _STATE_STR_CHARS:
            v = v[:_STATE_STR_CHARS] + "..."
        if v is None or isinstance(v, (str, int, float, bool)) or (
                isinstance(v, (list, tuple)) and all(isinstance(x, (str, int, float, bool)) for x in v)):
            out[k] = list(v) if isinstance(v, tuple) else v
    return out


def _grade(scorer: Scorer, answer: str) -> tuple[float, dict[str, Any]]:
    got = scorer(answer)
    if isinstance(got, tuple):
        value, extra = got
        return float(value), dict(extra or {})
    return float(got), {}


class SingleStepEnvironment:
    """One item of a single-step domain: ``messages(system_text)`` opens the episode, ``extract``,
    ``ctx_builder`` and ``scorer`` are the domain's; ``grammar`` its reply format as GBNF (carried by
    every call when ``llm.constrained`` resolves to actions for the policy's dialect)."""

    stop = None
    retries_unparsed = False
    budget_prompt = ""
    stats = None

    def __init__(self, *, messages: Callable[[str], list[dict[str, str]]], extract: Extract, scorer: Scorer,
                 ctx_builder: CtxBuilder, grammar: str | None = None,
                 format_hint: str = DEFAULT_FORMAT_HINT) -> None:
        self.messages, self.extract, self.scorer, self.ctx_builder = messages, extract, scorer, ctx_builder
        self.reply_grammar, self.format_hint = grammar, format_hint
        self._answer = ""

    def opening(self, question: str, system_text: str) -> list[dict[str, str]]:
        return [dict(m) for m in self.messages(system_text)]

    def grammar(self, max_tokens: int, final_only: bool = False) -> str | None:
        return self.reply_grammar

    def parse(self, text: str) -> ParsedAction | ParseFailure:
        thought, answer = self.extract(text)
        if answer is None:
            return ParseFailure(NO_ANSWER, thought or "")
        self._answer = answer
        return ParsedAction("FINAL", answer, thought or "")

    def unparsed(self, reason: str) -> str:
        return ""

    def context(self, state: EpisodeState, thought: str) -> dict[str, Any]:
        ctx = self.ctx_builder(thought, self._answer)
        ctx.update({"step_count": state.step_count, "max_steps": state.max_steps,
                    "action_history": list(state.action_history), **state.private})
        return ctx

    def snapshot(self, state: EpisodeState, ctx: dict[str, Any]) -> dict[str, Any]:
        return _state(ctx)

    def execute(self, a: Action, state: EpisodeState, audit: AuditEvent, last_step: bool) -> tuple[str, bool]:
        """Grade the answer; ask for a revision when hints came and a step is left. Returns ("", done)."""
        last = last_step or not audit.context
        audit.feedback = {"final": last and a.type == "FINAL"}
        if a.type == "FINAL":
            s, extra = _grade(self.scorer, a.arg)
            audit.feedback.update({"score": s, **extra})
        if not last:
            audit.feedback["revision_requested"] = True
        return "", last

    def turns(self, step: StepRecord) -> list[dict[str, str]]:
        hints = step.audit.context if step.audit else []
        return [{"role": "assistant", "content": step.raw_output.strip() or "(empty)"},
                {"role": "user", "content": revision_message(hints, self.format_hint)}]

    def score(self, traj: Trajectory) -> tuple[float, float]:
        """The last answered step's score (only the last answer counts; the model never sees a score)."""
        answered = [a for a in traj.audits() if a.a_final.type == "FINAL"]
        if not answered:
            return 0.0, 0.0
        fb = answered[-1].feedback
        if "score" not in fb:
            s, extra = _grade(self.scorer, answered[-1].a_final.arg)
            fb.update({"score": s, **extra})
        return float(fb["score"]), float(fb["score"])
