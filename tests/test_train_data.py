"""Objective A data build (paper App. D.6): SFT / DPO rows from scored trajectories."""

from __future__ import annotations

import json

from hasp.records import Action, AuditEvent, StepRecord, Trajectory
from hasp.signals import score_step
from hasp.atomic import read_jsonl, write_jsonl
from hasp.train.data import build_dpo_rows, build_sft_rows, score_all, summarize

SYSTEM = {"role": "system", "content": "You answer questions."}
MODIFY = {"skill_id": "premature_final", "type": "MODIFY_ACTION", "reason": "no read", "applied": True}
INJECT = {"skill_id": "decompose", "type": "INJECT_CONTEXT", "reason": "", "applied": True}
SUPPRESSED = {"skill_id": "other", "type": "MODIFY_ACTION", "reason": "", "applied": False}


def _step(i: int, orig: Action, final: Action, fired: list[dict], history: list[dict], *, context=(),
          has_read=False) -> StepRecord:
    audit = AuditEvent(state={"step_count": i, "has_read": has_read, "empty_results": False},
                       a_orig=orig, a_final=final, context=list(context), fired=fired)
    return StepRecord(index=i, raw_output="", thought=f"thinking {i}", audit=audit,
                      prompt_messages=[SYSTEM, {"role": "user", "content": "Question: Q?"}, *history])


def make_traj(qid: str, em: float) -> Trajectory:
    """0: FINAL→READ rescue; 1: plain SEARCH with an injected hint; 2: parse failure; 3: FINAL, no PF."""
    h1 = [{"role": "assistant", "content": "Thought: thinking 0\nAction: READ[d1]"},
          {"role": "user", "content": "Observation: d1 text"}]
    steps = [
        _step(0, Action("FINAL", "guess"), Action("READ", "d1"), [MODIFY], []),
        _step(1, Action("SEARCH", "q"), Action("SEARCH", "q"), [INJECT, SUPPRESSED], h1, context=["hint"],
              has_read=True),
        StepRecord(index=2, raw_output="??", parse_error="no action"),
        _step(3, Action("FINAL", "a"), Action("FINAL", "a"), [], h1, has_read=True),
    ]
    return Trajectory(qid=qid, question="Q?", answers=["a"], variant="pf", steps=steps, em=em)


def test_sft_rows_pf_steps_and_target() -> None:
    rows = build_sft_rows(score_all([make_traj("ok", 1.0)]), reward_floor=0.0)
    assert [r["step"] for r in rows] == [0, 1]  # PF-applied steps only; parse failure and plain step skipped
    r0 = rows[0]
    assert r0["messages"][:-1] == make_traj("ok", 1.0).steps[0].prompt_messages
    assert r0["messages"][-1] == {"role": "assistant", "content": "Thought: thinking 0\nAction: READ[d1]"}
    assert r0["was_modified"] and r0["skill_ids"] == ["premature_final"] and r0["qid"] == "ok"
    assert set(r0["coarse"]) == {"timing", "modality", "correctness", "outcome"} and len(r0["fine"]) == 15
    assert r0["sample_weight"] == round(score_step(make_traj("ok", 1.0), 0).A, 6)
    assert rows[1]["skill_ids"] == ["decompose"]  # the suppressed MODIFY is not credited
    assert not rows[1]["was_modified"]


def test_floor_drops_low_rows() -> None:
    trajs = [make_traj("ok", 1.0), make_traj("bad", 0.0)]
    all_rows = build_sft_rows(score_all(trajs), reward_floor=-1.0)
    kept = build_sft_rows(score_all(trajs), reward_floor=0.25)
    assert len(kept) < len(all_rows)
    assert all(r["sample_weight"] >= 0.25 for r in kept)
    assert any(r["sample_weight"] < 0.25 for r in all_rows)
    high = max(r["sample_weight"] for r in all_rows)
    assert build_sft_rows(score_all(trajs), reward_floor=high + 1e-6) == []


def test_dpo_only_modified_steps() -> None:
    rows = build_dpo_rows(score_all([make_traj("ok", 1.0), make_traj("bad", 0.0)]), reward_floor=0.0)
    assert rows and all(r["was_modified"] for r in rows)
    assert [(r["qid"], r["step"]) for r in rows] == [("ok", 0), ("bad", 0)]
    r = rows[0]
    assert r["chosen"] == [{"role": "assistant", "content": "Thought: thinking 0\nAction: READ[d1]"}]
    assert r["rejected"] == [{"role": "assistant", "content": "Thought: thinking 0\nAction: FINAL[guess]"}]
    assert r["prompt"][-1]["role"] == "user"


def test_accepts_dicts_write_jsonl_and_summarize(tmp_path) -> None:
    rows = build_sft_rows(score_all([make_traj("ok", 1.0).to_dict()]), reward_floor=0.0)  # jsonl-loaded trajectories
    path = write_jsonl(rows, tmp_path / "sub" / "sft.jsonl")
    assert read_jsonl(path) == json.loads(json.dumps(rows))
    assert [p.name for p in path.parent.iterdir()] == ["sft.jsonl"]  # no temp file left behind
    s = summarize(rows)
    assert s["n_rows"] == 2 and s["n_modified"] == 1 and s["n_qids"] == 1
    assert s["per_skill"] == {"decompose": 1, "premature_final": 1}
    assert s["per_target_type"] == {"READ": 1, "SEARCH": 1} and rows[0]["target_type"] == "READ"
    assert abs(s["mean_weight"] - sum(r["sample_weight"] for r in rows) / 2) < 1e-9
    assert summarize([])["n_rows"] == 0


