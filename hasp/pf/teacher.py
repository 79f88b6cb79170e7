"""A per-episode teacher handle that counts tokens and contains failures.

Every harness site that talks to the teacher (teacher-assisted PFs, LLM handlers, the
difficulty gate, the PF selector, teacher-only post-processing) goes through one
``CountingTeacher`` per episode, so the trajectory can report what the teacher cost and how
often it failed. A failing call is logged, counted and re-raised as ``TeacherError``: the caller
then takes its deterministic path (the dispatcher does this for PFs), so an endpoint outage
degrades an episode to "PF only" instead of crashing it.
"""

from __future__ import annotations

import logging
from typing import Any

from hasp.pf.base import Teacher
from hasp.prompts import render

log = logging.getLogger(__name__)


class TeacherError(RuntimeError):
    """The teacher call failed (endpoint error, timeout, bad reply object)."""


class CountingTeacher:
    """Wraps a teacher (``LLMClient`` or a double) for one episode; satisfies ``Teacher``.

    Uses ``chat`` when the inner object has it (to read token usage), else ``generate``.
    """

    def __init__(self, inner: Teacher | Any) -> None:
        self.inner = inner
        self.calls = 0
        self.errors = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.last_error = ""

    def generate(self, messages: list[dict[str, str]], max_tokens: int = 256,
                 temperature: float = 0.0) -> str:
        self.calls += 1
        try:
            chat = getattr(self.inner, "chat", None)
            if callable(chat):
                reply = chat(messages, max_tokens=max_tokens, temperature=temperature)
                text = reply.text
                self.prompt_tokens += int(getattr(reply, "prompt_tokens", 0) or 0)
                self.completion_tokens += int(getattr(reply, "completion_tokens", 0) or 0)
            else:
                text = self.inner.generate(messages, max_tokens=max_tokens, temperature=temperature)
            if not isinstance(text, str):
                raise TypeError(f"teacher returned {type(text).__name__}, not str")
        except Exception as e:  # noqa: BLE001 - every failure mode of a remote model is contained here
            self.errors += 1
            self.last_error = f"{type(e).__name__}: {e}"
            log.warning("teacher call failed (%d so far this episode): %s", self.errors, self.last_error)
            raise TeacherError(self.last_error) from e
        return text


def teacher_errors(teacher: object) -> int:
    """Failure count of a counting teacher (0 for anything else)."""
    return int(getattr(teacher, "errors", 0) or 0) if isinstance(teacher, CountingTeacher) else 0


def teacher_prompt(name: str, **fields: object) -> list[dict[str, str]]:
    """One user message from ``hasp/pf/prompts/harness.yaml`` (prompts live in files, not code)."""
    return [{"role": "user", "content": render("hasp.pf", "harness", name, **fields)}]
