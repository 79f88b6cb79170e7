"""One skill from one episode, admitted into a chain's own library: the step sequential rollout takes
between two tasks of a chain (``hasp evolve sage`` and the SAGE training recipe).

Why a step of its own: inside a chain there is no cluster of many episodes and no val gate (the next
task is the test of the skill), but the skill must still be a valid declaration that passes Phase D
and whose trigger fires on the episode it came from. The student's prompt and reply are kept with the
result, because SAGE trains them with the advantage of the task they came from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hasp.records import Trajectory


@dataclass
class ChainSkill:
    """What proposing from one episode gave: admitted skill ids, refusal reasons, and the student's
    proposal turn (empty when nothing was asked: no failure pattern in the episode)."""

    admitted: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    prompt_messages: list[dict[str, str]] = field(default_factory=list)
    reply: str = ""


def propose_into_chain(traj: Trajectory, lib_dir: Path, *, params: Any, student: Any, domain: str,
                       gold: bool, reply_format: Any, max_tokens: int | None = None,
                       seed: int | None = None) -> ChainSkill:
    """Ask ``student`` for a declared repair of ``traj``'s failure patterns and admit it into
    ``lib_dir`` when Phase D passes and its trigger fires on ``traj``. ``gold``: the student may see the
    gold answer (training split only); ``max_tokens`` defaults to ``evolve.declarative_max_tokens``;
    ``seed`` is the proposal's sampling seed (None: the server's own draw)."""
    from hasp.agent.replay import replay
    from hasp.evolve.admit import admit
    from hasp.evolve.cluster import cluster_patterns, existing_from_library
    from hasp.evolve.declarative import compiled_pf, propose_declarative, validate_declared
    from hasp.evolve.detectors import detect_failures
    from hasp.evolve.review import heuristic_review, trigger_hit_rate
    from hasp.pf.library import load_library

    a, e = params.agent, params.evolve
    patterns = detect_failures([traj])
    if not patterns:
        return ChainSkill(refusals=["no failure pattern detected"])
    lib = load_library(lib_dir, domain, sandbox=params.sandbox)
    ids, existing = lib.ids, existing_from_library(lib)
    lib.close()
    cluster = cluster_patterns(patterns, existing, min_cluster_size=1, dup_threshold=0.0)[0]
    (cand,) = propose_declarative([cluster], student, existing_skill_ids=ids,
                                  replayed={traj.qid: list(replay(traj, a.max_steps))}, max_candidates=1,
                                  temperature=e.proposal_temperature, max_tokens=max_tokens or e.declarative_max_tokens,
                                  seed=seed, reply_format=reply_format,
                                  gold={traj.qid: list(traj.answers)} if gold else None)
    out = ChainSkill(prompt_messages=[dict(m) for m in cand.prompt_messages], reply=cand.raw_reply)
    if not cand.declared:
        out.refusals = [cand.parse_error]
        return out
    rep = validate_declared(cand)
    if not rep.passed:
        out.refusals = [f"{cand.skill_id}: Phase D failed ({'; '.join(rep.errors[:2])})"]
        return out
    hit = trigger_hit_rate(compiled_pf(cand), [traj])
    review = heuristic_review(cand, rep.q_exec, cluster, trigger_hit_rate=hit, evolve=e)
    why = [] if hit > 0 else [f"{cand.skill_id}: its trigger never fires on the episode it repairs"]
    res = admit(lib_dir, cand, review, epoch=0, cluster=cluster, refusals=why, evolve=e,
                accept_reason="sequential rollout: Phase D passed and the trigger fires on its episode")
    if res.admitted:
        out.admitted = [cand.skill_id]
    else:
        out.refusals = [res.reason]
    return out


def chain_reply_format(params: Any, student: Any) -> Any:
    """How a chain's proposal is asked of ``student``: the evolve section's structured-output choice,
    constrained JSON where the student's endpoint takes it."""
    from hasp.evolve.declarative import reply_format_for
    from hasp.llm.structured import constrains_json, dialect_of

    return reply_format_for(params.evolve.structured_output, params.llm.base_url is None,
                            constrains_json(params.llm.constrained, dialect_of(student)))


def run_in_chain(spec: Any, item: Any, lib_dir: Path, *, params: Any, policy: Any, opened: Any) -> Trajectory:
    """One task of a chain with the chain's library folder as it is now (skills admitted by earlier
    tasks included), loaded for this task and closed after it."""
    from hasp.pf.library import load_library

    lib = load_library(lib_dir, spec.domain.name, sandbox=params.sandbox)
    try:
        return spec.runner(policy=policy, library=lib, opened=opened)(item).traj
    finally:
        lib.close()
