"""The judge gate: held-out trace questions, judged answers before and after each candidate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from doubles import AnsweringPolicyDouble, JudgeRunnerDouble, ReplyDouble, ValRunnerDouble
from test_evolve_modes import _admit, _params, _second_good, epoch_files  # noqa: F401 - the fixture
from traj_builders import scripted_traj

from hasp.agent.rollout import read_trajectories
from hasp.config import TracesParams, load_params
from hasp.domains.search.prepare import prepare_data
from hasp.evolve import epoch as ep
from hasp.evolve.gate import active_gates, epoch_phases
from hasp.evolve.heldout import load_heldout, split_heldout, write_heldout
from hasp.evolve.traces import import_traces

ROOT = Path(__file__).resolve().parents[1]
HELD = ["h1", "h2", "h3", "h4", "h5"]


def _traces(n: int) -> list:
    """``n`` questions, each logged under two arms (``q<i>`` and ``q<i>@react``)."""
    out = []
    for i in range(n):
        for qid in (f"q{i}", f"q{i}@react"):
            out.append(scripted_traj(qid, [("SEARCH", "x"), ("FINAL", "y")], question=f"Question number {i}?",
                                     answers=(f"gold {i}",), prediction="y"))
    return out


def test_split_holds_out_whole_questions_stably_and_keeps_their_gold():
    trajs = _traces(40)
    kept, held = split_heldout(trajs, 0.3, 100)
    again_kept, again_held = split_heldout(list(reversed(trajs)), 0.3, 100)
    assert [q.id for q in held] == [q.id for q in again_held]  # the draw is the question's, not the order's
    assert {t.qid for t in kept} == {t.qid for t in again_kept}
    assert 3 <= len(held) <= 25
    held_q = {q.question for q in held}
    assert not {t.question for t in kept} & held_q  # both arms of a held-out question leave Phase A
    assert len(kept) == len(trajs) - 2 * len(held)
    assert all(q.answers == [f"gold {q.id[1:]}"] and "@" not in q.id for q in held)
    capped = split_heldout(trajs, 0.3, 2)[1]
    assert [q.id for q in capped] == [q.id for q in held[:2]]
    assert split_heldout(trajs, 0.0, 100) == (trajs, [])


def test_import_traces_writes_the_held_out_questions_and_leaves_them_out_of_the_rollout(tmp_path):
    from hasp.agent.rollout import write_trajectories

    write_trajectories(_traces(30), tmp_path / "logs" / "run.jsonl")
    s = import_traces(tmp_path / "logs", tmp_path / "out", TracesParams(holdout=0.25, holdout_max=5))
    held = load_heldout(tmp_path / "out" / "heldout.jsonl")
    assert s["heldout"] == {"questions": len(held), "trajectories": 2 * len(held), "share": 0.25, "max": 5}
    assert 1 <= len(held) <= 5 and s["n"] == 60 - 2 * len(held)
    assert len(read_trajectories(tmp_path / "out" / "rollout.jsonl")) == s["n"]
    none = import_traces(tmp_path / "logs", tmp_path / "out0", TracesParams())
    assert "heldout" not in none and load_heldout(tmp_path / "out0" / "heldout.jsonl") == []


def test_a_bad_held_out_row_is_one_line_naming_file_and_line(tmp_path):
    path = tmp_path / "heldout.jsonl"
    write_heldout(split_heldout(_traces(20), 0.5, 3)[1], path)
    path.write_text(path.read_text() + '{"question": "no id?"}\n')
    with pytest.raises(ValueError) as e:
        load_heldout(path)
    assert f"{path}:4:" in str(e.value) and "\n" not in str(e.value)


def test_the_judge_gate_is_on_only_for_a_trace_source_with_a_holdout(tmp_path):
    src = str(tmp_path / "logs")
    on = _params(tmp_path, **{"traces.source": src, "traces.holdout": 0.2, "val_gate": False})
    assert active_gates(on.evolve)[-1] == "judge" and "gate" in epoch_phases(on.evolve)
    lite = _params(tmp_path, **{"traces.source": src, "traces.holdout": 0.2, "mode": "lite"})
    assert "judge" in active_gates(lite.evolve) and "gate" in epoch_phases(lite.evolve)
    for evolve in ({"traces.source": src}, {"traces.holdout": 0.2}):
        assert "judge" not in active_gates(_params(tmp_path, **evolve).evolve)


def _judge_epoch(tmp_path: Path, ed: Path, **evolve) -> object:
    write_heldout(split_heldout([scripted_traj(h, [("FINAL", "y")], question=f"held {h}?") for h in HELD],
                                0.999999, 100)[1], ed / "heldout.jsonl")
    assert [q.id for q in load_heldout(ed / "heldout.jsonl")] != []
    return _params(tmp_path, **{"traces.source": str(tmp_path), "traces.holdout": 0.5, **evolve})


def test_a_candidate_under_which_fewer_answers_are_judged_supported_is_refused(epoch_files):
    tmp_path, lib, ed = epoch_files
    _second_good(ed)
    p = _judge_epoch(tmp_path, ed)
    ids = [q.id for q in load_heldout(ed / "heldout.jsonl")]
    judge = JudgeRunnerDouble(ids, unsupported={ids[0]}, breaks={"flipper": {ids[1], ids[2]}},
                              fixes={"flipper": {ids[0]}, "good_skill": {ids[0]}}, unjudged={ids[4]})
    s = ep.gate(ed, lib, p, {"em": 0.5, "f1": 0.6, "n": 10}, ValRunnerDouble({"good_skill": 0.6, "flipper": 0.7}),
                run_judge=judge)
    # one library-alone run, then one per candidate the val gate passed
    assert judge.calls[0] is None and sorted(judge.calls[1:]) == ["flipper", "good_skill"]
    j = s["judge"]
    assert (j["held_out"], j["runs"], j["supported_before"], j["judged_before"]) == (5, 2, 3, 4)
    assert set(j["refused"]) == {"flipper"}
    res = {r["skill_id"]: r for r in json.loads((ed / "judge_gate.json").read_text())}
    f = res["flipper"]
    assert (f["n"], f["supported_before"], f["supported_after"], f["unjudged"]) == (4, 3, 2, 1)
    assert f["delta"]["mean"] == pytest.approx(-0.25) and f["delta"]["n"] == 4
    assert sorted(f["broken"]) == sorted(ids[1:3]) and f["fixed"] == [ids[0]]
    assert res["good_skill"]["supported_after"] == 4 and not res["good_skill"]["broken"]
    admitted, adm = _admit(tmp_path, lib, ed, **{"traces.source": str(tmp_path), "traces.holdout": 0.5})
    assert admitted == {"good_skill"} and "judge" in adm["gates"]
    hist = {h["skill_id"]: h for h in json.loads((ed / "library" / "library_history.json").read_text())}
    (why,) = [r for r in hist["flipper"]["reasons"] if r.startswith("judge:")]
    assert "3 -> 2 of n=4" in why and "-0.250" in why


def test_the_judge_gate_runs_with_the_val_gate_off_and_refuses_when_nothing_could_be_judged(epoch_files):
    tmp_path, lib, ed = epoch_files
    p = _judge_epoch(tmp_path, ed, val_gate=False)
    ids = [q.id for q in load_heldout(ed / "heldout.jsonl")]
    val = ValRunnerDouble({})
    s = ep.gate(ed, lib, p, {}, val, run_judge=JudgeRunnerDouble(ids, unjudged=set(ids)))
    assert val.calls == [] and s["val_runs"] == 0
    (why,) = s["judge"]["refused"]["good_skill"]
    assert "no held-out answer could be judged" in why and "5 of 5" in why


def test_a_judge_run_that_raises_refuses_only_that_candidate_and_the_gate_goes_on(epoch_files):
    tmp_path, lib, ed = epoch_files
    _second_good(ed)
    p = _judge_epoch(tmp_path, ed, val_gate=False)
    ids = [q.id for q in load_heldout(ed / "heldout.jsonl")]
    inner = JudgeRunnerDouble(ids)

    def flaky(library, label):
        if label == "judge+flipper":
            raise ConnectionError("judge endpoint down (double)")
        return inner(library, label)

    s = ep.gate(ed, lib, p, {}, ValRunnerDouble({}), run_judge=flaky)
    assert set(s["judge"]["refused"]) == {"flipper"} and "judge endpoint down" in s["judge"]["refused"]["flipper"][0]
    assert s["judge"]["checks"]["good_skill"]["delta"]["mean"] == 0.0


class _SupportJudgeDouble:
    """A judge endpoint double: SUPPORTED when the answer shown is ``good``, else UNSUPPORTED; one
    question's verdict is unparseable."""

    def __init__(self, good: str, garble: str):
        self.good, self.garble, self.seen = good, garble, []

    def chat(self, messages, **kw):
        user = messages[-1]["content"]
        self.seen.append(user)
        if self.garble in user:
            return ReplyDouble("perhaps", 5, 1)
        return ReplyDouble("SUPPORTED" if f"Final answer: {self.good}" in user else "UNSUPPORTED", 5, 1)


