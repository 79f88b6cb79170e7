"""Look-alike titles in the last results → fixed entity warning (INJECT_CONTEXT, prompt-equivalent);
LLM handler. The pair found is recorded in ``reason`` (audit), not in the injected text.

Reads ctx keys: question, last_search_hits, seen_hits, all_read_contents.
"""

from functools import lru_cache

from rapidfuzz.fuzz import ratio

from hasp.pf import Intervention, InterventionType, ProgramFunction, register_pf
from hasp.pf.teacher_ask import teacher_objection

MIN_RATIO = 0.8


def lookalike_pairs(titles):
    return list(_lookalike(tuple(titles)))


@lru_cache(maxsize=1024)  # the same result list is checked on every step until the next SEARCH
def _lookalike(titles):
    """Pairs of distinct titles whose case-folded normalised Indel similarity (rapidfuzz's
    ``ratio``: 2·LCS / total length) is at least ``MIN_RATIO``. One C call per pair: difflib's
    pure-Python matcher was most of this PF's cost on the first step after each SEARCH."""
    low = [t.lower() for t in titles]
    cutoff = 100 * MIN_RATIO
    pairs = []
    for i, a in enumerate(titles):
        for j in range(i + 1, len(titles)):
            b = titles[j]
            if a and b and a != b and ratio(low[i], low[j], score_cutoff=cutoff):
                pairs.append((a, b))
    return tuple(pairs)


def _pairs(ctx, key="last_search_hits"):
    return lookalike_pairs([str(h.get("title", "")) for h in ctx.get(key) or []])


@register_pf("wrong_entity_confusion")
class WrongEntityConfusionPF(ProgramFunction):
    watches = ("READ", "FINAL")
    max_fires = 2
    handler_kind = "llm"

    def should_activate(self, ctx, action_type, arg):
        return action_type in ("READ", "FINAL") and bool(_pairs(ctx))

    def intervene(self, ctx, action_type, arg, teacher=None):
        pairs = _pairs(ctx)
        if not pairs:  # asked without having activated: nothing to warn about
            return Intervention(type=InterventionType.NOOP, reason="no look-alike titles")
        a, b = pairs[0]
        return Intervention(
            type=InterventionType.INJECT_CONTEXT,
            context_text="[ENTITY WARNING] The results contain different entities with nearly the same name. "
                         "Use only the document whose title matches the question's entity exactly.",
            reason=f"look-alike titles: {a} / {b}")

    def check_final(self, ctx, answer, teacher=None):
        pairs = _pairs(ctx, "seen_hits")
        if teacher is None or not pairs:
            return None
        listed = "; ".join(f"{a} / {b}" for a, b in pairs[:3])
        return teacher_objection(teacher, (
            f"Question: {ctx.get('question', '')}\nLook-alike entities in the results: {listed}\n"
            f"Evidence read:\n{str(ctx.get('all_read_contents', ''))[-1200:]}\nProposed answer: {answer[:200]}\n"
            "Is the answer about exactly the entity the question names (not its look-alike)?"),
            who=self.skill_id)
