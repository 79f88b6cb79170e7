"""The code item as a single-step environment of the agent loop (``hasp.agent.single_step``).

The domain supplies ``render_messages``, :func:`split_completion` (the FINAL argument is the
extracted program), ``final_context`` (the PF context), the sandboxed ``grade`` and the reply
grammar; the loop, the harness, audit events and the revision turn are the ones math and search use.
``em`` is 1.0 when the item's tests pass, so a variant's mean ``em`` is pass@1.
"""

from __future__ import annotations

import re
from typing import Any

from hasp.agent.single_step import SingleStepEnvironment
from hasp.domains.code.datasets import CodeItem
from hasp.domains.code.task import CODE_GRAMMAR, extract_code, final_context, render_messages, score

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


def environment(item: CodeItem, *, allow_weaker: bool, timeout_s: float = 10.0) -> SingleStepEnvironment:
    """One code episode's environment: its program is graded in the sandbox, in the weaker mode only
    when ``allow_weaker`` (``sandbox.allow_weaker``; the domain checks the layers once, ``require_layers``)."""
    return SingleStepEnvironment(
        messages=lambda system_text: render_messages(item, system_text),
        extract=lambda text: split_completion(text, item.entry_point),
        scorer=lambda code: grade(item, code, timeout_s=timeout_s, allow_weaker=allow_weaker),
        ctx_builder=lambda thought, code: final_context(item, thought), grammar=CODE_GRAMMAR,
        format_hint=FORMAT_HINT)