def test_judge_runner_answers_the_held_out_questions_with_the_real_agent_and_judges_them(tmp_path):
    """The judge run is the PF agent's real rollout over the held-out rows, then the judge on each answer."""
    from hasp.domains.search.task import SearchTask

    p = load_params(ROOT / "params.yaml", {"data.n_questions": 10, "llm.max_concurrency": 1})
    prepare_data(p, tmp_path / "data")
    test = SearchTask.load(tmp_path / "data").questions("test")[:3]
    trajs = [scripted_traj(f"log-{q.id}", [("FINAL", "y")], question=q.question, answers=()) for q in test]
    ed = tmp_path / "epoch_0"
    write_heldout(split_heldout(trajs, 0.999999, 100)[1], ed / "heldout.jsonl")
    p = load_params(ROOT / "params.yaml", {"data.n_questions": 10, "llm.max_concurrency": 1,
                                           "evolve.traces.source": str(tmp_path), "evolve.traces.holdout": 0.5})
    pol = AnsweringPolicyDouble({q.question: q.answers[0] for q in test}, correct=[test[0].question],
                                wrong="Nowhere Special")
    judge = _SupportJudgeDouble(good=test[0].answers[0], garble=test[2].question)
    run = ep.judge_runner(p, tmp_path / "data", ed, policy=pol, judge=judge)
    summary, scores, counts = run(ROOT / "hasp" / "skills" / "search", "judge_baseline")
    assert scores == {f"log-{test[0].id}": 1.0, f"log-{test[1].id}": 0.0}  # the third: no usable verdict
    assert counts == {"asked": 3, "unsupported": 1, "errors": 1,
                      "first_error": f"log-{test[2].id}: unparseable judge reply 'perhaps'"}
    assert summary["n"] == 3 and set(pol.asked) == {q.question for q in test} and len(judge.seen) == 3
    assert (ed / "judge_runs" / "judge_baseline.jsonl").exists()
    assert ep.judge_runner(_params(tmp_path), tmp_path / "data", ed, policy=pol) is None