def test_training_rows_are_the_prompts_the_loop_sent() -> None:
    """The row's prompt is exactly what the policy received at that step, and its target is exactly
    the assistant turn the loop put into the next prompt: both come from the step record."""
    from doubles import OneDocEnvDouble, RewritingPFDouble, ScriptedPolicyDouble

    from hasp.agent.loop import AgentConfig, run_episode

    pol = ScriptedPolicyDouble(["Thought: look\nAction: SEARCH[Quellbrook founder]", "no action here",
                                "Thought: read\nAction: READ[d1]", "Thought: done\nAction: FINAL[Mara Eskel]"])
    traj = run_episode(qid="q1", question="Who founded Quellbrook?", answers=["Mara Eskel"], policy=pol,
                       env=OneDocEnvDouble(), pfs=[RewritingPFDouble()], cfg=AgentConfig(max_steps=6),
                       variant="pf", scorer=lambda pred, answers: (1.0, 1.0))
    assert traj.terminated == "final" and traj.steps[1].parse_error
    from hasp.config import RSParams
    from hasp.train.rs import kept_rows, select

    scored = score_all([traj])
    sft = build_sft_rows(scored, reward_floor=float("-inf"))  # the PF's rewrite only
    dpo = build_dpo_rows(scored, reward_floor=float("-inf"))
    rs = kept_rows(scored, select(scored, RSParams(), max_steps=6), RSParams())  # every parsed step of the success
    assert [r["step"] for r in sft] == [0] and [r["step"] for r in dpo] == [0]
    assert [r["step"] for r in rs] == [0, 2, 3]
    for row in sft + rs:
        *prompt, target = row["messages"]
        assert prompt == pol.seen[row["step"]]
        if row["step"] + 1 < len(pol.seen):
            assert pol.seen[row["step"] + 1][len(prompt)] == target
    (row,) = dpo
    assert row["prompt"] == pol.seen[0] and row["chosen"] == [pol.seen[1][len(row["prompt"])]]
    assert row["rejected"] == [{"role": "assistant", "content": "Thought: look\nAction: SEARCH[Quellbrook founder]"}]
    assert pol.seen[1][len(row["prompt"])]["content"] == "Thought: look\nAction: SEARCH[Quellbrook]"


def test_phase_g_and_h_and_an_rs_round_score_each_trajectory_once(tmp_path, monkeypatch) -> None:
    """The summary, the SFT rows and the DPO rows of Phase G/H read one score per trajectory, and an RS
    round's filter and rows read one score per sampled trajectory."""
    import hasp.train.data as data
    from hasp.config import Params
    from hasp.evolve.epoch import build_data
    from hasp.train.rs import round_rows

    scored: list[str] = []
    real = data.score_trajectory

    def counting(traj, *a, **kw):  # the real scorer, counted
        scored.append(traj.qid)
        return real(traj, *a, **kw)

    monkeypatch.setattr(data, "score_trajectory", counting)
    trajs = [make_traj("ok", 1.0), make_traj("bad", 0.0)]
    write_jsonl([t.to_dict() for t in trajs], tmp_path / "rollout.jsonl")
    s = build_data(tmp_path / "rollout.jsonl", Params(), tmp_path)
    assert sorted(scored) == ["bad", "ok"]
    assert s["signals"]["scored_steps"] == 8 and s["sft"]["n_rows"] == len(read_jsonl(tmp_path / "sft.jsonl")) > 0
    scored.clear()
    round_rows(trajs, 0, Params().train.model_copy(update={"rs": Params().train.rs.model_copy(
        update={"min_score": 0.0})}))
    assert sorted(scored) == ["bad", "ok"]


def test_an_sft_set_without_a_final_target_is_named_in_the_log(tmp_path, caplog) -> None:
    """PF rewrites that only defer the answer (FINAL -> READ, hints on a SEARCH) give SFT targets that
    never end an episode; a policy trained on them can stop answering, so the data build says so by name."""
    from hasp.config import Params
    from hasp.evolve.epoch import build_data

    write_jsonl([make_traj("bad", 0.0).to_dict()], tmp_path / "rollout.jsonl")
    with caplog.at_level("WARNING", logger="hasp.evolve.epoch"):
        s = build_data(tmp_path / "rollout.jsonl", Params(), tmp_path)
    assert s["sft"]["per_target_type"] == {"READ": 1}  # the hint step is under the reward floor
    assert [r.getMessage() for r in caplog.records] == [
        f"{tmp_path / 'sft.jsonl'}: none of the 1 SFT rows has a FINAL target (READ 1): a policy "
        "trained on them may learn to defer its answer"]

    ok = make_traj("ok", 1.0)  # a PF that rewrites a final answer: the set has a FINAL target
    ok.steps[3].audit.fired.append(dict(MODIFY, skill_id="answer_format"))
    ok.steps[3].audit.a_orig = Action("FINAL", "A.")
    write_jsonl([ok.to_dict()], tmp_path / "rollout.jsonl")
    caplog.clear()
    with caplog.at_level("WARNING", logger="hasp.evolve.epoch"):
        s = build_data(tmp_path / "rollout.jsonl", Params(), tmp_path)
    assert s["sft"]["per_target_type"].get("FINAL") == 1 and not caplog.records
