"""Test doubles and tiny test-only PFs for the harness tests (not a skill library)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hasp.pf import Intervention, InterventionType, ProgramFunction
from hasp.pf.library import Skill, SkillLibrary
from hasp.pf.skill_md import SkillSpec


@dataclass
class Reply:
    text: str
    prompt_tokens: int = 10
    completion_tokens: int = 5


class ScriptedPolicy:
    """Returns the scripted replies in order (then FINAL[unknown]); records every prompt."""

    def __init__(self, replies):
        self.replies = list(replies)
        self.seen = []

    def chat(self, messages, **kw):
        self.seen.append([dict(m) for m in messages])
        return Reply(self.replies.pop(0) if self.replies else "FINAL[unknown]")


class ScriptedTeacherDouble:
    """A teacher that answers with fixed replies in order (the last one repeats)."""

    def __init__(self, *replies, prompt_tokens=20, completion_tokens=3):
        self.replies = list(replies) or [""]
        self.prompts = []
        self.pt, self.ct = prompt_tokens, completion_tokens

    def chat(self, messages, max_tokens=None, temperature=None, **kw):
        self.prompts.append(messages[-1]["content"])
        text = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
        return Reply(text, self.pt, self.ct)


class GarbageTeacherDouble(ScriptedTeacherDouble):
    """Always answers something no strict parser accepts."""

    def __init__(self):
        super().__init__("Sure! Happy to help with that. Let me think step by step...")


class FailingTeacherDouble:
    """Every call raises, like an endpoint that is down after the client's retries."""

    def __init__(self):
        self.calls = 0

    def generate(self, messages, max_tokens=256, temperature=0.0):
        self.calls += 1
        raise TimeoutError("teacher endpoint timed out")


# ----------------------------------------------------------------------------- test-only PFs
class TeacherRewritePF(ProgramFunction):
    """Rewrites every SEARCH; asks the teacher when given one (no internal try/except)."""

    skill_id = "retrieval_failure"
    needs_teacher = True

    def should_activate(self, ctx, action_type, arg):
        return action_type == "SEARCH"

    def intervene(self, ctx, action_type, arg, teacher=None):
        if teacher is not None:
            q = teacher.generate([{"role": "user", "content": arg}], max_tokens=16).strip()
            return Intervention(type=InterventionType.MODIFY_ACTION, new_action_type="SEARCH",
                                new_action_arg=q, reason="teacher query")
        return Intervention(type=InterventionType.MODIFY_ACTION, new_action_type="SEARCH",
                            new_action_arg=arg.split()[0], reason="deterministic query")


class VotePF(ProgramFunction):
    """A handler-only PF: never fires on steps, votes against every FINAL with its reason."""

    handler_kind = "code"

    def __init__(self, skill_id, kind="code", raises=False):
        self.skill_id = skill_id
        self.handler_kind = kind
        self.raises = raises
        self.asked = 0

    def should_activate(self, ctx, action_type, arg):
        return False

    def intervene(self, ctx, action_type, arg, teacher=None):
        return Intervention()

    def check_final(self, ctx, answer, teacher=None):
        self.asked += 1
        if self.raises:
            raise RuntimeError("handler bug")
        if self.handler_kind == "llm":
            assert teacher is not None
            return teacher.generate([{"role": "user", "content": answer}]) or None
        return f"{self.skill_id} doubts {answer}"


class CheapPF(ProgramFunction):
    """A cheap step PF for the latency benchmark: fires on READ only."""

    def __init__(self, skill_id):
        self.skill_id = skill_id

    def should_activate(self, ctx, action_type, arg):
        return action_type == "READ" and ctx["read_count"] > 5

    def intervene(self, ctx, action_type, arg, teacher=None):
        return Intervention(type=InterventionType.INJECT_CONTEXT, context_text="x")


def skill(skill_id, pf=None, *, priority=0.5, modes=("all",), keywords=(), phases=None, summary=None):
    spec = SkillSpec(skill_id=skill_id, priority=priority, applicable_modes=list(modes),
                     trigger_keywords=list(keywords), phases=phases or {},
                     system_summary=summary or f"summary of {skill_id}", description=f"does {skill_id}")
    if pf is not None:
        pf.skill_id = skill_id
    return Skill(spec=spec, path=Path(f"/virtual/{skill_id}"), version=1, generated=False, pf=pf)


def library(*skills):
    lib = SkillLibrary(domain="search", root=Path("/virtual"), skills=list(skills))
    lib.skills.sort(key=lambda s: (-s.spec.priority, s.skill_id))
    return lib
