"""Look-alike titles in the last results → warning naming them (dynamic INJECT_CONTEXT)."""

from difflib import SequenceMatcher

from hasp.pf import Intervention, InterventionType, ProgramFunction, register_pf


def lookalike_pairs(titles):
    pairs = []
    for i, a in enumerate(titles):
        for b in titles[i + 1:]:
            if a and b and a != b and SequenceMatcher(None, a.lower(), b.lower()).ratio() >= 0.8:
                pairs.append((a, b))
    return pairs


@register_pf("wrong_entity_confusion")
class WrongEntityConfusionPF(ProgramFunction):
    max_fires = 2

    def should_activate(self, ctx, action_type, arg):
        if action_type not in ("READ", "FINAL"):
            return False
        titles = [h.get("title", "") for h in ctx.get("last_search_hits", [])]
        return bool(lookalike_pairs(titles))

    def intervene(self, ctx, action_type, arg, teacher=None):
        titles = [h.get("title", "") for h in ctx.get("last_search_hits", [])]
        a, b = lookalike_pairs(titles)[0]
        return Intervention(
            type=InterventionType.INJECT_CONTEXT,
            context_text=f"[ENTITY WARNING] '{a}' and '{b}' are different entities with similar "
                         "names. Use the one the question names exactly.",
            reason=f"look-alike titles: {a} / {b}")
