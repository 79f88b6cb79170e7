"""FINAL before any CONVERT -> CONVERT of the question's number and units (MODIFY_ACTION)."""

import re

from hasp.pf import register_pf
from hasp.pf.base import ProgramFunction
from hasp.pf.intervention import Intervention, InterventionType

UNITS = ("km", "cm", "mm", "miles", "mile", "mi", "feet", "foot", "ft", "inches", "inch", "in", "yards", "yard",
         "yd", "m")
_NUMBER_UNIT = re.compile(r"(-?\d+(?:\.\d+)?)\s*(" + "|".join(UNITS) + r")\b", re.I)
_UNIT = re.compile(r"\b(" + "|".join(UNITS) + r")\b", re.I)


def conversion(question):
    """'3 mile to km' from 'How many km is 3 miles?', or None."""
    m = _NUMBER_UNIT.search(question)
    if not m:
        return None
    others = [u for u in _UNIT.findall(question[:m.start()] + " " + question[m.end():])
              if u.lower() != m.group(2).lower()]
    return f"{m.group(1)} {m.group(2)} to {others[0]}" if others else None


@register_pf("unit_suffix_guard")
class UnitSuffixGuard(ProgramFunction):
    watches = ("FINAL",)
    max_fires = 1

    def should_activate(self, ctx, action_type, arg):
        called = any(h.startswith("CONVERT[") for h in ctx.get("action_history", []))
        return action_type == "FINAL" and not called and conversion(str(ctx.get("question", ""))) is not None

    def intervene(self, ctx, action_type, arg, teacher=None):
        return Intervention(InterventionType.MODIFY_ACTION, new_action_type="CONVERT",
                            new_action_arg=conversion(str(ctx.get("question", ""))),
                            reason="answered before calling CONVERT", skill_id="unit_suffix_guard")
