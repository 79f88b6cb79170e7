"""One way to ask a teacher and learn what it cost.

The ``Teacher`` protocol PFs use only promises ``generate() -> str``. Evaluation code (snippets,
judge) also wants token counts for its reports, which ``LLMClient.chat`` provides. This helper
uses ``chat`` when the object has it and falls back to ``generate`` (tokens then count as 0), so
test doubles and real clients go through the same path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TeacherReply:
    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0


def ask_teacher(teacher: Any, messages: list[dict[str, str]], *, max_tokens: int,
                temperature: float = 0.0) -> TeacherReply:
    """Send ``messages``; exceptions of the teacher propagate (callers decide the fallback)."""
    chat = getattr(teacher, "chat", None)
    if callable(chat):
        r = chat(messages, max_tokens=max_tokens, temperature=temperature)
        return TeacherReply(str(getattr(r, "text", "") or ""), int(getattr(r, "prompt_tokens", 0) or 0),
                            int(getattr(r, "completion_tokens", 0) or 0))
    return TeacherReply(str(teacher.generate(messages, max_tokens=max_tokens, temperature=temperature) or ""))
