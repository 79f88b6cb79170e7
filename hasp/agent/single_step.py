"""Single-step episodes (math, code) through the same PF dispatcher and trajectory records.

A single-step domain asks the policy once and treats the answer it extracts as the action
``FINAL[answer]``. The episode is the search loop's step reduced to its core:

1. one policy call on the domain's messages;
2. ``extract(text) -> (thought, answer | None)`` finds the proposed answer (the FINAL argument);
3. ``ctx_builder(thought, answer)`` builds the step context the domain's ``pre_final`` PFs read;
4. :class:`hasp.pf.dispatcher.Dispatcher` runs the PFs on ``("FINAL", answer)`` — a PF may rewrite
   the answer (MODIFY_ACTION) or add hints (INJECT_CONTEXT); the step gets its audit event e_t;
5. if PFs injected hints and ``revise`` is on, the model gets ONE revision turn (its own reply,
   then a user turn with the hints); the revised answer is a second step with its own audit
   event, dispatched by the same per-episode dispatcher (so per-episode PF caps hold);
6. ``scorer(answer)`` grades the last executed answer: ``em = f1 = score`` (1.0/0.0).

There is no domain branch in here: prompts, extraction, context and grading come in as the
functions passed, which is the point of the paper's claim that one dispatcher serves web search,
math and code unchanged. The result is an ordinary :class:`~hasp.records.Trajectory`, so
signal scoring, training-data building, failure detection and evaluation (``hasp.eval``) apply as
they are.

``Trajectory.terminated`` is ``"final"`` when some step produced an answer, else ``"max_steps"``
(the one-step budget ran out without an action), as in the multi-step loop, and ``"error"`` when a
model call failed or the episode's wall budget (``AgentConfig.timeout_s``) ended a call that hung.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from hasp.agent.loop import AgentConfig, Policy, step_grammar
from hasp.records import Action, AuditEvent, StepRecord, Trajectory
from hasp.agent.variants import Variant, get_variant
from hasp.llm.cancel import call_deadline
from hasp.llm.client import LLMError
from hasp.pf.base import ProgramFunction, Teacher
from hasp.pf.dispatcher import DispatchResult, Dispatcher
from hasp.prompts import prompt

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_FORMAT_HINT", "REVISE_TEMPLATE", "Extract", "Scorer", "CtxBuilder", "revision_message",
    "run_single_step", "skills_prompt",
]

#: extract(model text) -> (thought, proposed answer or None when the reply holds no answer)
Extract = Callable[[str], "tuple[str, str | None]"]
#: scorer(answer) -> score in [0, 1], or (score, feedback dict recorded in the audit's Δ_t)
Scorer = Callable[[str], "float | tuple[float, dict[str, Any]]"]
#: ctx_builder(thought, answer) -> the step context (App. C.5 names + domain keys) the PFs read
CtxBuilder = Callable[[str, str], "dict[str, Any]"]

DEFAULT_FORMAT_HINT = prompt("hasp.agent", "single_step", "format_hint")
REVISE_TEMPLATE = prompt("hasp.agent", "single_step", "revise")
_NO_ANSWER = "no answer found in the reply"
_STATE_STR_CHARS = 300


def revision_message(contexts: Sequence[str], format_hint: str = DEFAULT_FORMAT_HINT) -> str:
    """The user turn of the revision: the PF hints, then the instruction to answer again."""
    hints = "\n".join(f"- {c.strip()}" for c in contexts if c and c.strip())
    return REVISE_TEMPLATE.format(hints=hints, format_hint=format_hint)


def skills_prompt(library: Any, limit: int | None = None) -> str:
    """Prompt-only rendering of a skill library: one ``- summary`` line per active skill."""
    skills = list(getattr(library, "skills", []) or [])[:limit]
    lines = [f"- {(s.spec.system_summary or s.spec.description).strip()}" for s in skills]
    return "\n".join(ln for ln in lines if ln != "- ")


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


def _audit(ctx: dict[str, Any], answer: str, d: DispatchResult) -> AuditEvent:
    return AuditEvent(state=_state(ctx), a_orig=Action("FINAL", answer), a_final=Action(d.action_type, d.arg),
                      context=list(d.contexts), mode=d.mode, errors=list(d.errors),
                      fired=[{"skill_id": f.skill_id, "type": f.type, "reason": f.reason, "applied": f.applied}
                             for f in d.fired],
                      dispatch_s=d.elapsed_s)


def run_single_step(*, qid: str, question: str, answers: Sequence[str],
                    messages: Sequence[dict[str, str]], policy: Policy, pfs: Sequence[ProgramFunction],
                    variant: Variant | str, cfg: AgentConfig, extract: Extract, scorer: Scorer,
                    ctx_builder: CtxBuilder, teacher: Teacher | None = None, revise: bool = True,
                    label: str | None = None, format_hint: str = DEFAULT_FORMAT_HINT,
                    score_steps: bool = True, stop: list[str] | None = None,
                    grammar: str | None = None) -> Trajectory:
    """Run one single-step episode (plus at most one PF-triggered revision turn).

    ``messages`` are the domain's prompt, already rendered for the variant (skill summaries in
    the system prompt for ``prompt``). PFs run only when ``variant.use_pfs``; ``react`` and
    ``prompt`` therefore never fire and never revise. ``label`` overrides the variant name stored
    in the trajectory. With ``score_steps`` every answered step's score is kept in its audit
    feedback (``feedback["score"]``), so the effect of the revision can be measured; only the last
    answer counts for ``em``. The model never sees a score.

    A non-final answered step that a PF rewrote (MODIFY_ACTION) has its rewritten answer in
    ``a_final``; if the revision reply holds no answer, that rewritten first answer is the prediction.

    ``grammar`` is the domain's answer format as GBNF; every call carries it when ``cfg.constrained``
    resolves to actions for the policy's dialect.
    """
    v = get_variant(variant) if isinstance(variant, str) else variant
    t0 = time.perf_counter()
    traj = Trajectory(qid=str(qid), question=question, answers=list(answers), variant=label or v.name)
    if v.teacher_postprocess:
        raise ValueError(f"variant {v.name!r} post-processes a web-search FINAL; single-step domains have no "
                         "outer loop for it (use react, prompt, pf or pf_teacher)")
    # the teacher reaches PFs only through a variant that asks for it (pf_teacher), as in the search loop
    dispatcher = Dispatcher(list(pfs) if v.use_pfs else [], teacher=teacher if v.use_teacher else None,
                            max_modify_fires=cfg.max_modify_fires)
    convo = [dict(m) for m in messages]
    private: dict[str, Any] = {}
    history: list[str] = []
    max_steps = 2 if (revise and v.use_pfs) else 1
    constraint = step_grammar(cfg, policy, grammar) if grammar else {}
    for i in range(max_steps):
        ts = time.perf_counter()
        left = None if cfg.timeout_s is None else cfg.timeout_s - (ts - t0)
        try:
            with call_deadline(left):  # the wall budget also ends a model call that hangs
                reply = policy.chat(convo, temperature=cfg.temperature, max_tokens=cfg.max_tokens, stop=stop,
                                    seed=cfg.seed, **constraint)
        except LLMError as e:  # the endpoint failed after the client's retries, or the wall budget ran out
            # during the call: contain it to this episode (the runner counts it in n_failed, not as EM 0)
            err = f"{type(e).__name__}: {e}"[:500]
            log.warning("%s: model call %d failed: %s", qid, i, err)
            traj.pf_errors.append(err)
            traj.terminated = "error"
            break
        traj.prompt_tokens += int(getattr(reply, "prompt_tokens", 0) or 0)
        traj.completion_tokens += int(getattr(reply, "completion_tokens", 0) or 0)
        text = reply.text or ""
        step = StepRecord(index=i, raw_output=text, llm_s=time.perf_counter() - ts,
                          prompt_messages=[dict(m) for m in convo])
        traj.steps.append(step)
        thought, answer = extract(text)
        step.thought = thought or ""
        if answer is None:
            step.parse_error = _NO_ANSWER
            step.step_s = time.perf_counter() - ts
            break
        ctx = ctx_builder(step.thought, answer)
        ctx.update({"step_count": i, "max_steps": max_steps, "action_history": list(history), **private})
        d = dispatcher.dispatch(ctx, "FINAL", answer)
        private.update({k: val for k, val in ctx.items() if k.startswith("_")})
        audit = _audit(ctx, answer, d)
        traj.pf_errors += d.errors
        step.audit = audit
        history.append(audit.a_final.render())
        traj.prediction, traj.terminated = audit.a_final.arg, "final"
        if d.contexts:
            step.observation = "\n" + "\n".join(d.contexts)  # the loop's convention: tool output "" + hints
        last = i == max_steps - 1 or not d.contexts
        audit.feedback = {"final": last}
        if score_steps or last:
            s, extra = _grade(scorer, audit.a_final.arg)
            audit.feedback.update({"score": s, **extra})
        if not last:
            audit.feedback["revision_requested"] = True
            convo += [{"role": "assistant", "content": text.strip() or "(empty)"},
                      {"role": "user", "content": revision_message(d.contexts, format_hint)}]
        step.step_s = time.perf_counter() - ts
        if last:
            break
    if traj.terminated not in ("final", "error"):
        traj.terminated = "max_steps"
    audited = traj.audits()
    if audited:
        fb = audited[-1].feedback
        if "score" not in fb:
            s, extra = _grade(scorer, audited[-1].a_final.arg)
            fb.update({"score": s, **extra})
        traj.em = traj.f1 = float(fb["score"])
    traj.wall_s = time.perf_counter() - t0
    return traj

