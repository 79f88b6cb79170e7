"""A task's own tools as the agent's environment: ReAct turns over ``NAME[argument]`` actions plus FINAL.

A user task (``hasp.episode.task.Task``) declares its tools as plain functions from one string
argument to an observation. This environment builds the prompt's action list, the parser's action
set and the reply grammar from them, so a new task needs no edit of the agent's code: the loop, the
harness and PFs (which see and may rewrite the task's actions) are the search agent's. A tool that
raises is the tool's failure, shown to the agent as an observation and recorded in the step's
feedback (``tool_error``), never a crash of the episode; its output is capped at ``MAX_OBSERVATION_CHARS``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hasp.agent.context import EpisodeState
from hasp.agent.parser import ACTION_NAME, ParseFailure, ParsedAction, action_grammar, parse_action
from hasp.agent.react import environment_text
from hasp.prompts import load_prompts
from hasp.records import Action, AuditEvent, StepRecord, Trajectory

#: longest tool output shown to the agent (characters)
MAX_OBSERVATION_CHARS = 2000
#: action names a tool may not take: FINAL ends the episode, the others are the search agent's
RESERVED = ("FINAL", "ANSWER", "FINISH")


@dataclass(frozen=True)
class Tool:
    """One action of a task: ``NAME[argument]`` runs ``run(argument)`` and shows what it returns.

    ``name`` is upper-case (``CONVERT``); ``argument`` is the metavariable the prompt shows
    (``CONVERT[3 miles to km]`` is written ``CONVERT[quantity]``); ``description`` is one line."""

    name: str
    run: Callable[[str], Any]
    description: str = ""
    argument: str = "input"

    def problems(self) -> list[str]:
        """What is wrong with this declaration (empty: nothing)."""
        out = []
        if not isinstance(self.name, str) or not ACTION_NAME.fullmatch(self.name):
            out.append(f"name {self.name!r} is not an upper-case word ({ACTION_NAME.pattern})")
        elif self.name in RESERVED:
            out.append(f"name {self.name!r} is reserved for the answer")
        if not callable(self.run):
            out.append(f"run of {self.name!r} is not callable")
        if not isinstance(self.description, str) or not isinstance(self.argument, str):
            out.append(f"description and argument of {self.name!r} must be strings")
        return out


def check_tools(tools: Sequence[Tool], where: str) -> None:
    """One ``ValueError`` naming ``where`` (the task) and the attribute, for a bad tool or two tools of one name."""
    if not tools:
        raise ValueError(f"{where}.tools: a task needs at least one Tool")
    seen: set[str] = set()
    for i, t in enumerate(tools):
        if not isinstance(t, Tool):
            raise ValueError(f"{where}.tools[{i}]: expected a hasp Tool, got {type(t).__name__}")
        bad = t.problems()
        if bad:
            raise ValueError(f"{where}.tools[{i}]: {'; '.join(bad)}")
        if t.name in seen:
            raise ValueError(f"{where}.tools[{i}]: action name {t.name!r} collides with another tool's")
        seen.add(t.name)


class ToolEnvironment:
    """The task's tools and FINAL, graded by ``scorer(prediction, answers)``; see the module doc."""

    stop = ["Observation:"]
    retries_unparsed = True
    stats = None

    def __init__(self, tools: Sequence[Tool], *, instructions: str = "", demo: Sequence[Mapping[str, str]] = (),
                 scorer: Callable[[Trajectory], tuple[float, float] | None] | None = None) -> None:
        self.tools = {t.name: t for t in tools}
        self.actions = (*self.tools, "FINAL")
        self.instructions, self.demo, self.scorer = instructions, [dict(m) for m in demo], scorer
        self.p = load_prompts("hasp.agent", "tool_react")
        self.observations: list[dict[str, str]] = []

    @property
    def budget_prompt(self) -> str:
        return self.p["budget_final"]

    def opening(self, question: str, system_text: str) -> list[dict[str, str]]:
        p = self.p
        lines = [p["tool_line"].format(name=t.name, argument=t.argument, description=t.description or t.name.lower())
                 for t in self.tools.values()] + [p["final_line"]]
        system = (self.instructions.strip() or p["system"]) + "\n" + p["actions"].format(tools="\n".join(lines))
        if system_text:
            system += f"\n{p['skills_header']}\n{system_text}"
        return [{"role": "system", "content": system}, *[dict(m) for m in self.demo],
                {"role": "user", "content": p["question"].format(question=environment_text(question, None, self.actions))}]

    def grammar(self, max_tokens: int, final_only: bool = False) -> str:
        return action_grammar(("FINAL",) if final_only else self.actions, max_tokens)

    def parse(self, text: str) -> ParsedAction | ParseFailure:
        return parse_action(text, self.actions)

    def unparsed(self, reason: str) -> str:
        return self.p["parse_error"].format(reason=reason)

    def context(self, state: EpisodeState, thought: str) -> dict[str, Any]:
        """The search agent's step context plus this task's tool calls so far (``tool_calls``:
        ``{name, arg, observation}``) and the last observation."""
        ctx = state.to_ctx(thought)
        ctx["tool_calls"] = [dict(o) for o in self.observations]
        ctx["last_observation"] = self.observations[-1]["observation"] if self.observations else ""
        return ctx

    def snapshot(self, state: EpisodeState, ctx: dict[str, Any]) -> dict[str, Any]:
        return state.snapshot()

    def execute(self, a: Action, state: EpisodeState, audit: AuditEvent, last_step: bool) -> tuple[str, bool]:
        if a.type == "FINAL":
            audit.feedback = {"final": True}
            return "", True
        tool = self.tools.get(a.type)
        if tool is None:  # the parser and the dispatcher only emit the task's actions
            raise ValueError(f"unknown action type {a.type!r} (this task's: {', '.join(self.actions)})")
        try:
            out = str(tool.run(a.arg))[:MAX_OBSERVATION_CHARS]
            audit.feedback = {"tool": tool.name}
        except Exception as e:  # noqa: BLE001 - a tool's failure is an observation, see the module doc
            out = self.p["tool_error"].format(name=tool.name, error=f"{type(e).__name__}: {e}"[:300])
            audit.feedback = {"tool": tool.name, "tool_error": f"{type(e).__name__}: {e}"[:300]}
        out = environment_text(out, audit, self.actions)
        self.observations.append({"name": tool.name, "arg": a.arg, "observation": out})
        return out, False

    def turns(self, step: StepRecord) -> list[dict[str, str]]:
        return step.to_messages(self.p)

    def score(self, traj: Trajectory) -> tuple[float, float] | None:
        return None if self.scorer is None else self.scorer(traj)
