"""The episode function of each domain, as the evaluation runner needs it.

The runner is domain-free: it asks this module for ``item -> (trajectory, environment stats)``
of one (dataset, variant) cell and for an item's identity (qid, question, answers), and does the
rest — concurrency, error containment, judge, files, summary — the same way for every domain.
Search episodes go through the multi-step harness with a fresh environment per episode (plain
BM25 tools, or the teacher-snippet wrapper); math and code go through the single-step runner
with the domain's prompt, extraction, PF context and grader.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from hasp.agent.loop import AgentConfig, Policy, agent_config
from hasp.agent.variants import Variant
from hasp.config import Params
from hasp.eval.datasets import EvalDataset
from hasp.records import Trajectory

#: item -> (trajectory, environment stats or None)
EpisodeFn = Callable[[Any], "tuple[Trajectory, Any]"]

#: completion budget of a single-step reply (params.agent.max_tokens is sized for short ReAct steps)
SINGLE_STEP_MAX_TOKENS: dict[str, int] = {"math": 256, "code": 384}


def item_identity(item: Any) -> tuple[str, str, list[str]]:
    """(qid, question, reference answers) of a search, math or code item, for error records and the judge."""
    qid = getattr(item, "id", None) or getattr(item, "task_id", "")
    question = getattr(item, "question", None) or getattr(item, "problem", None) or getattr(item, "prompt", "")
    return str(qid), str(question), list(getattr(item, "answers", []) or [])


def episode_config(params: Params, domain: str) -> AgentConfig:
    """Search uses the params' agent budgets; a single-step domain asks once, with its own reply budget
    and the harness's wall budget per episode (which also ends a model call that hangs)."""
    if domain == "search":
        return agent_config(params)
    a = params.agent
    return AgentConfig(max_steps=1, temperature=a.temperature, max_tokens=SINGLE_STEP_MAX_TOKENS[domain],
                       max_modify_fires=a.max_modify_fires, timeout_s=params.harness.timeout_seconds,
                       constrained=params.llm.constrained)


def episodes(params: Params, ds: EvalDataset, variant: Variant, *, policy: Policy, library: Any,
             teacher: Any, snippets: bool, label: str) -> EpisodeFn:
    """The episode function of ``ds.domain`` for one cell; trajectories carry ``label``."""
    if ds.domain == "search":
        return _search(params, ds, variant, policy=policy, library=library, teacher=teacher, snippets=snippets,
                       label=label)
    if ds.domain in SINGLE_STEP_MAX_TOKENS:
        return _single_step(params, ds, variant, policy=policy, library=library, teacher=teacher, label=label)
    raise ValueError(f"unknown domain {ds.domain!r}")


def _search(params: Params, ds: EvalDataset, variant: Variant, *, policy: Policy, library: Any, teacher: Any,
            snippets: bool, label: str) -> EpisodeFn:
    from hasp.agent.loop import episode_runner
    from hasp.domains.search.task import score
    from hasp.domains.search.teacher_snippets import TeacherSnippetEnvironment
    from hasp.domains.search.tools import SearchEnvironment

    a, e = params.agent, params.eval
    cfg = replace(agent_config(params), use_pfs=variant.use_pfs, skills_in_prompt=variant.skills_in_prompt)

    def make_env() -> Any:
        env: Any = SearchEnvironment(ds.retriever, top_k=a.top_k, snippet_chars=a.snippet_chars,
                                     read_chars=a.read_chars)
        if snippets:
            env = TeacherSnippetEnvironment(env, teacher, max_tokens=e.snippet_max_tokens,
                                            doc_chars=e.snippet_doc_chars)
        return env

    # the same harness as rollouts: selection layers, handlers, phase reminders, teacher for use_teacher variants
    episode = episode_runner(policy=policy, library=library, cfg=cfg, variant=variant, params=params.harness,
                             make_env=make_env, teacher=teacher, scorer=score, label=label)

    def run(item: Any) -> tuple[Trajectory, Any]:
        env = make_env()
        return episode(item, env), getattr(env, "stats", None)

    return run


def _single_step(params: Params, ds: EvalDataset, variant: Variant, *, policy: Policy, library: Any,
                 teacher: Any, label: str) -> EpisodeFn:
    cfg = episode_config(params, ds.domain)
    if ds.domain == "math":
        from hasp.domains.math.runner import episode_fn

        fn = episode_fn(policy, library, cfg, variant, teacher=teacher, label=label)
    else:  # programs are graded in the sandbox: its params decide whether a weaker mode may run
        from hasp.domains.code.runner import episode_fn as code_episode_fn

        fn = code_episode_fn(policy, library, cfg, variant, teacher=teacher, label=label, sandbox=params.sandbox)

    def run(item: Any) -> tuple[Trajectory, Any]:
        return fn(item), None

    return run
