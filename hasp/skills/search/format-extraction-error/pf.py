"""FINAL / SEARCH argument with extra text → the bare answer or query (MODIFY_ACTION).

Teacher-assisted (one of the always-on three): the teacher extracts the short answer when
configured; the deterministic cleaner is the fallback when it is absent or fails.
Reads ctx keys: question.
"""

import re

from hasp.pf.search_support import names
from hasp.pf import Intervention, InterventionType, ProgramFunction, register_pf
from hasp.pf.teacher_ask import ask_teacher

_NESTED = re.compile(r"\b(?:SEARCH|READ|FINAL)\[([^\[\]]*)\]?", re.I)
_LABEL = re.compile(r"^\s*(?:so\s+)?(?:(?:my|the)\s+)?(?:final\s+)?answer(?:\s+is)?\s*[:\-]?\s*|"
                    r"^\s*(?:it is|it's)\s+", re.I)
_EXPLAIN = re.compile(r"\s*(?:\bbecause\b|\bsince\b|\bas (?:stated|mentioned|shown)\b|\baccording to\b|"
                      r"\bbased on\b|[;\n(]|\.\s|\.$|,\s*(?:which|who|as)\b)", re.I)
_JUSTIFIED = re.compile(r"\bbecause\b|\baccording to\b", re.I)
_REASONING = re.compile(r"\b(?:thought|action|observation)\s*:", re.I)
_EDGE = "\"'`*[](){}. "
MAX_ANSWER_WORDS = 10


def malformed_final(arg):
    return bool(_NESTED.search(arg) or _LABEL.match(arg) or len(arg.split()) > MAX_ANSWER_WORDS
                or bool(_JUSTIFIED.search(arg)))


def malformed_search(arg):
    return bool(_NESTED.search(arg) or _REASONING.search(arg) or "\n" in arg.strip())


def clean_final(arg, question=""):
    """The short answer inside a sentence-like FINAL argument."""
    inner = _NESTED.search(arg)
    s = inner.group(1) if inner and inner.group(1).strip() else arg
    s = _LABEL.sub("", s.strip(), count=1)
    s = _EXPLAIN.split(s, maxsplit=1)[0].strip(_EDGE)
    if len(s.split()) > 6:
        fresh = [n for n in names(s) if n.lower() not in question.lower()]
        if fresh:
            s = fresh[-1]
    return s.strip(_EDGE)


def clean_search(arg):
    """The query part of a SEARCH argument polluted with reasoning or nested syntax."""
    inner = _NESTED.search(arg)
    s = inner.group(1) if inner and inner.group(1).strip() else arg
    s = _REASONING.split(s)[-1] if _REASONING.search(s) else s
    lines = [ln.strip() for ln in s.splitlines() if ln.strip()]
    return (lines[0] if lines else "").strip(_EDGE)


@register_pf("format_extraction_error")
class FormatExtractionErrorPF(ProgramFunction):
    watches = ("SEARCH", "FINAL")
    needs_teacher = True
    max_fires = 3

    def should_activate(self, ctx, action_type, arg):
        # the cheap malformation test first: most arguments are fine and need no cleaning
        if action_type == "FINAL":
            if not malformed_final(arg):
                return False
            cleaned = clean_final(arg, str(ctx.get("question", "")))
        elif action_type == "SEARCH":
            if not malformed_search(arg):
                return False
            cleaned = clean_search(arg)
        else:
            return False
        return bool(cleaned) and cleaned != arg.strip()

    def intervene(self, ctx, action_type, arg, teacher=None):
        question = str(ctx.get("question", ""))
        if action_type == "FINAL":
            reply = ask_teacher(teacher, (
                f"Question: {question}\nAn agent gave this final answer:\n{arg[:500]}\n"
                "Extract the answer itself (a name, date or number of at most 6 words). "
                "Reply with the answer only."), max_tokens=24, who=self.skill_id)
            short = reply.splitlines()[0].strip(_EDGE) if reply else ""
            if short and len(short.split()) <= 6:
                return Intervention(type=InterventionType.MODIFY_ACTION, new_action_type="FINAL",
                                    new_action_arg=short, reason="teacher extracted the short answer")
            return Intervention(type=InterventionType.MODIFY_ACTION, new_action_type="FINAL",
                                new_action_arg=clean_final(arg, question), reason="cut answer to its core")
        return Intervention(type=InterventionType.MODIFY_ACTION, new_action_type="SEARCH",
                            new_action_arg=clean_search(arg), reason="removed reasoning from the query")
