"""Code episodes through the shared single-step runner (``hasp.agent.single_step``); ``hasp eval
--domain code`` runs them.

The domain supplies ``render_messages``, :func:`split_completion` (the FINAL argument is the
extracted program), ``final_context`` (the PF context) and the sandboxed ``score``; the
dispatcher, audit events, revision turn and trajectories are the ones math and search use.
``em`` is 1.0 when the item's tests pass, so a variant's mean ``em`` is pass@1.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from hasp.agent.loop import AgentConfig, Policy
from hasp.agent.single_step import run_single_step, skills_prompt
from hasp.agent.variants import Variant, get_variant
from hasp.config import SandboxParams
from hasp.domains.code.datasets import CodeItem
from hasp.domains.code.task import CODE_GRAMMAR, extract_code, final_context, render_messages, score
from hasp.pf.base import Teacher
from hasp.pf.library import SkillLibrary
from hasp.records import Trajectory
from hasp.sandbox.program import require_layers

FORMAT_HINT = "reply with the complete corrected function in a single ```python code block"
_FENCED = re.compile(r"```[^\n]*\n.*?(?:\n[ \t]*```|\Z)", re.S)
_THINK = re.compile(r"<think>(.*?)(?:</think>|\Z)", re.S | re.I)


def split_completion(text: str | None, entry_point: str | None = None) -> tuple[str, str | None]:
    """(thought, code): the code is what :func:`extract_code` finds (None when there is none), the
    thought is the prose around it (fenced blocks and the code itself removed)."""
    text = text or ""
    code = extract_code(text, entry_point)
    if not code.strip():
        return text.strip(), None
    think = " ".join(m.strip() for m in _THINK.findall(text))
    prose = _FENCED.sub("", _THINK.sub("", text))
    if code in prose:
        prose = prose.replace(code, "")
    thought = "\n".join(p for p in (think, prose.strip()) if p)
    return thought, code


def grade(item: CodeItem, code: str, **kw: Any) -> tuple[float, dict[str, Any]]:
    """Sandboxed tests → (1.0/0.0, feedback for the audit: status, a short detail and, when the
    program ran in the weaker mode the user allowed, the missing layers as ``sandbox_weaker``)."""
    r = score(item, code, **kw)
    feedback: dict[str, Any] = {"status": r.status, "detail": (r.detail or "")[:300]}
    weaker = r.protections.get("weaker")
    if weaker:
        feedback["sandbox_weaker"] = [str(w) for w in weaker]
    return float(r.passed), feedback


def episode_fn(policy: Policy, library: SkillLibrary | None, cfg: AgentConfig, variant: Variant | str, *,
               teacher: Teacher | None = None, revise: bool = True, label: str | None = None,
               score_steps: bool = True, timeout_s: float = 10.0,
               sandbox: SandboxParams | None = None) -> Callable[[CodeItem], Trajectory]:
    """``item -> Trajectory`` for one variant: ``react`` (no PFs, no skills), ``prompt`` (skill
    summaries in the system prompt), ``pf`` (the library's PFs on the FINAL program).

    ``sandbox`` (the params' ``sandbox:`` section) decides whether a program may run when an
    isolation layer is missing here; the default is the schema's (refuse). Without the opt-in
    a missing layer raises ``SandboxRefused`` here, before any episode, with one line."""
    v = get_variant(variant) if isinstance(variant, str) else variant
    allow_weaker = (sandbox or SandboxParams()).allow_weaker
    require_layers(allow_weaker=allow_weaker)
    pfs = library.pfs() if (library is not None and v.use_pfs) else []
    skills_text = skills_prompt(library) if (library is not None and v.skills_in_prompt) else ""

    def run(item: CodeItem) -> Trajectory:
        return run_single_step(
            qid=item.task_id, question=item.prompt, answers=[],
            messages=render_messages(item, skills_text), policy=policy, pfs=pfs, variant=v, cfg=cfg,
            extract=lambda text: split_completion(text, item.entry_point),
            scorer=lambda code: grade(item, code, timeout_s=timeout_s, allow_weaker=allow_weaker),
            ctx_builder=lambda thought, code: final_context(item, thought),
            teacher=teacher, revise=revise, label=label, format_hint=FORMAT_HINT, score_steps=score_steps,
            grammar=CODE_GRAMMAR)

    return run

