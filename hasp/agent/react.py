"""The multi-step environment of the search agent: ReAct turns over SEARCH / READ tools.

The loop (``hasp.agent.loop``) drives an environment; this one opens with the search prompt and its
demonstration, reads a reply as ``Thought: … Action: SEARCH[q] | READ[doc] | FINAL[a]``, runs the tool
under the episode's budgets and steps the state with what the tool returned. What the state took is
recorded in Δ_t (``audit.feedback``: the hits' ids and titles, the document read), so the replay of a
trajectory (``hasp.agent.replay``) steps the state through the same ``EpisodeState`` methods without
reading the rendered text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from hasp.agent.context import EpisodeState
from hasp.agent.parser import ACTIONS, ParseFailure, ParsedAction, action_grammar, parse_action
from hasp.pf.intervention import shown_text
from hasp.prompts import load_prompts as prompt_file
from hasp.records import Action, AuditEvent, StepRecord, Trajectory


class Tools(Protocol):
    """The tool surface of one search episode (``SearchEnvironment``, its teacher-snippet wrapper, a double)."""

    def search(self, query: str) -> tuple[str, list[Any]]: ...
    def read(self, ref: str) -> tuple[str, dict[str, Any] | None]: ...


def load_prompts(name: str = "search_react") -> Mapping[str, Any]:
    """The search agent's prompt entries (``hasp/agent/prompts/<name>.yaml``)."""
    return prompt_file("hasp.agent", name)


def environment_text(text: str, audit: AuditEvent | None = None, actions: tuple[str, ...] = ACTIONS) -> str:
    """The environment's own text (a question, search results, a page, a tool's output) as the
    policy is shown it: through the same filter as every PF text (``shown_text``: control and bidi
    characters dropped, turn-format lines quoted, anything that parses as an action of ``actions``
    defused), since text from the web or a user is an injection vector like any other. When the
    filter changed it, the untouched text is kept in ``audit.feedback["observation_raw"]``."""
    shown = shown_text(text, max(1, len(text)), actions=actions)
    if audit is not None and shown != text:
        audit.feedback["observation_raw"] = text
    return shown


def _hit_dict(h: Any) -> dict[str, str]:
    if isinstance(h, dict):
        return {"id": str(h.get("id", "")), "title": str(h.get("title", ""))}
    return {"id": str(getattr(h, "id", "")), "title": str(getattr(h, "title", ""))}


class ReactEnvironment:
    """SEARCH / READ / FINAL over ``tools`` with the tool budgets of ``max_search_calls`` / ``max_read_calls``;
    ``scorer(prediction, answers) -> (em, f1)`` grades the episode."""

    stop = ["Observation:"]
    #: a reply without an action is shown its error and the episode goes on
    retries_unparsed = True

    def __init__(self, tools: Tools, *, max_search_calls: int, max_read_calls: int, scorer: Any = None) -> None:
        self.tools, self.scorer = tools, scorer
        self.max_search_calls, self.max_read_calls = max_search_calls, max_read_calls
        self.p = load_prompts()

    @property
    def stats(self) -> Any:
        """What the tools counted (teacher-snippet calls), or None."""
        return getattr(self.tools, "stats", None)

    @property
    def budget_prompt(self) -> str:
        """The answer-only turn after the step budget (``AgentConfig.final_on_budget``)."""
        return self.p["budget_final"]

    def opening(self, question: str, system_text: str) -> list[dict[str, str]]:
        p = self.p
        system = p["system"] + (f"\n{p['skills_header']}\n{system_text}" if system_text else "")
        return [{"role": "system", "content": system}, *[dict(m) for m in p.get("demo", [])],
                {"role": "user", "content": p["question"].format(question=environment_text(question))}]

    def grammar(self, max_tokens: int, final_only: bool = False) -> str:
        return action_grammar(("FINAL",) if final_only else ("SEARCH", "READ", "FINAL"), max_tokens)

    def parse(self, text: str) -> ParsedAction | ParseFailure:
        return parse_action(text)

    def unparsed(self, reason: str) -> str:
        return self.p["parse_error"].format(reason=reason)

    def context(self, state: EpisodeState, thought: str) -> dict[str, Any]:
        return state.to_ctx(thought)

    def snapshot(self, state: EpisodeState, ctx: dict[str, Any]) -> dict[str, Any]:
        return state.snapshot()

    def execute(self, a: Action, state: EpisodeState, audit: AuditEvent, last_step: bool) -> tuple[str, bool]:
        """Run the final action; fill Δ_t (``audit.feedback``). Returns (observation, done)."""
        p = self.p
        if a.type == "FINAL":
            audit.feedback = {"final": True}
            return "", True
        if a.type == "SEARCH":
            if state.search_count >= self.max_search_calls:
                audit.feedback = {"budget_exhausted": "search"}
                return p["budget_exhausted"].format(kind="search"), False
            obs, found = self.tools.search(a.arg)
            hits = [_hit_dict(h) for h in found]
            state.record_search(a.arg, obs, hits)
            audit.feedback = {"n_hits": len(hits), "hit_ids": [h["id"] for h in hits],
                              "hit_titles": [h["title"] for h in hits]}
            return environment_text(obs, audit), False
        if a.type == "READ":
            if state.read_count >= self.max_read_calls:
                audit.feedback = {"budget_exhausted": "read"}
                return p["budget_exhausted"].format(kind="read"), False
            obs, doc = self.tools.read(a.arg)
            audit.feedback = {"found": doc is not None, "doc_id": (doc or {}).get("id")}
            if doc is not None:
                contents = str(doc.get("contents", ""))
                state.record_read(str(doc.get("id", "")), contents)
                audit.feedback["contents"] = contents
            return environment_text(obs, audit), False
        raise ValueError(f"unknown action type {a.type!r}")  # the parser/dispatcher only emit the three

    def turns(self, step: StepRecord) -> list[dict[str, str]]:
        return step.to_messages(self.p)

    def score(self, traj: Trajectory) -> tuple[float, float] | None:
        return None if self.scorer is None else self.scorer(traj.prediction, traj.answers)
