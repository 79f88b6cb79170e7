"""Answer taken from a sentence unrelated to the question → teacher re-derives; fallback quotes
the matching sentences (MODIFY_ACTION with teacher / INJECT_CONTEXT without); LLM handler.

Reads ctx keys: question, has_read, all_read_contents, step_count, max_steps, _final_redirects.
"""

from hasp.domains.search.pf_bases import teacher_repair
from hasp.pf.search_support import names, sentences
from hasp.pf import Intervention, InterventionType, register_pf
from hasp.pf.bases import TeacherVotePF
from hasp.pf.teacher_ask import ask_teacher, teacher_directive
from hasp.textutil import content_tokens



def _split(ctx, answer):
    """(sentences containing the answer with whether each shares a relation word of the question,
    sentences sharing relation words), from the read text."""
    ans = " ".join(answer.split()).strip(" .\"'").lower()
    question = str(ctx.get("question", ""))
    # the asked relation's words: the question's content words minus its entity names and the answer
    q_toks = (set(content_tokens(question)) - set(content_tokens(" ".join(names(question))))
              - set(content_tokens(ans)))
    with_answer, on_topic = [], []
    for s in sentences(str(ctx.get("all_read_contents", ""))):
        shares = bool(q_toks & set(content_tokens(s)))
        if ans and ans in s.lower():
            with_answer.append((s, shares))
        elif shares:
            on_topic.append(s)
    return with_answer, on_topic


def off_topic_answer(ctx, answer):
    """The answer occurs in the read text, but only in sentences without the question's words."""
    if not ctx.get("has_read") or len(answer.strip()) < 2:
        return False
    with_answer, _ = _split(ctx, answer)
    return bool(with_answer) and not any(shares for _, shares in with_answer)


@register_pf("reasoning_error")
class ReasoningErrorPF(TeacherVotePF):
    needs_teacher = True
    fires = staticmethod(off_topic_answer)

    def intervene(self, ctx, action_type, arg, teacher=None):
        with_answer, on_topic = _split(ctx, arg)
        reply = ask_teacher(teacher, (
            f"Question: {ctx.get('question', '')}\nProposed answer: {arg[:200]}\n"
            f"It comes from: {' '.join(s for s, _ in with_answer)[:500]}\n"
            f"Sentences about the question's terms: {' '.join(on_topic)[:800] or '(none)'}\n"
            "If these sentences give the correct answer reply ANSWER: <short answer>; if a fact is missing "
            "reply SEARCH: <query of at most 8 words>."), max_tokens=32, who=self.skill_id)
        kind, value = teacher_directive(reply) or ("", "")
        if kind == "ANSWER" and value.lower() == arg.strip().lower():
            return Intervention(type=InterventionType.NOOP, reason="teacher confirmed the answer")
        repaired = teacher_repair(ctx, reply, answered="teacher re-derived the answer",
                                  searched="teacher asked for the missing fact")
        if repaired is not None:
            return repaired
        quoted = " | ".join(f'"{s[:160]}"' for s in on_topic[:2]) or "none of the read sentences"
        return Intervention(type=InterventionType.INJECT_CONTEXT,
                            context_text=(f"[REASONING CHECK] '{arg[:60]}' comes from a sentence about something "
                                          f"else. Sentences about what the question asks: {quoted}"),
                            reason="answer only in sentences without the question's words")

    def teacher_question(self, ctx, answer):
        with_answer, _ = _split(ctx, answer)
        return (f"Question: {ctx.get('question', '')}\nProposed answer: {answer[:200]}\n"
                f"The only evidence sentences containing it: {' '.join(s for s, _ in with_answer)[:600]}\n"
                "Do these sentences state the fact the question asks for?")
