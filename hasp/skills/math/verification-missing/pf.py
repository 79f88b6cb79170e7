"""Every FINAL (always on, priority 0.90) → a check built from this problem (INJECT_CONTEXT).

Game of 24: the exact verifier's verdict on the proposed expression. Other problems: the
problem's own conditions quoted back, with the candidate to be substituted into them.
"""

import re

from hasp.domains.math.answers import clean_answer
from hasp.domains.math.game24 import verify_expression
from hasp.domains.math.task import game24_numbers
from hasp.pf import Intervention, InterventionType, ProgramFunction, register_pf

_CHECKED = re.compile(r"\b(check|verif|substitut|plug|confirm|sanity)", re.I)
_CONDITION = re.compile(
    r"\b(such that|satisf|where|positive|negative|distinct|integer|relatively prime|at least|at most|"
    r"less than|greater than|divisible|remainder|real numbers?|nonzero|non-zero)\b", re.I)
_SENTENCE = re.compile(r"[^.?!]+[.?!]?")


def _clip(text: str, n: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 3] + "..."


def conditions(question: str, limit: int = 3) -> list[str]:
    """Sentences of the problem that state a condition the answer must respect."""
    found = [s.strip() for s in _SENTENCE.findall(question) if _CONDITION.search(s)]
    return [_clip(s) for s in found[:limit]]


def ask(question: str) -> str:
    """The sentence that states what is asked (the last question / imperative sentence)."""
    sents = [s.strip() for s in _SENTENCE.findall(question) if s.strip()]
    for s in reversed(sents):
        if s.endswith("?") or re.match(r"(find|compute|determine|what|how|evaluate)\b", s, re.I):
            return _clip(s)
    return _clip(sents[-1]) if sents else ""


@register_pf("verification_missing")
class VerificationMissingPF(ProgramFunction):
    def should_activate(self, ctx, action_type, arg):
        return action_type == "FINAL"

    def intervene(self, ctx, action_type, arg, teacher=None):
        ans = clean_answer(arg)
        nums = game24_numbers(ctx)
        if nums:
            v = verify_expression(ans, nums)
            if v.ok:
                text = (f"[VERIFY] Exact check of FINAL[{arg}]: it uses {sorted(nums)} once each and "
                        f"equals 24. Verified.")
            else:
                text = (f"[VERIFY] Exact check of FINAL[{arg}] for the numbers {sorted(nums)} failed: "
                        f"{v.reason}. Fix the expression before answering.")
            return Intervention(type=InterventionType.INJECT_CONTEXT, context_text=text,
                                reason=f"game24 verdict: {v.code}")
        if not ans:
            return Intervention(type=InterventionType.INJECT_CONTEXT,
                                context_text="[VERIFY] FINAL is empty: state the single final answer.",
                                reason="empty answer")
        question = str(ctx.get("question", ""))
        conds = conditions(question)
        if conds:
            listed = " ".join(f"({i}) {c}" for i, c in enumerate(conds, 1))
            text = f"[VERIFY] Before committing FINAL[{ans}], substitute {ans} back into each condition: {listed}"
        else:
            text = (f"[VERIFY] Before committing FINAL[{ans}], re-read what is asked: \"{ask(question)}\" "
                    f"Does {ans} answer exactly that, and does it satisfy the problem when substituted back?")
        if not _CHECKED.search(str(ctx.get("thought", ""))):
            text += " Your reasoning does not check the result yet."
        text += " If any condition fails, recompute."
        return Intervention(type=InterventionType.INJECT_CONTEXT, context_text=text,
                            reason=f"pre_final verification of {ans!r} against {len(conds)} condition(s)")
