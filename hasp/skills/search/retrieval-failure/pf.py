"""Over-long SEARCH, or a near-repeat of a query that found nothing → a short query (MODIFY_ACTION).

Teacher-assisted (one of the always-on three): the teacher writes the query when one is
configured; the deterministic shortener is the fallback when it is absent, fails or
replies with something that is not a short query.
Reads ctx keys: question, queries, empty_results.
"""

import re

from hasp.pf.search_support import names
from hasp.pf import Intervention, InterventionType, ProgramFunction, register_pf
from hasp.pf.teacher_ask import ask_teacher
from hasp.textutil import jaccard, keyword_query

_QUOTED = re.compile(r"\"([^\"]{3,80})\"")
_LABEL = re.compile(r"^\s*(search\s+)?(query|search)\s*[:=]\s*", re.I)
MAX_WORDS = 15
MIN_REPEAT_WORDS = 5


def failed_repeat(ctx, arg):
    """The last search returned nothing and ``arg`` is mostly the same words again."""
    queries = ctx.get("queries") or []
    return (bool(ctx.get("empty_results")) and bool(queries) and len(arg.split()) >= MIN_REPEAT_WORDS
            and jaccard(arg, str(queries[-1])) >= 0.5)


def shorten(arg, question, aggressive=False):
    """Deterministic short query: a quoted span, else (aggressive) the first name, else content words."""
    m = _QUOTED.search(arg)
    if m:
        return m.group(1)
    found = names(arg)
    if aggressive and found:
        return found[0]
    return keyword_query(arg, max_words=4 if aggressive else 8) or keyword_query(question)


def clean_teacher_query(reply):
    """First line of the reply without a 'Query:' label or quotes; None if not a short query."""
    line = _LABEL.sub("", reply.strip().splitlines()[0]).strip().strip("'\"`").strip()
    return line if 1 <= len(line.split()) <= 12 else None


@register_pf("retrieval_failure")
class RetrievalFailurePF(ProgramFunction):
    watches = ("SEARCH",)
    needs_teacher = True
    max_fires = 3

    def should_activate(self, ctx, action_type, arg):
        return action_type == "SEARCH" and (len(arg.split()) > MAX_WORDS or failed_repeat(ctx, arg))

    def intervene(self, ctx, action_type, arg, teacher=None):
        question = str(ctx.get("question", ""))
        repeat = failed_repeat(ctx, arg)
        why = "repeats a query that found nothing" if repeat else f"has {len(arg.split())} words"
        reply = ask_teacher(teacher, (
            f"An agent answering the question below searches a document collection.\nQuestion: {question}\n"
            f"Its next search query {why}:\n{arg[:500]}\n"
            "Write one better search query of at most 8 words, e.g. the full name of the entity to look "
            "up. Reply with the query only."), max_tokens=32, who=self.skill_id)
        clean = clean_teacher_query(reply) if reply else None
        if clean and clean.lower() != arg.strip().lower():
            return Intervention(type=InterventionType.MODIFY_ACTION, new_action_type="SEARCH",
                                new_action_arg=clean, reason=f"teacher rewrote query that {why}")
        return Intervention(type=InterventionType.MODIFY_ACTION, new_action_type="SEARCH",
                            new_action_arg=shorten(arg, question, aggressive=repeat),
                            reason=f"shortened query that {why}")
