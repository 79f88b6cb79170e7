"""SAGE's sequential rollout: chains by question template, a skill admitted after a failed task is
live for the next task of the chain only, and the skill-integrated reward counts generation and use.

The tasks are run by a double (an episode whose outcome depends on whether the chain's library holds
a repair); proposal, Phase D and admission are the real ones, with a scripted student double.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from doubles import ScriptedPolicyDouble

from hasp.evolve.sequential import sequential_rollout
from hasp.train.chains import SAGE_KEY, ChainGrowth, build_chains, template_key
from hasp.train.rewards import skill_integrated_rewards
from hasp.pf.library import load_library
from hasp.records import Action, AuditEvent, HarnessRecord, StepRecord, Trajectory

SEED = Path(__file__).resolve().parents[1] / "hasp" / "skills" / "search"


def test_template_key_groups_questions_of_one_relation():
    assert template_key("In what year was Roholt founded?") == template_key("In what year was Velm Abbey founded?")
    assert template_key("In what year was Roholt founded?") != template_key("Who founded Roholt?")


def test_chains_share_a_template_and_drop_single_leftovers():
    items = [SimpleNamespace(id=f"q{i}", question=q) for i, q in enumerate(
        ["Who founded Aa?", "Who founded Bb?", "Who founded Cc?", "In what year was Dd founded?",
         "In what year was Ee founded?", "Where is Ff?"])]
    chains = build_chains(items, 2, seed=1)
    assert sorted(len(c) for c in chains) == [2, 2]  # "Where is Ff?" and one founder question are left alone
    assert all(len({template_key(it.question) for it in c}) == 1 for c in chains)


def test_skill_integrated_reward_counts_generation_and_use():
    # task 0 fails and creates a skill; task 1 succeeds using it; task 2 succeeds without it
    # (the sequential rollout's rule: a skill made from a failed task is paid when it carries a success)
    assert skill_integrated_rewards([0, 1, 1], [set(), {0}, set()], bonus="repair") == [1.0, 2.0, 1.0]
    assert skill_integrated_rewards([0, 0], [set(), {0}], bonus="repair") == [0.0, 0.0]  # use without success
    assert skill_integrated_rewards([0, 1, 1], [set(), {0}, set()], bonus="seed") == [0.0, 2.0, 1.0]


GOOD = ("SKILL_ID: read_shown_result\nDESCRIPTION: A READ of an id no search showed reads a shown result.\n"
        "WATCHES: READ\nWHEN: last_action_failed, arg_not_in_results\nREWRITE: READ top_result\nMAX_FIRES: 2\n")
RESULTS = "1. [doc0003] Roholt: Roholt is a city located in Seirngeesh, founded in 1836."


def _traj(item, em, fired=()):
    search = Action("SEARCH", "Roholt")
    bad = Action("READ", "doc9999")
    steps = [StepRecord(index=0, raw_output="", observation=RESULTS,
                        audit=AuditEvent(state={}, a_orig=search, a_final=search,
                                         feedback={"n_hits": 1, "hit_ids": ["doc0003"]})),
             StepRecord(index=1, raw_output="", observation="No document matches 'doc9999'.",
                        audit=AuditEvent(state={}, a_orig=bad, a_final=bad, feedback={"found": False})),
             StepRecord(index=2, raw_output="", observation="No document matches 'doc9999'.",
                        audit=AuditEvent(state={}, a_orig=bad, a_final=bad, feedback={"found": False},
                                         fired=[{"skill_id": s, "applied": True} for s in fired]))]
    return Trajectory(qid=item.id, question=item.question, answers=["1836"], variant="pf", steps=steps,
                      em=em, completion_tokens=40 if em else 90, harness=HarnessRecord())


def test_a_repair_admitted_after_a_failed_task_serves_the_next_task_of_its_chain(tmp_path):
    chain = [SimpleNamespace(id=f"q{i}", question=f"In what year was Roholt{i} founded?") for i in range(3)]
    other = [SimpleNamespace(id="r0", question="Who founded Aa?"), SimpleNamespace(id="r1", question="Who founded Bb?")]
    libraries_seen = []

    def run_task(item, lib_dir):  # double: an episode succeeds when its chain's library has the repair
        lib = load_library(lib_dir, "search")
        has = "read_shown_result" in lib.ids
        libraries_seen.append((item.id, has))
        lib.close()
        return _traj(item, 1.0 if has else 0.0, fired=("read_shown_result",) if has else ())

    from hasp.agent.replay import replay
    from hasp.evolve.admit import admit
    from hasp.evolve.cluster import cluster_patterns
    from hasp.evolve.declarative import propose_declarative, validate_declared
    from hasp.evolve.detectors import FailurePattern
    from hasp.evolve.review import heuristic_review

    student = ScriptedPolicyDouble([GOOD], default="nonsense")

    def grow(traj, lib_dir, seed):
        p = FailurePattern("repeated_invalid_read", "Reads an id no search showed.", "READ after failed READ.",
                           "Read a shown result.", qid=traj.qid)
        cluster = cluster_patterns([p], [], min_cluster_size=1, dup_threshold=0.0)[0]
        (cand,) = propose_declarative([cluster], student, existing_skill_ids=[], replayed={traj.qid: list(replay(traj))})
        if not cand.declared:
            return ChainGrowth(refusals=[cand.parse_error])
        rep = validate_declared(cand)
        res = admit(lib_dir, cand, heuristic_review(cand, rep.q_exec, cluster), epoch=0, cluster=cluster, refusals=[])
        return ChainGrowth(admitted=[cand.skill_id]) if res.admitted else ChainGrowth(refusals=[res.reason])

    result, trajs = sequential_rollout([chain, other], base_library=SEED, work_dir=tmp_path, run_task=run_task,
                                       grow=grow, bonus="repair", plain={it.id: _traj(it, 0.0) for it in chain + other})
    assert libraries_seen == [("q0", False), ("q1", True), ("q2", True), ("r0", False), ("r1", False)]
    s = result.summary()
    assert s["skills_created"] == 1 and s["skills_reused_later"] == 1 and s["tasks_using_earlier_skills"] == 2
    assert [t.reward for t in result.tasks[:3]] == [1.0, 2.0, 2.0]
    assert s["em_sequential"]["k"] == 2 and s["em_plain"]["k"] == 0 and s["em_difference"]["n"] == 5
    rec = trajs[1].harness.postprocess[SAGE_KEY]  # the record the SAGE recipe and RS both read
    assert (rec["reward"], rec["position"], rec["used_positions"], rec["outcome"]) == (2.0, 1, [0], 1.0)
    assert rec["used_skills"] == ["read_shown_result"] and rec["used_earlier_skill"] and rec["proposal"] is None
    assert [(t.steps, t.completion_tokens, t.plain_steps, t.plain_completion_tokens) for t in result.tasks] == [
        (3, 90, 3, 90), (3, 40, 3, 90), (3, 40, 3, 90), (3, 90, 3, 90), (3, 90, 3, 90)]
    seq, plain, diff = s["sequential"], s["plain"], s["sequential_minus_plain"]
    assert (seq["tgc"]["k"], seq["tgc"]["n"], seq["sgc"]["k"], seq["sgc"]["n"]) == (2, 5, 0, 2)  # q0 failed
    assert (seq["skill_use"]["k"], seq["skill_use"]["n"]) == (2, 3)  # q1, q2 of the later tasks q1, q2, r1
    assert seq["success_when_used"]["p"] == 1.0 and seq["success_when_not_used"]["p"] == 0.0
    assert plain["tgc"]["k"] == 0 and plain["skill_use"]["k"] == 0 and plain["mean_completion_tokens"]["mean"] == 90
    assert (diff["tgc"]["mean"], diff["tgc"]["n"], diff["sgc"]["n"]) == (0.4, 5, 2)
    assert diff["mean_steps"]["mean"] == 0.0 and diff["mean_completion_tokens"]["mean"] == -20.0
    assert any("nonsense" not in r and "declaration refused" in r for r in result.refusals)  # r0's proposal
    assert not (SEED / "generated" / "read-shown-result-v1").exists()  # the seed library is never touched
