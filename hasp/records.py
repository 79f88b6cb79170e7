"""What an episode leaves behind: steps, each with its PF audit event e_t (paper §3.2).

These dataclasses are the boundary between the rollout and everything downstream
(failure detection, signal scoring, training data), so they serialise losslessly
to JSON lines.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

#: an unparseable reply is kept in the conversation cut to this length, so one runaway
#: generation does not fill the context of every later step
RAW_REPLY_CHARS = 400


@dataclass
class Action:
    type: str  # SEARCH | READ | FINAL
    arg: str

    def render(self) -> str:
        return f"{self.type}[{self.arg}]"


@dataclass
class AuditEvent:
    """e_t = (s_t, a_orig, a_final, c_t, κ_t, Δ_t) for one step."""

    state: dict[str, Any]
    a_orig: Action
    a_final: Action
    context: list[str] = field(default_factory=list)
    fired: list[dict[str, Any]] = field(default_factory=list)  # κ_t: skill_id, type, reason, applied
    mode: str = "none"
    feedback: dict[str, Any] = field(default_factory=dict)  # Δ_t: what executing a_final produced
    errors: list[str] = field(default_factory=list)
    dispatch_s: float = 0.0
    #: the whole harness share of this step: step context, dispatch, handler votes, phase reminders
    harness_s: float = 0.0
    phases: list[str] = field(default_factory=list)  # "<skill_id>:<phase>" reminders shown after this step
    handlers: dict[str, Any] = field(default_factory=dict)  # FINAL-time votes (HandlerOutcome.to_dict)

    @property
    def was_modified(self) -> bool:
        return self.a_orig != self.a_final


@dataclass
class StepRecord:
    """One step of an episode; it renders itself into the chat turns it adds to the prompt.

    The loop builds the next prompt and the training data builds its rows from the same two
    methods (``assistant_message``, ``to_messages``), so what a model is trained on cannot
    drift from what it was shown.
    """

    index: int
    raw_output: str
    thought: str = ""
    audit: AuditEvent | None = None
    observation: str = ""  # the environment's answer (plus PF context); a parse failure's message
    parse_error: str = ""
    prompt_messages: list[dict[str, str]] = field(default_factory=list)
    #: phase reminder texts the harness chose at this step (the ReAct environment shows them after the observation)
    reminders: list[str] = field(default_factory=list)
    llm_s: float = 0.0
    step_s: float = 0.0

    def assistant_message(self, action: Action | None = None) -> dict[str, str]:
        """The policy's turn as the conversation keeps it.

        A parsed step is re-rendered with the action that actually ran (``a_final``, so a PF's
        correction is what later turns see); ``action`` renders another one instead, e.g. the
        policy's original action for a rejected preference row. An unparseable reply is kept
        as written, cut to ``RAW_REPLY_CHARS``.
        """
        if action is None and self.audit is not None:
            action = self.audit.a_final
        if action is None:
            return {"role": "assistant", "content": self.raw_output.strip()[:RAW_REPLY_CHARS] or "(empty)"}
        return {"role": "assistant", "content": f"Thought: {self.thought}\nAction: {action.render()}"}

    def to_messages(self, templates: Mapping[str, str]) -> list[dict[str, str]]:
        """The two turns this step adds to the prompt: the policy's reply, then what it was shown.

        ``templates`` are the agent's prompt templates (``observation``, ``reminder``); a parse
        failure's observation is already the full message.
        """
        if self.parse_error:
            shown = self.observation
        else:
            text = self.observation + "".join(f"\n{templates['reminder'].format(text=r)}" for r in self.reminders)
            shown = templates["observation"].format(observation=text)
        return [self.assistant_message(), {"role": "user", "content": shown}]


@dataclass
class HarnessRecord:
    """What the harness decided for one episode, before and after the steps (App. B.6)."""

    skills_active: bool = True  # False when a master switch or the difficulty gate turned skills off
    difficulty: int | None = None
    difficulty_source: str = ""  # teacher | heuristic ("" = gate off)
    difficulty_note: str = ""
    selected_pfs: list[str] = field(default_factory=list)
    pf_selection_source: str = ""  # teacher | heuristic | all ("" = no PFs)
    pf_selection_branch: str = ""  # computation | factoid | multi_hop
    pf_selection_note: str = ""
    prompt_skills: list[str] = field(default_factory=list)
    handler_votes: int = 0  # votes over all FINALs of the episode
    handler_overrides: int = 0
    teacher_fallbacks: int = 0  # PF calls re-run without a failed teacher
    postprocess: dict[str, Any] = field(default_factory=dict)  # teacher-only answer post-processing
    selection_s: float = 0.0  # planning the episode: difficulty gate + PF/skill selection + rule restriction


@dataclass
class Trajectory:
    qid: str
    question: str
    answers: list[str]
    variant: str
    steps: list[StepRecord] = field(default_factory=list)
    prediction: str = ""
    em: float = 0.0
    f1: float = 0.0
    terminated: str = ""  # final | max_steps | timeout | error
    prompt_tokens: int = 0
    completion_tokens: int = 0
    wall_s: float = 0.0
    pf_errors: list[str] = field(default_factory=list)
    teacher_calls: int = 0
    teacher_prompt_tokens: int = 0
    teacher_completion_tokens: int = 0
    teacher_errors: int = 0
    harness: HarnessRecord | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Trajectory":
        steps = []
        for s in d.get("steps", []):
            s = dict(s)
            a = s.get("audit")
            if a:
                a = dict(a)
                a["a_orig"] = Action(**a["a_orig"])
                a["a_final"] = Action(**a["a_final"])
                s["audit"] = AuditEvent(**a)
            steps.append(StepRecord(**s))
        h = d.get("harness")
        return cls(**{**d, "steps": steps, "harness": HarnessRecord(**h) if h else None})

    def audits(self) -> list[AuditEvent]:
        return [s.audit for s in self.steps if s.audit is not None]

    def fired_skills(self) -> list[str]:
        return [f["skill_id"] for a in self.audits() for f in a.fired if f.get("applied", True)]
