"""Every call to the teacher goes through this module.

The ``Teacher`` protocol, and three layers of calls, each used where its failure policy fits:

- ``teacher_reply``: one request, with token counts when the object has ``chat`` (``LLMClient``)
  and ``generate`` otherwise (test doubles); failures propagate. Evaluation code (the judge,
  teacher snippets) and ``CountingTeacher`` call it.
- ``CountingTeacher``: the per-episode handle every harness site uses (teacher-assisted PFs,
  LLM handlers, the difficulty gate, the PF selector, teacher-only post-processing); it counts
  calls, tokens and failures, and re-raises a failure as ``TeacherError`` so the caller takes its
  deterministic path: an endpoint outage degrades an episode to "PF only" instead of crashing it.
- ``ask_teacher`` / ``teacher_objection`` / ``teacher_directive``: what a PF's ``intervene`` or
  ``check_final`` calls. The call never raises (App. B.1: a PF degrades to its deterministic path
  when the teacher is absent or fails), so each PF's fallback is a plain ``if reply is None``.
"""

from __future__ import annotations

import inspect

import logging
import re
from dataclasses import dataclass
from typing import Any, Protocol

from hasp.prompts import render

log = logging.getLogger(__name__)


class Teacher(Protocol):
    """What a teacher-assisted PF may call. ``hasp.llm.client.LLMClient`` satisfies it."""

    def generate(self, messages: list[dict[str, str]], max_tokens: int = 256,
                 temperature: float = 0.0) -> str: ...


@dataclass(frozen=True)
class TeacherReply:
    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0


def takes_keyword(model: Any, name: str) -> bool:
    """Does ``model.chat`` take the keyword ``name`` (``LLMClient``'s ``grammar`` / ``json_schema``, and
    the clients wrapping it with ``**kw``)? The client encodes a constraint for its endpoint's dialect and
    answers without it, counted, where the endpoint cannot take it."""
    try:
        params = inspect.signature(model.chat).parameters.values()
    except (AttributeError, TypeError, ValueError):
        return False
    return any(p.name == name or p.kind is p.VAR_KEYWORD for p in params)


def _send(teacher: Any, messages: list[dict[str, str]], max_tokens: int, temperature: float,
          grammar: str | None = None) -> tuple[Any, int, int]:
    """The reply's text as the teacher returned it, and its token counts (0 without ``chat``)."""
    chat = getattr(teacher, "chat", None)
    if callable(chat):
        kw = {"grammar": grammar} if grammar is not None and takes_keyword(teacher, "grammar") else {}
        r = chat(messages, max_tokens=max_tokens, temperature=temperature, **kw)
        return (getattr(r, "text", None), int(getattr(r, "prompt_tokens", 0) or 0),
                int(getattr(r, "completion_tokens", 0) or 0))
    return teacher.generate(messages, max_tokens=max_tokens, temperature=temperature), 0, 0


def teacher_reply(teacher: Any, messages: list[dict[str, str]], *, max_tokens: int,
                  temperature: float = 0.0, grammar: str | None = None) -> TeacherReply:
    """Send ``messages``; exceptions of the teacher propagate (callers decide the fallback). ``grammar``
    (GBNF) constrains the reply where the teacher's client takes one (``takes_keyword``): a verdict that
    must be one word then is one, even from a base model that would otherwise continue the prompt."""
    text, prompt_tokens, completion_tokens = _send(teacher, messages, max_tokens, temperature, grammar)
    return TeacherReply(str(text or ""), prompt_tokens, completion_tokens)


class TeacherError(RuntimeError):
    """The teacher call failed (endpoint error, timeout, bad reply object)."""


class CountingTeacher:
    """Wraps a teacher (``LLMClient`` or a double) for one episode; satisfies ``Teacher``."""

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
            text, prompt_tokens, completion_tokens = _send(self.inner, messages, max_tokens, temperature)
            self.prompt_tokens += prompt_tokens
            self.completion_tokens += completion_tokens
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


# ----------------------------------------------------------------------------- what a PF calls
_PROBLEM = re.compile(r"^\W*problem\W*[:\-]?\s*(?P<why>.*)$", re.I | re.S)
_OK = re.compile(r"^\W*ok\b", re.I)


def ask_teacher(teacher: Teacher | None, prompt: str, *, max_tokens: int = 64, who: str = "pf") -> str | None:
    """The teacher's stripped reply to one user turn, or None (no teacher, error, empty reply).

    A failure is logged with ``who`` (the skill id) and never raised: the caller falls back.
    """
    if teacher is None:
        return None
    try:
        reply = teacher.generate(messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens,
                                 temperature=0.0)
    except Exception as e:  # noqa: BLE001 - contained: the PF's deterministic path takes over
        log.warning("%s: teacher call failed (%s: %s); using the deterministic fallback", who,
                    type(e).__name__, e)
        return None
    reply = str(reply or "").strip()
    return reply or None


def teacher_objection(teacher: Teacher | None, prompt: str, *, who: str = "pf",
                      default_reason: str = "teacher flagged the answer") -> str | None:
    """Ask a check question whose reply must be ``OK`` or ``PROBLEM: <reason>``.

    Returns the reason for PROBLEM, None for OK, no teacher, a failed call or a reply of
    neither shape (an unclear reply is no evidence, so it must not count as a vote).
    """
    reply = ask_teacher(teacher, prompt + "\nReply with exactly OK, or PROBLEM: <one short reason>.",
                        max_tokens=48, who=who)
    if reply is None or _OK.match(reply):
        return None
    m = _PROBLEM.match(reply)
    if not m:
        return None
    why = " ".join(m.group("why").split())[:200]
    return why or default_reason


_DIRECTIVE = re.compile(r"^\s*(ANSWER|SEARCH)\s*:\s*(.+)$", re.I | re.M)


def teacher_directive(reply: str | None) -> tuple[str, str] | None:
    """``("ANSWER" | "SEARCH", value)`` from the first ``ANSWER: ...`` / ``SEARCH: ...`` line of a
    reply (value without quotes or brackets), or None: one reading of the repair replies
    that teacher-assisted PFs ask for."""
    m = _DIRECTIVE.search(reply or "")
    return (m.group(1).upper(), m.group(2).strip().strip("'\"[]")) if m else None
