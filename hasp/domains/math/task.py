"""The math environment: one step, ``reasoning … FINAL[answer]``, scored exactly.

A math episode is a single policy turn (paper App. G: ``max_steps = 1``). The pieces the agent
loop needs are plain functions so the loop can use them without a math-specific subclass:

* :func:`build_messages` — the chat prompt for one :class:`~hasp.domains.math.datasets.MathItem`;
* :func:`split_output` — model text → (reasoning, proposed answer or None);
* :func:`answer_grammar` — the same format as a GBNF grammar, for engines that constrain decoding;
* :func:`math_ctx` — the step context the ``pre_final`` PFs read (``question``, ``thought``,
  ``kind``, ``numbers``, ``source``; never the gold answers);
* :func:`pre_final` — run a math PF library on the proposed ``FINAL`` once;
* :func:`score` — 1.0/0.0 by answer equivalence (numeric) or the exact 24-game verifier;
* :class:`MathEnvironment` — ties them together for one item.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from hasp.domains.math.answers import clean_answer, extract_final_answer, is_equivalent_any
from hasp.domains.math.datasets import MathItem
from hasp.domains.math.game24 import TARGET, Verdict, numbers_from_text, verify_expression
from hasp.llm import gbnf
from hasp.pf.base import ProgramFunction, Teacher
from hasp.pf.dispatcher import DispatchResult, Dispatcher
from hasp.prompts import prompt

__all__ = [
    "MathEnvironment", "MathStepResult", "SYSTEM_PROMPT", "answer_grammar", "answer_of", "build_messages",
    "game24_numbers", "bare_game24_answer", "math_ctx", "pre_final", "score", "split_output", "split_output_for",
    "verify_game24",
]

SYSTEM_PROMPT = prompt("hasp.domains.math", "task", "system")
GAME24_SYSTEM_PROMPT = prompt("hasp.domains.math", "task", "game24_system")


def build_messages(item: MathItem, skills_text: str = "") -> list[dict[str, str]]:
    """System + user messages for one item; ``skills_text`` (skill summaries) is appended to the system."""
    system = GAME24_SYSTEM_PROMPT if item.kind == "game24" else SYSTEM_PROMPT
    if skills_text:
        system += "\n" + prompt("hasp.domains.math", "task", "skills_header") + "\n" + skills_text
    return [{"role": "system", "content": system}, {"role": "user", "content": item.problem}]


_FINAL_AT = re.compile(r"FINAL(?:[ _]ANSWER)?\s*\[", re.I)


def split_output(text: str | None) -> tuple[str, str | None]:
    """(reasoning, answer): the reasoning is the text before the last ``FINAL[``; answer may be None."""
    text = text or ""
    answer = extract_final_answer(text)
    starts = [m.start() for m in _FINAL_AT.finditer(text)]
    thought = text[:starts[-1]] if starts else text
    thought = re.sub(r"^\s*Thought\s*:\s*", "", thought.strip(), flags=re.I).strip()
    return thought, answer


#: longest answer the grammar admits (characters): a number or a short expression
MAX_ANSWER_CHARS = 40
#: reasoning characters the grammar admits per token of the reply budget: digits and symbols are
#: often a token each, so fewer than prose, and the FINAL line must still fit after the reasoning
REASONING_CHARS_PER_TOKEN = 1.5


@lru_cache(maxsize=None)
def answer_grammar(max_tokens: int) -> str:
    """GBNF for one math reply: optional reasoning, then the line ``FINAL[answer]`` that ends it.

    The reasoning has no square brackets, so the reply holds exactly one ``FINAL[`` and it is the
    answer ``split_output`` reads; it is bounded so a reply of ``max_tokens`` tokens still reaches
    its FINAL line. The answer is one line without brackets (a number or an expression)."""
    reasoning = max(0, int(max_tokens * REASONING_CHARS_PER_TOKEN) - MAX_ANSWER_CHARS - len("\nFINAL[]"))
    first, rest = gbnf.char_class("[] \n", negated=True), gbnf.char_class("[]\n", negated=True)
    return gbnf.rules({
        "root": f'(reasoning {gbnf.literal(chr(10))})? {gbnf.literal("FINAL[")} answer {gbnf.literal("]")}',
        "reasoning": f'{gbnf.char_class("[]", negated=True)}{{1,{max(1, reasoning)}}}',
        "answer": f"{first} {rest}{{0,{MAX_ANSWER_CHARS - 1}}}",
    })


_EQUATION_LINE = re.compile(r"^[^=\n]*=[^=\n]*$", re.M)
_EXPR_CHARS = r"[\d\s()+\-*/x×÷.]"
_EXPR_TAIL = re.compile(rf"\(?\s*\d{_EXPR_CHARS}*$")      # an expression ending a text
_EXPR_HEAD = re.compile(rf"^{_EXPR_CHARS}*\d\s*\)*")       # an expression starting a text
_TWENTY_FOUR_END = re.compile(r"(?:^|[^\d.])24(?:\.0+)?\s*$")
_TWENTY_FOUR_START = re.compile(r"^\s*24(?:\.0+)?(?!\d|\.\d)")
_ARITH = re.compile(r"\d\s*\)*\s*[-+*/x×÷]\s*\(*\s*\d")


def bare_game24_answer(text: str | None) -> str | None:
    """The expression of the last ``… 24 = expr`` / ``expr = 24 …`` line, for replies without ``FINAL[``.

    Small models often state the 24-game answer as an equation instead of the requested
    ``FINAL[expr]``. Taking that equation's expression side keeps their attempt gradable; the
    episode marks it as ``answer_format = "bare"`` so the format PF can still ask for FINAL[...].
    Lines without an arithmetic expression next to a literal 24 give None.
    """
    for line in reversed(_EQUATION_LINE.findall(text or "")):
        left, right = line.split("=", 1)
        m = _EXPR_TAIL.search(left)
        if m and _TWENTY_FOUR_START.match(right) and _ARITH.search(m.group(0)):
            return m.group(0).strip().strip(".").strip()
        m = _EXPR_HEAD.match(right.strip())
        if m and _TWENTY_FOUR_END.search(left) and _ARITH.search(m.group(0)):
            return m.group(0).strip().strip(".").strip()
    return None


def split_output_for(item: MathItem, text: str | None) -> tuple[str, str | None, str]:
    """(reasoning, answer, answer_format): ``split_output`` plus, for 24-game items, the bare
    equation fallback. ``answer_format`` is ``"final"`` (FINAL[…] or another explicit answer
    marker), ``"bare"`` (the equation fallback) or ``"none"``."""
    thought, answer = split_output(text)
    if answer is not None:
        return thought, answer, "final"
    if item.kind == "game24":
        bare = bare_game24_answer(text)
        if bare is not None:
            return thought, bare, "bare"
    return thought, None, "none"


def answer_of(prediction: str | None) -> str:
    """The answer inside a prediction: what ``FINAL[…]``/``\\boxed{}``/"answer is" hold, else the text."""
    if not prediction:
        return ""
    got = extract_final_answer(prediction)
    return (got if got is not None else prediction).strip()


def verify_game24(item: MathItem, prediction: str | None) -> Verdict:
    """The exact 24-game verdict for a prediction (raw model text or just the expression)."""
    if not item.numbers:
        return Verdict(False, "item has no puzzle numbers", None, "empty")
    return verify_expression(clean_answer(answer_of(prediction)), item.numbers, TARGET)


def score(item: MathItem, prediction: str | None) -> float:
    """1.0 if ``prediction`` solves ``item``, else 0.0. Never raises.

    ``prediction`` may be the whole model output or only the answer. Numeric items compare with
    :func:`~hasp.domains.math.answers.answers_equivalent` against every gold answer; 24-game items
    are checked by the exact verifier (reference expressions are not needed).
    """
    if not prediction:
        return 0.0
    if item.kind == "game24":
        return float(verify_game24(item, prediction).ok)
    return float(is_equivalent_any(answer_of(prediction), item.answers))


def game24_numbers(ctx: dict[str, Any]) -> list[int] | None:
    """The puzzle numbers of a 24-game step context (``ctx['numbers']`` or parsed from the question)."""
    nums = ctx.get("numbers")
    if isinstance(nums, (list, tuple)) and nums and all(isinstance(n, int) for n in nums):
        return list(nums)
    if ctx.get("kind") not in (None, "game24"):
        return None
    q = str(ctx.get("question", ""))
    if "24" not in q:
        return None
    return numbers_from_text(q)


def math_ctx(item: MathItem, thought: str = "", *, step_count: int = 0, max_steps: int = 1,
             action_history: list[str] | None = None, answer_format: str = "final") -> dict[str, Any]:
    """The step context the math PFs see. Gold answers are deliberately not in it."""
    return {
        "question": item.problem,
        "thought": thought,
        "step_count": step_count,
        "max_steps": max_steps,
        "action_history": list(action_history or []),
        "kind": item.kind,
        "numbers": list(item.numbers) if item.numbers else None,
        "source": item.source,
        "item_id": item.id,
        "answer_format": answer_format,
    }


def pre_final(item: MathItem, thought: str, answer: str, pfs: list[ProgramFunction], *,
              teacher: Teacher | None = None, dispatcher: Dispatcher | None = None,
              ctx: dict[str, Any] | None = None) -> DispatchResult:
    """Run the ``pre_final`` PFs on a proposed ``FINAL[answer]`` (one dispatch, fault-isolated)."""
    d = dispatcher or Dispatcher(pfs, teacher=teacher)
    return d.dispatch(ctx if ctx is not None else math_ctx(item, thought), "FINAL", answer)


@dataclass
class MathStepResult:
    """What one math step produced: the proposed and final answer, PF effects, and the reward."""

    thought: str
    proposed: str | None
    answer: str | None
    reward: float
    contexts: list[str] = field(default_factory=list)
    fired: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    parse_error: str = ""


class MathEnvironment:
    """Single-step environment: score the policy's ``FINAL[…]``, optionally after the PF hook.

    ``step`` never raises on model mistakes: a missing ``FINAL`` gives reward 0 and a
    ``parse_error``; PF faults are isolated by the dispatcher and listed in ``errors``.
    """

    def __init__(self, pfs: list[ProgramFunction] | None = None, *, teacher: Teacher | None = None) -> None:
        self.pfs = list(pfs or [])
        self.teacher = teacher

    def step(self, item: MathItem, model_output: str) -> MathStepResult:
        thought, proposed = split_output(model_output)
        if proposed is None:
            return MathStepResult(thought=thought, proposed=None, answer=None, reward=0.0,
                                  parse_error="no FINAL[...] answer found")
        answer, contexts, fired, errors = proposed, [], [], []
        if self.pfs:
            d = pre_final(item, thought, proposed, self.pfs, teacher=self.teacher)
            if d.action_type == "FINAL":
                answer = d.arg
            contexts, errors = list(d.contexts), list(d.errors)
            fired = [{"skill_id": f.skill_id, "type": f.type, "reason": f.reason, "applied": f.applied}
                     for f in d.fired]
        return MathStepResult(thought=thought, proposed=proposed, answer=answer,
                              reward=score(item, answer), contexts=contexts, fired=fired, errors=errors)
