"""Single-step math and code episodes: environments of the one agent loop, with its harness and records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from doubles import ScriptedPolicyDouble, TimeoutPolicyDouble

from hasp.records import Trajectory
from hasp.agent.rollout import read_trajectories
from hasp.agent.single_step import REVISE_TEMPLATE, revision_message
from hasp.config import Params
from hasp.domains.code import environment as code_env
from hasp.domains.math import environment as math_env
from hasp.domains.code.datasets import load_humaneval
from hasp.domains.math.datasets import MathItem
from hasp.episode.domains import CodeDomain, MathDomain
from hasp.episode.spec import episode_spec
from hasp.eval.datasets import items_dataset
from hasp.eval.runner import run_eval
from hasp.eval.summary import summarize_trajectories
from hasp.pf.library import load_library
from hasp.signals.coarse import score_trajectory
from hasp.train.data import build_sft_rows, score_all

ROOT = Path(__file__).resolve().parents[1]
MATH_SKILLS = ROOT / "hasp" / "skills" / "math"
CODE_SKILLS = ROOT / "hasp" / "skills" / "code"

G24 = MathItem(id="g24-1-1-4-6", kind="game24", numbers=[1, 1, 4, 6], answers=[], source="test",
               problem="Make 24 from the numbers [1, 1, 4, 6]. Combine them with +, -, * and / and "
                       "parentheses, using every number exactly once. Give the expression as your answer.")
NUMERIC = MathItem(id="n-42", problem="What is 6 times 7?", answers=["42"], kind="numeric", source="test")

WRONG_G24 = "Thought: 1+1+4 is 6, times 4 is 24.\nFINAL[(1+1+4)*4]"
RIGHT_G24 = "Thought: 4*6 is 24 and 1*1 keeps it.\nFINAL[4*6*1*1]"

HE0_WRONG = '''Compare each number with the next one.
```python
def has_close_elements(numbers, threshold):
    for i in range(len(numbers)):
        if abs(numbers[i] - numbers[i + 1]) < threshold:
            return True
    return False
```'''
HE0_RIGHT = '''Compare every pair.
```python
def has_close_elements(numbers, threshold):
    for i in range(len(numbers)):
        for j in range(i + 1, len(numbers)):
            if abs(numbers[i] - numbers[j]) < threshold:
                return True
    return False
```'''


@pytest.fixture(scope="module")
def math_lib():
    lib = load_library(MATH_SKILLS, "math")
    assert lib.load_errors == []
    yield lib
    lib.close()


@pytest.fixture(scope="module")
def code_lib():
    lib = load_library(CODE_SKILLS, "code")
    yield lib
    lib.close()


@pytest.fixture(scope="module")
def he0():
    return next(it for it in load_humaneval() if it.task_id == "HumanEval/0")


def _math_episode(item, pol, lib, variant="pf", revise=True) -> Trajectory:
    return episode_spec(Params(), MathDomain(revise=revise), variant).runner(policy=pol, library=lib)(item).traj


def _code_episode(item, pol, lib, variant="pf") -> Trajectory:
    return episode_spec(Params(), CodeDomain(), variant).runner(policy=pol, library=lib)(item).traj


# ----------------------------------------------------------------------------- math


def test_game24_verification_pf_triggers_a_successful_revision(math_lib):
    pol = ScriptedPolicyDouble([WRONG_G24, RIGHT_G24])
    t = _math_episode(G24, pol, math_lib)
    assert isinstance(t, Trajectory) and t.variant == "pf"
    assert t.em == 1.0 and t.f1 == 1.0 and t.prediction == "4*6*1*1" and t.terminated == "final"
    assert len(t.steps) == 2 and len(pol.seen) == 2
    first, second = t.audits()
    assert first.a_orig.type == "FINAL" and first.a_orig.arg == "(1+1+4)*4" and first.a_final == first.a_orig
    fired = {f["skill_id"] for f in first.fired}
    assert "verification_missing" in fired and first.mode == "INJECT_CONTEXT"
    assert any("4 used 2x" in c for c in first.context)
    assert first.feedback["score"] == 0.0 and first.feedback["revision_requested"] and not first.feedback["final"]
    assert second.a_orig.arg == "4*6*1*1" and second.feedback == {"final": True, "score": 1.0}
    assert any("Verified" in c for c in second.context)  # the second answer has its own audit
    assert second.state["step_count"] == 1 and second.state["action_history"] == ["FINAL[(1+1+4)*4]"]
    assert t.steps[0].thought.startswith("1+1+4") and t.steps[0].observation.endswith(first.context[-1])
    # the revision turn: the model's own reply, then the hints and the format instruction
    rev = pol.seen[1]
    assert rev[:2] == pol.seen[0] and rev[2] == {"role": "assistant", "content": WRONG_G24}
    assert rev[3]["role"] == "user" and "A checker" in rev[3]["content"] and "4 used 2x" in rev[3]["content"]
    assert "FINAL[answer]" in rev[3]["content"]
    assert t.steps[1].prompt_messages == rev
    assert t.prompt_tokens == 20 and t.completion_tokens == 10
    assert t.fired_skills().count("verification_missing") == 2
    # lossless JSON round trip, and the downstream code runs unchanged on it
    back = Trajectory.from_dict(json.loads(json.dumps(t.to_dict())))
    assert back == t
    scores = score_trajectory(t)
    assert len(scores.steps) == 2
    rows = build_sft_rows(score_all([t]), reward_floor=-1.0)
    assert rows and rows[0]["qid"] == G24.id and rows[0]["messages"][-1]["role"] == "assistant"


def test_final_format_error_modifies_the_action(math_lib):
    pol = ScriptedPolicyDouble(["6 times 7 is 42. FINAL[\\boxed{42}]"])
    t = _math_episode(NUMERIC, pol, math_lib, revise=False)
    (a,) = t.audits()
    assert a.a_orig.arg == "\\boxed{42}" and a.a_final.arg == "42" and a.was_modified
    assert a.mode == "MODIFY_ACTION" and t.prediction == "42" and t.em == 1.0
    assert len(pol.seen) == 1 and len(t.steps) == 1  # revise=False: no second turn
    s = summarize_trajectories([t])
    assert s["pf_action_fires"] == 1 and 0 < s["pf_action_share"] < 1 and s["accuracy"] == 1.0


def test_bare_equation_answer_is_graded_and_the_format_pf_asks_for_final(math_lib):
    pol = ScriptedPolicyDouble(["24 = (1+1+4)*4", "FINAL[4*6*1*1]"])
    t = _math_episode(G24, pol, math_lib)
    first, second = t.audits()
    assert first.a_orig.arg == "(1+1+4)*4" and first.state["answer_format"] == "bare"
    assert "final_format_error" in {f["skill_id"] for f in first.fired}
    assert any("no FINAL[...] line" in c for c in first.context)
    assert second.state["answer_format"] == "final" and t.em == 1.0
    # without PFs the same bare reply is still graded (same extraction for every variant)
    t2 = _math_episode(G24, ScriptedPolicyDouble(["24 = 4*6*1*1"]), math_lib, variant="react")
    assert t2.prediction == "4*6*1*1" and t2.em == 1.0


def test_revision_without_an_answer_keeps_the_first_answer(math_lib):
    pol = ScriptedPolicyDouble([RIGHT_G24, "I am not sure any more."])
    t = _math_episode(G24, pol, math_lib)
    assert len(t.steps) == 2 and t.steps[1].audit is None and t.steps[1].parse_error
    assert t.prediction == "4*6*1*1" and t.em == 1.0 and t.terminated == "final"


def test_no_answer_is_a_recorded_model_failure(math_lib):
    t = _math_episode(G24, ScriptedPolicyDouble(["Let me think about 24."]), math_lib)
    assert t.terminated == "max_steps" and t.em == 0.0 and t.prediction == ""
    assert len(t.steps) == 1 and t.steps[0].audit is None and t.steps[0].parse_error


def test_react_variant_never_fires(math_lib, code_lib, he0):
    pol = ScriptedPolicyDouble([WRONG_G24, RIGHT_G24])
    t = _math_episode(G24, pol, math_lib, variant="react")
    assert t.variant == "react" and len(pol.seen) == 1 and len(t.steps) == 1
    (a,) = t.audits()
    assert a.fired == [] and a.context == [] and a.mode == "none" and t.em == 0.0
    assert "Checks to apply" not in pol.seen[0][0]["content"]
    cpol = ScriptedPolicyDouble([HE0_WRONG, HE0_RIGHT])
    ct = _code_episode(he0, cpol, code_lib, "react")
    assert len(cpol.seen) == 1 and ct.fired_skills() == [] and ct.em == 0.0


def test_prompt_variant_puts_skill_summaries_in_the_system_prompt(math_lib, code_lib, he0):
    pol = ScriptedPolicyDouble([WRONG_G24])
    t = _math_episode(G24, pol, math_lib, variant="prompt")
    system = pol.seen[0][0]
    assert system["role"] == "system"
    summary = math_lib.get("verification_missing").spec.system_summary.strip()
    assert summary and summary in system["content"]
    assert t.variant == "prompt" and t.fired_skills() == [] and len(t.steps) == 1
    cpol = ScriptedPolicyDouble([HE0_RIGHT])
    ct = _code_episode(he0, cpol, code_lib, "prompt")
    code_summary = code_lib.skills[0].spec.system_summary.strip()
    assert code_summary in cpol.seen[0][0]["content"] and ct.fired_skills() == []
    pf_pol = ScriptedPolicyDouble([RIGHT_G24, RIGHT_G24])
    _math_episode(G24, pf_pol, math_lib, variant="pf")
    assert summary not in pf_pol.seen[0][0]["content"]


# ----------------------------------------------------------------------------- code


def test_humaneval0_wrong_then_correct_through_the_real_sandbox(code_lib, he0):
    pol = ScriptedPolicyDouble([HE0_WRONG, HE0_RIGHT])
    t = _code_episode(he0, pol, code_lib, "pf")
    assert t.qid == "HumanEval/0" and len(t.steps) == 2 and t.em == 1.0 and t.terminated == "final"
    first, second = t.audits()
    assert first.a_orig.type == "FINAL" and first.a_orig.arg.startswith("def has_close_elements")
    assert "```" not in first.a_orig.arg and first.a_final == first.a_orig  # code PFs never rewrite code
    assert "code_off_by_one" in {f["skill_id"] for f in first.fired}
    assert any("OFF-BY-ONE" in c for c in first.context)
    assert first.feedback["score"] == 0.0 and first.feedback["status"] in ("failed", "error")
    assert second.feedback["score"] == 1.0 and second.feedback["status"] == "passed"
    assert "range(i + 1" in t.prediction
    assert t.steps[0].thought == "Compare each number with the next one."
    rev = pol.seen[1][-1]["content"]
    assert "OFF-BY-ONE" in rev and "```python" in rev


def test_split_completion():
    assert code_env.split_completion("no code here, sorry") == ("no code here, sorry", None)
    thought, code = code_env.split_completion(HE0_RIGHT, "has_close_elements")
    assert thought == "Compare every pair." and code.startswith("def has_close_elements")
    thought, code = code_env.split_completion("def f(x):\n    return x\n", "f")
    assert thought == "" and code == "def f(x):\n    return x"


# ----------------------------------------------------------------------------- evaluation + MLflow


@pytest.fixture
def mlflow_store(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default artifact root is relative to the working directory
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    return tmp_path


def _serial_params() -> Params:
    """Params with one episode at a time, so scripted replies arrive in item order."""
    p = Params()
    return p.model_copy(update={"llm": p.llm.model_copy(update={"max_concurrency": 1})})


def test_math_and_code_cells_through_the_eval_runner_and_mlflow(mlflow_store, he0):
    import mlflow

    from hasp.eval.tracking import log_eval_runs

    out = mlflow_store / "eval_math"
    ds = items_dataset("math", "unit", [G24, NUMERIC])
    # one episode at a time keeps the scripted replies in item order: react, prompt (1 call each), then pf
    pol = ScriptedPolicyDouble([WRONG_G24, "FINAL[42]", WRONG_G24, "FINAL[41]",
                          WRONG_G24, RIGHT_G24, "FINAL[41]", "Check: 6*7=42. FINAL[42]"])
    res = run_eval(_serial_params(), [ds], ["react", "prompt", "pf"], policy=pol, library_root=MATH_SKILLS,
                   out_dir=out, progress=False)
    m = res.metrics()["unit"]
    assert set(m) == {"react", "prompt", "pf"} and not pol.replies
    assert m["react"]["accuracy"] == 0.5 and m["prompt"]["accuracy"] == 0.0
    pf = m["pf"]
    assert pf["accuracy"] == 1.0 and pf["first_answer_accuracy"] == 0.0 and pf["revised_rate"] == 1.0
    assert pf["revision_fixed"] == 2 and pf["revision_broke"] == 0
    assert pf["pf_fires"]["verification_missing"] == 4 and pf["pf_context_share"] > 0
    assert m["react"]["pf_fires_total"] == 0 and pf["library_size"] == 11 and pf["domain"] == "math"
    assert pf["prompt_tokens"] > 0 and pf["wall_s"] > 0
    assert json.loads((out / "metrics.json").read_text())["unit"]["pf"]["accuracy"] == 1.0
    assert [t.qid for t in read_trajectories(out / "unit" / "pf.jsonl")] == [G24.id, NUMERIC.id]

    cout = mlflow_store / "eval_code"
    cres = run_eval(_serial_params(), [items_dataset("code", "unit", [he0])], ["pf"],
                    policy=ScriptedPolicyDouble([HE0_WRONG, HE0_RIGHT]), library_root=CODE_SKILLS, out_dir=cout,
                    progress=False)
    assert cres.metrics()["unit"]["pf"]["pass_at_1"] == 1.0 == cres.metrics()["unit"]["pf"]["accuracy"]

    runs = log_eval_runs(res, experiment="hasp-math-test", run_name="math-eval", params={"dataset": "unit", "n": 2})
    client = mlflow.tracking.MlflowClient()
    parent = client.get_run(runs["parent"])
    assert parent.data.params["dataset"] == "unit" and parent.data.tags["hasp.domain"] == "math"
    assert parent.data.metrics["unit.pf.f1"] == 1.0
    child = client.get_run(runs["children"]["unit/pf"])
    cm = child.data.metrics
    assert cm["accuracy"] == 1.0 and cm["first_answer_accuracy"] == 0.0 and cm["fires.verification_missing"] == 4
    assert "pf_action_share" in cm and "pf_context_share" in cm and cm["completion_tokens"] > 0
    assert "fires.verification_missing" not in client.get_run(runs["children"]["unit/react"]).data.metrics
    assert {"comparison.csv", "metrics.json"} <= {a.path for a in client.list_artifacts(runs["parent"])}
    assert runs["traces"] == 6  # one per episode: 3 variants x 2 items
    cruns = log_eval_runs(cres, experiment="hasp-code-test", run_name="code-eval", params={}, traces=False)
    assert client.get_run(cruns["children"]["unit/pf"]).data.metrics["pass_at_1"] == 1.0


def test_eval_command_refuses_bad_inputs_in_one_line(tmp_path, capsys):
    """Unknown variants, a missing library, teacher variants without a teacher and web-search-only
    variants are refused before any model starts."""
    from hasp.cli import main

    (tmp_path / "params.yaml").write_text((ROOT / "params.yaml").read_text())
    base = ["eval", "--domain", "math", "--dataset", "game24", "--limit", "1", "--params",
            str(tmp_path / "params.yaml"), "--library", str(MATH_SKILLS)]
    cases = [(["--variants", "nope"], "unknown agent variant"),
             (["--variants", "react,pf", "--library", str(tmp_path / "none")], "not a folder"),
             (["--variants", "pf_teacher"], "need(s) a teacher"),
             (["--variants", "teacher_only"], "web-search only"),
             (["--variants", "pf", "--domain", "chess"], "not a built-in domain (search, math, code)")]
    for extra, msg in cases:
        assert main(base + extra) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and msg in err[0], (extra, err)


def test_revision_message_wording():
    assert "{hints}" in REVISE_TEMPLATE and "{format_hint}" in REVISE_TEMPLATE


def test_teacher_only_is_refused_by_the_single_step_episode(math_lib):
    with pytest.raises(ValueError, match="web-search only"):
        _math_episode(G24, ScriptedPolicyDouble(["FINAL[1]"]), math_lib, variant="teacher_only")


def test_an_endpoint_failure_costs_one_episode_not_the_run(tmp_path):
    other = MathItem(id="n-8", problem="What is 2 times 4?", answers=["8"], kind="numeric", source="test")
    pol = TimeoutPolicyDouble({"2 times 4"})
    res = run_eval(_serial_params(), [items_dataset("math", "unit", [NUMERIC, other])], ["react"], policy=pol,
                   library_root=None, out_dir=tmp_path, progress=False)
    s = res.metrics()["unit"]["react"]
    # accuracy is over the scored episodes; the one the endpoint failed is counted apart
    assert s["n"] == 2 and s["n_scored"] == 1 and s["n_failed"] == 1 and s["accuracy"] == pytest.approx(1.0)
    bad = next(t for t in read_trajectories(tmp_path / "unit" / "react.jsonl") if t.qid == "n-8")
    assert bad.terminated == "error" and "APITimeoutError" in bad.pf_errors[0] and bad.em == 0.0
    # a variant whose every call fails is an error, not an accuracy of 0 — with its file kept
    with pytest.raises(RuntimeError, match="all 1 episodes failed"):
        run_eval(_serial_params(), [items_dataset("math", "unit", [other])], ["react"], policy=pol,
                 library_root=None, out_dir=tmp_path / "all", progress=False)
    assert read_trajectories(tmp_path / "all" / "unit" / "react.jsonl")[0].terminated == "error"


def test_math_and_code_episodes_run_the_harness(math_lib, code_lib, he0):
    """The one loop's harness runs on single-step episodes: every library PF selected, handler votes
    asked on each FINAL, pre_final phase reminders chosen and recorded; the revision turn stays the
    checker's findings (the PF hints), as the single-step agent always showed them."""
    pol = ScriptedPolicyDouble([WRONG_G24, RIGHT_G24])
    t = _math_episode(G24, pol, math_lib)
    first, second = t.audits()
    assert t.harness.pf_selection_source == "all" and set(t.harness.selected_pfs) == set(math_lib.ids)
    assert first.handlers["votes"] == [] and first.handlers["threshold"] == Params().harness.handler_vote_threshold
    assert first.phases and all(label.endswith(":pre_final") for label in first.phases)
    assert len(t.steps[0].reminders) == len(first.phases)
    assert pol.seen[1][-1]["content"] == revision_message(first.context, math_env.FORMAT_HINT)
    assert second.phases and second.handlers["asked"] == first.handlers["asked"]
    cpol = ScriptedPolicyDouble([HE0_WRONG, HE0_RIGHT])
    ct = _code_episode(he0, cpol, code_lib)
    (cfirst, _) = ct.audits()
    assert ct.harness.pf_selection_source == "all" and set(ct.harness.selected_pfs) == set(code_lib.ids)
    assert "votes" in cfirst.handlers and cfirst.phases and all(p.endswith(":pre_final") for p in cfirst.phases)
    assert ct.steps[0].reminders and cpol.seen[1][-1]["content"] == revision_message(cfirst.context,
                                                                                      code_env.FORMAT_HINT)
    # react has no skill surfaces: no reminders, no votes
    r = _math_episode(G24, ScriptedPolicyDouble([WRONG_G24]), math_lib, variant="react")
    assert r.audits()[0].phases == [] and r.audits()[0].handlers == {} and r.harness.selected_pfs == []
