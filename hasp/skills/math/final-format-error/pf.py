"""FINAL answer wrapped in formatting noise → FINAL with the bare answer (MODIFY_ACTION).

The only math PF that rewrites the action; it never changes mathematical content, only
presentation (\\boxed{}, $…$, \\text{} units, "x =", "The answer is", trailing period, 27.0, 1,234).
"""

import re

from hasp.domains.math.answers import clean_answer, parse_number
from hasp.domains.math.game24 import normalize_expression, verify_expression
from hasp.domains.math.task import game24_numbers
from hasp.pf import Intervention, InterventionType, ProgramFunction, register_pf

_PLAIN_NUMBER_NOISE = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+|[+-]?\d+\.0+")


def fixed_answer(ctx, arg):
    """The cleaned answer if cleaning changes something and leaves a usable answer, else None."""
    raw = (arg or "").strip()
    nums = game24_numbers(ctx)
    if nums:
        cand = re.sub(r"\s*([-+*/()])\s*", r"\1", normalize_expression(clean_answer(raw)))
        if not cand or cand == re.sub(r"\s*([-+*/()])\s*", r"\1", normalize_expression(raw)):
            return None  # the verifier already reads this spelling
        if verify_expression(cand, nums).code in ("empty", "syntax", "unsupported"):
            return None  # cleaning did not produce an arithmetic expression: nothing safe to do
        return cand
    cand = clean_answer(raw)
    if _PLAIN_NUMBER_NOISE.fullmatch(cand):
        n = parse_number(cand)
        if n is not None and n.denominator == 1:
            cand = str(n.numerator)
    if not cand or cand == raw:
        return None
    return cand


BARE_HINT = ("[FORMAT] Your reply has no FINAL[...] line; the answer was taken from an equation in the "
             "text. End with exactly one line FINAL[answer].")


@register_pf("final_format_error")
class FinalFormatErrorPF(ProgramFunction):
    max_fires = 2

    def should_activate(self, ctx, action_type, arg):
        if action_type != "FINAL":
            return False
        return ctx.get("answer_format") == "bare" or fixed_answer(ctx, arg) is not None

    def intervene(self, ctx, action_type, arg, teacher=None):
        new = fixed_answer(ctx, arg)
        if ctx.get("answer_format") == "bare" and new is None:
            return Intervention(type=InterventionType.INJECT_CONTEXT, context_text=BARE_HINT,
                                reason="answer found without FINAL[...]")
        if new is None:
            return Intervention(type=InterventionType.NOOP, reason="answer already clean")
        return Intervention(type=InterventionType.MODIFY_ACTION, new_action_type="FINAL", new_action_arg=new,
                            context_text=f"[FORMAT] FINAL[{arg.strip()}] was normalised to FINAL[{new}].",
                            reason=f"normalised {arg.strip()!r} -> {new!r}")
