"""Hedged FINAL → teacher picks ANSWER or SEARCH; fallback READ/SEARCH (MODIFY_ACTION); LLM handler.

Teacher-assisted; the deterministic fallback runs when the teacher is None, raises, or
replies in neither shape. Reads ctx keys: question, thought, all_read_contents, queries,
last_search_hits, seen_hits, read_ids, step_count, max_steps, _final_redirects.
"""

import re

from hasp.domains.search.pf_bases import teacher_repair
from hasp.pf.search_support import (can_redirect_final, names, note_final_redirect, unread_hits,
                                            used_query)
from hasp.pf import Intervention, InterventionType, register_pf
from hasp.pf.bases import TeacherVotePF
from hasp.pf.teacher_ask import ask_teacher
from hasp.textutil import keyword_query

HEDGE = re.compile(r"\b(unknown|not sure|unsure|don'?t know|do not know|cannot (?:find|determine)|"
                   r"can'?t (?:find|tell)|no information|not (?:found|mentioned|stated)|unclear|maybe|"
                   r"probably|possibly|i guess|i think)\b", re.I)


def hedged(ctx, answer):
    return bool(HEDGE.search(answer) or HEDGE.search(str(ctx.get("thought", ""))))


def fallback_action(ctx):
    """(type, arg) of the deterministic repair, or None when nothing new is left to try."""
    unread = unread_hits(ctx)
    if unread and int(ctx.get("read_count", 0)) == 0:
        return "READ", unread[0]
    question = str(ctx.get("question", ""))
    for cand in [keyword_query(question), *names(question)]:
        if cand and not used_query(ctx, cand):
            return "SEARCH", cand
    if unread:
        return "READ", unread[0]
    return None


def _evidence(ctx, n=1500):
    return str(ctx.get("all_read_contents", ""))[-n:] or "(nothing read yet)"


@register_pf("answer_confidence_guard")
class AnswerConfidenceGuardPF(TeacherVotePF):
    needs_teacher = True
    fires = staticmethod(hedged)

    def should_activate(self, ctx, action_type, arg):
        return action_type == "FINAL" and can_redirect_final(ctx) and hedged(ctx, arg)

    def intervene(self, ctx, action_type, arg, teacher=None):
        reply = ask_teacher(teacher, (
            f"Question: {ctx.get('question', '')}\nEvidence read so far:\n{_evidence(ctx)}\n"
            f"The agent is unsure and proposes: {arg[:200]}\nIf the evidence already answers the question, "
            "reply ANSWER: <short answer>. Otherwise reply SEARCH: <query of at most 8 words> for the "
            "missing fact."), max_tokens=32, who=self.skill_id)
        repaired = teacher_repair(ctx, reply, answered="teacher answered from the evidence",
                                  searched="teacher named the missing fact's query")
        if repaired is not None:
            return repaired
        repair = fallback_action(ctx)
        if repair is None:
            return Intervention(type=InterventionType.NOOP, reason="hedged answer; nothing new to try")
        note_final_redirect(ctx)
        return Intervention(type=InterventionType.MODIFY_ACTION, new_action_type=repair[0],
                            new_action_arg=repair[1], reason=f"hedged answer; trying {repair[0]}")

    def teacher_question(self, ctx, answer):
        return (f"Question: {ctx.get('question', '')}\nEvidence:\n{_evidence(ctx, 1200)}\n"
                f"The agent hedges and answers: {answer[:200]}\nIs this answer clearly supported by the evidence?")
