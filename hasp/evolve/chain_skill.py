"""One skill from one episode, admitted into a chain's own library: the step the chain runner
(``hasp.train.chains.run_chain``) takes between two tasks of a chain, for ``hasp evolve sage`` and the
SAGE training recipe alike (``chain_grower`` builds it for them).

Why a step of its own: inside a chain there is no cluster of many episodes and no val gate (the next
task is the test of the skill), but the skill must still be a valid declaration that passes Phase D
and whose trigger fires on the episode it came from. The student's prompt and reply are kept with the
result, because SAGE trains them with the advantage of the task they came from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hasp.records import Trajectory
from hasp.train.chains import ChainGrowth, Grow, Grower


def propose_into_chain(traj: Trajectory, lib_dir: Path, *, params: Any, student: Any, domain: str,
                       gold: bool, reply_format: Any, max_tokens: int | None = None,
                       seed: int | None = None) -> ChainGrowth:
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
        return ChainGrowth(refusals=["no failure pattern detected"])
    lib = load_library(lib_dir, domain, sandbox=params.sandbox)
    ids, existing = lib.ids, existing_from_library(lib)
    lib.close()
    cluster = cluster_patterns(patterns, existing, min_cluster_size=1, dup_threshold=0.0)[0]
    (cand,) = propose_declarative([cluster], student, existing_skill_ids=ids,
                                  replayed={traj.qid: list(replay(traj, a.max_steps))}, max_candidates=1,
                                  temperature=e.proposal_temperature, max_tokens=max_tokens or e.declarative_max_tokens,
                                  seed=seed, reply_format=reply_format,
                                  gold={traj.qid: list(traj.answers)} if gold else None)
    out = ChainGrowth(prompt_messages=[dict(m) for m in cand.prompt_messages], reply=cand.raw_reply)
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


def chain_grower(params: Any, *, gold: bool) -> Grower:
    """The growing step of a chain runner, built once a student is at hand: ``(student, domain, reply
    budget) -> grow``, ``grow(episode, library folder, seed)`` proposing into the folder
    (``propose_into_chain``; ``gold``: the student sees the gold answer, training split only). The reply
    format is chosen once per student."""

    def for_student(student: Any, domain: str, max_tokens: int | None) -> Grow:
        reply_format = chain_reply_format(params, student)

        def grow(traj: Trajectory, lib_dir: Path, seed: int | None) -> ChainGrowth:
            return propose_into_chain(traj, lib_dir, params=params, student=student, domain=domain, gold=gold,
                                      reply_format=reply_format, max_tokens=max_tokens, seed=seed)

        return grow

    return for_student
