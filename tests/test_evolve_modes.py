"""Evolution to spec: LLM failure summarizer, gate table per filtering mode, val gate,
frontier + rollback, lite mode, Objective B rows. Fast: every model is a named double."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from doubles import AnsweringPolicyDouble, PerQuestionPolicyDouble, ValRunnerDouble
from traj_builders import scripted_traj

from hasp.records import Trajectory
from hasp.agent.rollout import write_trajectories
from hasp.config import load_params
from hasp.domains.search.prepare import prepare_data
from hasp.evolve import epoch as ep
from hasp.evolve.cluster import cluster_patterns, clusters_to_json
from hasp.evolve.detectors import _TEMPLATES, FailurePattern
from hasp.evolve.frontier import Frontier, read_carry, restore_snapshot
from hasp.evolve.gate import FILTERING, LITE_GATES, active_gates, run_val_gate, static_exec_report
from hasp.evolve.propose import parse_proposal
from hasp.evolve.review import Review
from hasp.train.rewards import skill_author_reward
from hasp.pf.skill_md import kebab, parse_skill_md, write_skill_folder
from hasp.evolve.summarize import SummaryFormatError, parse_summary, summarize_failures
from hasp.train.data import build_skill_dpo_rows, build_skill_records, build_skill_sft_rows

ROOT = Path(__file__).resolve().parents[1]


def _traj(qid: str, actions: list[tuple[str, str]], em: float = 0.0) -> Trajectory:
    return scripted_traj(qid, actions, question=f"Where was {qid} born?", answers=["Telvik"], em=em,
                         prediction=actions[-1][1])


GOOD_JSON = json.dumps({"category": "stale_evidence", "abstraction": "The agent trusts an outdated document.",
                        "trigger": "A FINAL after reading a document with an older date.",
                        "intervention_hint": "Ask for a search about the latest date first."})


# --------------------------------------------------------------------------- summarizer

def test_summarizer_valid_retried_and_dropped(caplog):
    trajs = [_traj("alpha", [("FINAL", "Oslo")]), _traj("beta", [("FINAL", "Rome")]),
             _traj("gamma", [("FINAL", "Lima")]), _traj("delta", [("FINAL", "Telvik")], em=1.0)]
    pol = PerQuestionPolicyDouble({"alpha": [GOOD_JSON],
                          "beta": ["Sure! The agent was wrong.", "```json\n" + GOOD_JSON + "\n```"],
                          "gamma": ['{"category": oops}', '{"category": "x", "abstraction": "a"}']})
    out = summarize_failures(trajs, pol, temperature=0.3, retries=1, max_concurrency=3)
    assert sorted(p.qid for p in out.patterns) == ["alpha", "beta"]
    assert all(p.source == "llm" and p.category == "stale_evidence" for p in out.patterns)
    assert out.retried == 2
    (drop,) = out.dropped
    assert drop["qid"] == "gamma" and drop["attempts"] == 2
    assert "invalid JSON" in drop["reason"] and "missing or empty string fields" in drop["reason"]
    assert "summarizer dropped gamma" in caplog.text
    assert {kw["temperature"] for _, _, kw in pol.calls} == {0.3}
    assert not any(k == "delta" for k, _, _ in pol.calls)  # successes are not summarized
    beta_retry = [m for k, m, _ in pol.calls if k == "beta"][1]
    assert beta_retry[-2]["role"] == "assistant" and "JSON" in beta_retry[-1]["content"]


def test_summarizer_zero_retries_drops_on_first_bad_reply():
    pol = PerQuestionPolicyDouble({"alpha": ["garbage"]})
    out = summarize_failures([_traj("alpha", [("FINAL", "x")])], pol, retries=0)
    assert not out.patterns and out.dropped[0]["attempts"] == 1


@pytest.mark.parametrize("text,err", [
    ("no braces here", "no JSON object"),
    ('{"category": "ok_cat", "abstraction": "a", "trigger": "t"}', "intervention_hint"),
    ('{"category": "a b", "abstraction": "a", "trigger": "t", "intervention_hint": "h"}', "snake_case"),
    ("[1, 2]", "no JSON object"),
])
def test_parse_summary_rejects(text, err):
    with pytest.raises(SummaryFormatError, match=err):
        parse_summary(text)


def test_parse_summary_normalises_category():
    d = parse_summary('Here: {"category": "Stale-Evidence", "abstraction": "a", "trigger": "t", '
                      '"intervention_hint": "h"} done')
    assert d["category"] == "stale_evidence"


def _params(tmp_path: Path, **evolve) -> object:
    return load_params(ROOT / "params.yaml", {f"evolve.{k}": v for k, v in evolve.items()})


def test_analyse_merges_llm_patterns_before_clustering(tmp_path):
    trajs = [_traj(q, [("FINAL", "x")]) for q in ("alpha", "beta", "gamma")]
    write_trajectories(trajs, tmp_path / "rollout.jsonl")
    pol = PerQuestionPolicyDouble({"alpha": [GOOD_JSON], "beta": [GOOD_JSON], "gamma": ["junk", "junk"]})
    p = _params(tmp_path, min_cluster_size=2)
    s = ep.analyse(tmp_path / "rollout.jsonl", ROOT / "hasp" / "skills" / "search", p, tmp_path, summarizer=pol)
    assert s["llm_patterns"] == 2 and s["llm_dropped"] == 1 and s["summarizer_used"]
    cats = {c["category"]: c for c in json.loads((tmp_path / "clusters.json").read_text())}
    assert cats["stale_evidence"]["support"] == 2  # two LLM patterns deduplicated into one cluster
    assert "premature_final" in cats  # the heuristic patterns are still there
    off = ep.analyse(tmp_path / "rollout.jsonl", ROOT / "hasp" / "skills" / "search",
                     _params(tmp_path, summarizer=False), tmp_path, summarizer=pol)
    assert off["llm_patterns"] == 0 and not off["summarizer_used"]


# --------------------------------------------------------------------------- gate table

def _code(sid: str, body: str = "return action_type == 'FINAL' and not ctx.get('has_read', False)") -> str:
    return (f'from hasp.pf import Intervention, InterventionType, ProgramFunction, register_pf\n\n\n'
            f'@register_pf("{sid}")\nclass P(ProgramFunction):\n'
            f'    def should_activate(self, ctx, action_type, arg):\n        {body}\n\n'
            f'    def intervene(self, ctx, action_type, arg, teacher=None):\n'
            f'        return Intervention(type=InterventionType.INJECT_CONTEXT, context_text="Read first.",\n'
            f'                            reason="no read")\n')


def _cluster(cat: str = "no_read_before_final"):
    a, t, h = _TEMPLATES[cat]
    (c,) = cluster_patterns([FailurePattern(cat, a, t, h, qid=f"q{i}") for i in range(4)], ["seed_skill"])
    return c


def _cand(sid: str, code: str):
    md = f"---\nskill_id: {sid}\nname: {sid.replace('_', '-')}\ndescription: Read before answering.\n---\nBody.\n"
    c = parse_proposal(f"```markdown\n{md}```\n```python\n{code}```", _cluster(), epoch=0)
    c.prompt_messages = [{"role": "system", "content": "design a PF"}, {"role": "user", "content": f"fix {sid}"}]
    return c


def _review(sid: str, decision: str, q: float) -> dict:
    r = Review(q, q, q, 1.0, q, q, decision, "", "heuristic", decided_by="threshold").to_dict()
    return {"skill_id": sid, **r}


def _exec(sid: str, passed: bool) -> dict:
    checks = {k: passed or k == "syntax" for k in ("syntax", "policy", "interface", "mock_exec", "return_types")}
    return {"skill_id": sid, "passed": passed, "q_exec": 1.0 if passed else 0.4, "checks": checks}


SEED_MD = "---\nskill_id: seed_skill\nname: seed-skill\ndescription: seed.\n---\nBody.\n"
SEED_PF = _code("seed_skill", "return False")


@pytest.fixture
def epoch_files(tmp_path):
    """Four fixed candidates with fixed Phase-D / Phase-E / val evidence."""
    lib = tmp_path / "lib"
    write_skill_folder(lib / "seed-skill", parse_skill_md(SEED_MD))
    (lib / "seed-skill" / "pf.py").write_text(SEED_PF)
    ed = tmp_path / "epoch_0"
    cands = [_cand("good_skill", _code("good_skill")), _cand("broken_exec", _code("broken_exec", "return 1 / 0")),
             _cand("weak_review", _code("weak_review")), _cand("no_parse", _code("no_parse") + "def (:\n")]
    ep.write_json([c.to_dict() for c in cands], ed / "candidates.json")
    ep.write_json(clusters_to_json([_cluster()]), ed / "clusters.json")
    ep.write_json([_exec("good_skill", True), _exec("broken_exec", False), _exec("weak_review", True),
                   _exec("no_parse", False)], ed / "validation.json")
    ep.write_json([_review("good_skill", "ACCEPT", 0.9), _review("broken_exec", "ACCEPT", 0.9),
                   _review("weak_review", "REJECT", 0.3), _review("no_parse", "ACCEPT", 0.9)], ed / "reviews.json")
    return tmp_path, lib, ed


def _admit(tmp_path, lib, ed, **evolve):
    p = _params(tmp_path, **evolve)
    s = ep.admit_phase(ed / "candidates.json", ed / "reviews.json", ed / "clusters.json", lib, ed / "library", p,
                       epoch=0)
    return {d["skill_id"] for d in s["decisions"] if d["admitted"]}, s


@pytest.mark.parametrize("filtering,val_gate,expected", [
    ("none", True, {"good_skill", "broken_exec", "weak_review"}),
    ("exec", True, {"good_skill", "weak_review"}),
    ("teacher", True, {"good_skill", "broken_exec"}),
    ("full", False, {"good_skill"}),
])
def test_each_filtering_mode_admits_the_expected_candidates(epoch_files, filtering, val_gate, expected):
    tmp_path, lib, ed = epoch_files
    admitted, s = _admit(tmp_path, lib, ed, filtering=filtering, val_gate=val_gate)
    assert admitted == expected
    assert s["gates"] == list(FILTERING[filtering] if val_gate else ("parse", "exec", "teacher"))
    hist = json.loads((ed / "library" / "library_history.json").read_text())
    assert len(hist) == 4 and all(h["filtering"] == filtering for h in hist)
    refused = {h["skill_id"]: h["reasons"] for h in hist if h["decision"] == "rejected"}
    assert any("parse: code does not parse" in r for r in refused["no_parse"])


def test_val_gate_refuses_a_candidate_that_lowers_val_em(epoch_files):
    tmp_path, lib, ed = epoch_files
    # a second good candidate that hurts val accuracy
    cands = json.loads((ed / "candidates.json").read_text())
    cands.append(_cand("harmful_skill", _code("harmful_skill")).to_dict())
    ep.write_json(cands, ed / "candidates.json")
    ep.write_json(json.loads((ed / "validation.json").read_text()) + [_exec("harmful_skill", True)],
                  ed / "validation.json")
    ep.write_json(json.loads((ed / "reviews.json").read_text()) + [_review("harmful_skill", "ACCEPT", 0.8)],
                  ed / "reviews.json")
    p = _params(tmp_path)
    runner = ValRunnerDouble({"good_skill": 0.6, "harmful_skill": 0.3})
    s = ep.gate(ed, lib, p, {"em": 0.5, "f1": 0.6, "n": 10}, runner)
    assert sorted(runner.calls) == ["good_skill", "harmful_skill"]  # only candidates past the cheap gates
    assert s["val_runs"] == 2 and s["val_pass"] == 1
    gate = {g["skill_id"]: g for g in json.loads((ed / "gate.json").read_text())}
    assert gate["good_skill"]["delta_em"] == pytest.approx(0.1)
    assert gate["harmful_skill"]["delta_em"] == pytest.approx(-0.2)
    assert gate["good_skill"]["r_skill"] == pytest.approx(0.9 + 0.5 * 0.1)
    admitted, _ = _admit(tmp_path, lib, ed)
    assert admitted == {"good_skill"}
    hist = {h["skill_id"]: h for h in json.loads((ed / "library" / "library_history.json").read_text())}
    assert any("val EM drops by 0.200" in r for r in hist["harmful_skill"]["reasons"])
    assert hist["harmful_skill"]["delta_em_val"] == pytest.approx(-0.2)
    assert hist["good_skill"]["r_skill"] == pytest.approx(0.95)
    # no val run for a candidate the cheap gates refused, and no "val" reason piled on top
    assert not any(r.startswith("val:") for r in hist["broken_exec"]["reasons"])


@pytest.mark.parametrize("rule,expected", [("gain", set()), ("no_drop", {"good_skill"})])
def test_val_rule_decides_whether_an_unchanged_val_em_admits(epoch_files, rule, expected):
    tmp_path, lib, ed = epoch_files
    p = _params(tmp_path, val_rule=rule)
    s = ep.gate(ed, lib, p, {"em": 0.5, "f1": 0.6, "n": 10}, ValRunnerDouble({"good_skill": 0.5}))
    assert s["val_pass"] == len(expected)
    admitted, _ = _admit(tmp_path, lib, ed, val_rule=rule)
    assert admitted == expected
    hist = {h["skill_id"]: h for h in json.loads((ed / "library" / "library_history.json").read_text())}
    if rule == "gain":
        assert any("val EM unchanged" in r for r in hist["good_skill"]["reasons"])


def test_val_gate_records_a_failed_run_and_refuses(epoch_files):
    tmp_path, lib, ed = epoch_files

    def crash(library, label):
        raise RuntimeError("endpoint down")

    items = [(_cand("good_skill", _code("good_skill")), _cluster(), Review.from_dict(_review("g", "ACCEPT", 0.9)))]
    (res,) = run_val_gate(items, lib, crash, {"em": 0.5, "f1": 0.5})
    assert res.delta_em is None and "endpoint down" in res.error and res.r_skill == pytest.approx(0.9)


def test_r_skill_and_gate_selection():
    assert skill_author_reward(0.7, -0.2) == pytest.approx(0.6) and skill_author_reward(None, 0.1) is None
    assert skill_author_reward(0.5, None) == 0.5
    p = load_params(ROOT / "params.yaml", {"evolve.mode": "lite", "evolve.filtering": "none"})
    assert active_gates(p.evolve) == LITE_GATES
    assert active_gates(load_params(ROOT / "params.yaml", {"evolve.val_gate": False}).evolve) == (
        "parse", "exec", "teacher")


def test_static_exec_report_reads_without_running():
    ok = static_exec_report(_code("good_skill", "return 1 / 0"), "good_skill")
    assert ok["static"] and ok["q_exec"] == 1.0 and not ok["passed"]  # crashes at run time, reads fine
    bad = static_exec_report("import os\nos.system('x')\n", "x")
    assert bad["q_exec"] == 0.0


def test_lite_mode_samples_groups_and_dedups_ids(tmp_path):
    trajs = [_traj(f"q{i}", [("FINAL", "x")]) for i in range(8)]
    write_trajectories(trajs, tmp_path / "rollout.jsonl")
    p = _params(tmp_path, mode="lite", lite_failures=5)
    pol = PerQuestionPolicyDouble({"q": [GOOD_JSON] * 20})
    s = ep.analyse(tmp_path / "rollout.jsonl", ROOT / "hasp" / "skills" / "search", p, tmp_path, summarizer=pol, epoch=3)
    assert s["analysed"] == 5 and not s["summarizer_used"] and not pol.calls  # no LLM in lite mode
    clusters = json.loads((tmp_path / "clusters.json").read_text())
    assert len({c["category"] for c in clusters}) == len(clusters)  # one group per category, no size cut
    assert all(c["support"] <= 5 for c in clusters)
    # admission: compile check + skill-id dedup only
    lib = tmp_path / "lib"
    write_skill_folder(lib / "seed-skill", parse_skill_md(SEED_MD))
    (lib / "seed-skill" / "pf.py").write_text(SEED_PF)
    ed = tmp_path / "epoch_3"
    # the last two are the shapes a real lite run let through before the ``loadable`` gate:
    # a reply with imports outside the allow-list and no registered class, and a plain import of os
    cands = [_cand("new_one", _code("new_one")), _cand("new_one", _code("new_one", "return 1 / 0")),
             _cand("seed_skill", _code("seed_skill")),
             _cand("no_class", "import re\nimport traceback\n\ndef f(x):\n    return x\n"),
             _cand("uses_os", "import os\n" + _code("uses_os"))]
    ep.write_json([c.to_dict() for c in cands], ed / "candidates.json")
    ep.write_json(clusters_to_json([_cluster()]), ed / "clusters.json")
    s = ep.admit_phase(ed / "candidates.json", None, ed / "clusters.json", lib, ed / "library", p, epoch=3)
    assert [d["admitted"] for d in s["decisions"]] == [True, False, False, False, False]
    assert "proposed twice" in s["decisions"][1]["reason"] and "already in the library" in s["decisions"][2]["reason"]
    assert "no @register_pf class" in s["decisions"][3]["reason"] and "traceback" in s["decisions"][3]["reason"]
    assert "'os'" in s["decisions"][4]["reason"]
    assert sorted(p.name for p in (ed / "library" / "generated").iterdir()) == ["new-one-v1"]
    hist = json.loads((ed / "library" / "library_history.json").read_text())
    assert {h["review_decision"] for h in hist} == {"NOT_REVIEWED"}


# --------------------------------------------------------------------------- frontier / rollback

def _snap(tmp_path: Path, name: str, skill: str) -> Path:
    d = tmp_path / name
    write_skill_folder(d / kebab(skill), parse_skill_md(SEED_MD.replace("seed_skill", skill)))
    (d / "library_history.json").write_text(json.dumps([{"decision": "admitted", "skill_id": skill}]))
    return d


def test_frontier_keeps_top_k_and_persists(tmp_path):
    fr = Frontier.load(tmp_path / "frontier.json", size=2)
    assert fr.update(0, 0.4, "s0") and fr.update(1, 0.6, "s1")
    assert not fr.update(2, 0.3, "s2")  # below both members: not kept
    assert fr.update(3, 0.6, "s3")  # ties the best: kept, the earlier epoch stays first
    fr.save()
    again = Frontier.load(tmp_path / "frontier.json", size=2)
    assert [m.epoch for m in again.members] == [1, 3] and again.best().snapshot == "s1"
    assert again.rollback_target(0.58, 0.05) is None
    assert again.rollback_target(0.5, 0.05).epoch == 1
    assert not list(tmp_path.glob(".frontier.json*"))  # no temp file left behind
    (tmp_path / "bad.json").write_text("{nope")
    with pytest.raises(ValueError, match="bad.json"):
        Frontier.load(tmp_path / "bad.json")


def test_restore_snapshot_keeps_current_history_and_is_idempotent(tmp_path):
    snap = _snap(tmp_path, "snap0", "old_skill")
    cur = _snap(tmp_path, "lib2", "new_skill")
    dest = restore_snapshot(snap, tmp_path / "restored", history_from=cur, note={"epoch": 2})
    assert (dest / "old-skill" / "SKILL.md").exists() and not (dest / "new-skill").exists()
    hist = json.loads((dest / "library_history.json").read_text())
    assert hist[0]["skill_id"] == "new_skill" and hist[-1]["decision"] == "rollback"
    mtime = (dest / "library_history.json").stat().st_mtime_ns
    restore_snapshot(snap, tmp_path / "restored", history_from=cur, note={"epoch": 2})
    assert (dest / "library_history.json").stat().st_mtime_ns == mtime  # unchanged on a re-run


def test_frontier_update_rolls_back_when_val_drops(tmp_path):
    out = tmp_path / "outputs"
    seed = _snap(tmp_path, "seed_lib", "seed_skill")
    p = _params(tmp_path, rollback_tolerance=0.05, frontier_size=3)
    lib0 = _snap(out / "epoch_0", "library", "skill_a")
    ep.frontier_update(out, 0, lib0, {"em": 0.5, "f1": 0.6}, p, seed=(seed, {"em": 0.4, "f1": 0.5}))
    from hasp.evolve.admit import snapshot
    snapshot(lib0, lib0 / "snapshots" / "epoch_0")
    s0 = read_carry(out / "epoch_0")
    assert s0["library"] == str(lib0) and s0["rolled_back_to"] is None
    lib1 = _snap(out / "epoch_1", "library", "skill_b")
    s1 = ep.frontier_update(out, 1, lib1, {"em": 0.3, "f1": 0.4}, p)
    assert s1["rolled_back_to"] == 0
    carry = Path(read_carry(out / "epoch_1")["library"])
    assert carry == out / "epoch_1" / "library_rollback" and (carry / "skill-a").exists()
    assert not (carry / "skill-b").exists()
    fr = json.loads((out / "frontier.json").read_text())
    assert [m["epoch"] for m in fr["members"]] == [0, -1, 1]


def test_a_rerun_epoch_ignores_later_epochs_of_the_earlier_run(tmp_path):
    """Re-running over a finished run's folder: epoch 0 must not roll back to that run's epoch 1."""
    out = tmp_path / "outputs"
    seed = _snap(tmp_path, "seed_lib", "seed_skill")
    p = _params(tmp_path, rollback_tolerance=0.05, frontier_size=3)
    from hasp.evolve.admit import snapshot
    libs = []
    for i, (skill, em) in enumerate((("skill_a", 0.1), ("skill_b", 0.4))):
        lib = _snap(out / f"epoch_{i}", "library", skill)
        snapshot(lib, lib / "snapshots" / f"epoch_{i}")
        ep.frontier_update(out, i, lib, {"em": em}, p, seed=(seed, {"em": 0.0}) if i == 0 else None)
        libs.append(lib)
    again = ep.frontier_update(out, 0, libs[0], {"em": 0.1}, p, seed=(seed, {"em": 0.0}))
    assert again["rolled_back_to"] is None  # the first run's epoch 1 (0.4) would have made it roll back
    assert read_carry(out / "epoch_0")["library"] == str(libs[0])
    fr = json.loads((out / "frontier.json").read_text())
    assert [m["epoch"] for m in fr["members"]] == [0, -1]


def test_rollback_cli(tmp_path):
    from hasp.cli import main

    out = tmp_path / "outputs"
    p = _params(tmp_path)
    for i, skill in enumerate(("skill_a", "skill_b")):
        lib = _snap(out / f"epoch_{i}", "library", skill)
        from hasp.evolve.admit import snapshot
        snapshot(lib, lib / "snapshots" / f"epoch_{i}")
        ep.frontier_update(out, i, lib, {"em": 0.5 + 0.01 * i}, p)
    assert main(["evolve", "rollback", "--to", "0", "--out", str(out)]) == 0
    carry = read_carry(out / "epoch_1")
    assert carry["rolled_back_to"] == 0 and (Path(carry["library"]) / "skill-a").exists()
    assert main(["evolve", "rollback", "--to", "7", "--out", str(out)]) == 1  # no such snapshot: clear error


# --------------------------------------------------------------------------- Objective B

def test_objective_b_rows_weights_floor_and_pairs(epoch_files):
    tmp_path, lib, ed = epoch_files
    cands = json.loads((ed / "candidates.json").read_text())
    recs = build_skill_records(
        cands, reviews=json.loads((ed / "reviews.json").read_text()),
        exec_reports=json.loads((ed / "validation.json").read_text()),
        val_results=[{"skill_id": "good_skill", "delta_em": 0.2, "delta_f1": 0.1}],
        decisions=[{"skill_id": "good_skill", "admitted": True}, {"skill_id": "broken_exec", "admitted": False},
                   {"skill_id": "weak_review", "admitted": False}])
    by = {r["skill_id"]: r for r in recs}
    assert by["good_skill"]["r_skill"] == pytest.approx(0.9 + 0.5 * 0.2)
    assert by["good_skill"]["fine"]["q_concept"] == 0.9 and by["good_skill"]["fine"]["exec.mock_exec"] == 1.0
    assert by["good_skill"]["coarse"] == {"q_skill": 0.9, "delta_em_val": 0.2, "r_skill": pytest.approx(1.0)}
    sft = build_skill_sft_rows(recs, reward_floor=0.35)
    assert {r["skill_id"] for r in sft} == {"good_skill", "broken_exec", "no_parse"}  # weak 0.3 < floor
    row = next(r for r in sft if r["skill_id"] == "good_skill")
    assert row["messages"][-1]["role"] == "assistant" and "```python" in row["messages"][-1]["content"]
    assert row["messages"][:-1] == cands[0]["prompt_messages"] and row["sample_weight"] == pytest.approx(1.0)
    assert "fine" in row and "coarse" in row
    dpo = build_skill_dpo_rows(recs, reward_floor=0.25)
    assert {(d["chosen_skill_id"], d["rejected_skill_id"]) for d in dpo} == {
        ("good_skill", "broken_exec"), ("good_skill", "weak_review"), ("good_skill", "no_parse")}
    assert all("fine" in d and "coarse" in d for d in dpo)
    # an earlier epoch's refused candidate of the same cluster pairs with this epoch's admission
    only_good = [by["good_skill"]]
    earlier = [dict(by["weak_review"], epoch=-1)]
    assert len(build_skill_dpo_rows(only_good, earlier=earlier)) == 1
    assert build_skill_dpo_rows([], earlier=[by["good_skill"], by["weak_review"]]) == []


def test_build_data_writes_objective_b_next_to_objective_a(epoch_files):
    tmp_path, lib, ed = epoch_files
    write_trajectories([_traj("alpha", [("FINAL", "x")])], ed / "rollout.jsonl")
    p = _params(tmp_path, val_gate=False)
    ep.admit_phase(ed / "candidates.json", ed / "reviews.json", ed / "clusters.json", lib, ed / "library", p, epoch=0)
    s = ep.build_data(ed / "rollout.jsonl", p, ed)
    for name in ("sft.jsonl", "dpo.jsonl", "sft_skill.jsonl", "dpo_skill.jsonl", "skill_records.jsonl"):
        assert (ed / name).exists(), name
    assert s["objective_b"]["records"] == 4 and s["objective_b"]["sft_rows"] >= 1
    assert s["objective_b"]["dpo_rows"] >= 1  # good_skill admitted vs the refused ones


# --------------------------------------------------------------------------- CLI

def test_cli_run_rejects_a_bad_filtering_value_before_prefect_starts(capsys):
    from hasp.cli import main

    assert main(["evolve", "run", "--epochs", "1", "--filtering", "bogus", "--params",
                 str(ROOT / "params.yaml")]) == 2
    assert "evolve.filtering" in capsys.readouterr().err


def test_cli_gate_writes_an_empty_gate_file_when_the_val_gate_is_off(tmp_path):
    import yaml

    from hasp.cli import main

    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["evolve"]["filtering"] = "exec"
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    ed = tmp_path / "epoch_0"
    assert main(["evolve", "gate", "--epoch-dir", str(ed), "--library", str(ROOT / "hasp" / "skills" / "search"),
                 "--params", str(tmp_path / "params.yaml")]) == 0
    assert json.loads((ed / "gate.json").read_text()) == []
    assert "val gate off" in json.loads((ed / "summary_gate.json").read_text())["skipped"]


def test_cli_run_passes_mode_filtering_and_val_gate_to_the_flow(monkeypatch, capsys):
    import hasp.flows.evolve as fe
    from hasp.cli import main

    seen = {}

    def flow_double(**kw):
        seen.update(kw)
        return {"epochs": [], "eval": {}, "library": "lib", "run_id": "r1"}

    monkeypatch.setattr(fe, "evolve_flow", flow_double)
    assert main(["evolve", "run", "--epochs", "3", "--mode", "lite", "--filtering", "exec", "--no-val-gate",
                 "--params", str(ROOT / "params.yaml"), "--out", "o"]) == 0
    assert (seen["epochs"], seen["mode"], seen["filtering"], seen["val_gate"], seen["out_root"]) == (
        3, "lite", "exec", False, "o")
    assert "MLflow run r1" in capsys.readouterr().out
    # another task: its name and items reach the flow, and the library defaults to that task's seeds
    assert main(["evolve", "run", "--domain", "math", "--dataset", "game24", "--params", str(ROOT / "params.yaml"),
                 "--out", "o"]) == 0
    assert (seen["domain"], seen["dataset"]) == ("math", "game24")
    assert Path(seen["library"]).name == "math" and (Path(seen["library"]) / "arithmetic-slip").is_dir()


def test_cli_run_refuses_a_task_it_cannot_evolve_in_one_line(tmp_path, monkeypatch, capsys):
    import hasp.flows.evolve as fe
    from hasp.cli import main

    monkeypatch.setattr(fe, "evolve_flow", lambda **kw: pytest.fail("the flow must not start"))
    assert main(["evolve", "run", "--domain", "no_such_task", "--out", str(tmp_path)]) == 2
    assert "'no_such_task'" in capsys.readouterr().err
    anchors = tmp_path / "anchors.jsonl"
    anchors.write_text('{"id": "a1", "question": "q?", "answers": ["a"]}\n')
    params = tmp_path / "p.yaml"
    params.write_text(f"evolve:\n  anchors: {anchors}\n")
    assert main(["evolve", "run", "--domain", "math", "--params", str(params), "--out", str(tmp_path)]) == 2
    assert "evolve.anchors: pinned anchors and logged traces are question/answer rows" in capsys.readouterr().err


# --------------------------------------------------------------------------- Phase A prefilter

def test_prefilter_spends_the_pf_rollout_on_cheap_pass_failures_only(tmp_path):
    from hasp.domains.search.task import SearchTask

    p = load_params(ROOT / "params.yaml", {"data.n_questions": 10, "evolve.prefilter": True, "llm.max_concurrency": 1})
    prepare_data(p, tmp_path / "data")
    items = SearchTask.load(tmp_path / "data").questions("train")
    assert len(items) >= 3
    pol = AnsweringPolicyDouble({it.question: it.answers[0] for it in items}, correct=[items[0].question],
                                wrong="no idea")
    out = tmp_path / "epoch_0" / "rollout.jsonl"
    s = ep.phase_a_rollout(p, tmp_path / "data", ROOT / "hasp" / "skills" / "search", out, policy=pol)
    pre = ep.read_trajectories(out.with_name("prefilter.jsonl"))
    main = ep.read_trajectories(out)
    assert len(pre) == len(items) and sum(t.em for t in pre) == 1.0
    assert {t.qid for t in main} == {it.id for it in items[1:]}  # the solved question skipped the PF pass
    assert all(t.variant == "pf" for t in main) and all(t.variant == "prefilter" for t in pre)
    assert all(not t.fired_skills() for t in pre)  # the cheap pass is plain ReAct: no PF ever ran
    assert s["prefilter"] == {"n": len(items), "em": pytest.approx(1 / len(items)), "f1": pytest.approx(1 / len(items)),
                              "failed": len(items) - 1, "skipped": 1}
    # without the switch: one PF-aware pass over the whole seed split, no prefilter file
    out2 = tmp_path / "epoch_1" / "rollout.jsonl"
    s2 = ep.phase_a_rollout(load_params(ROOT / "params.yaml", {"data.n_questions": 10}), tmp_path / "data",
                            ROOT / "hasp" / "skills" / "search", out2, policy=pol)
    assert s2["n"] == len(items) and "prefilter" not in s2 and not out2.with_name("prefilter.jsonl").exists()


def test_val_run_with_endpoint_failures_is_a_failed_run_the_phase_retries(epoch_files):
    """Val episodes the endpoint failed count as failed calls, not as EM 0: the candidate gets no
    delta (refused as a failed run, never as 'val EM drops'), and the gate phase reports the
    failed calls so the orchestrator does not cache it."""
    tmp_path, lib, ed = epoch_files

    def outage(library, label):
        return {"em": 0.0, "f1": 0.0, "n": 10, "failure": "10 episodes failed: endpoint error",
                "failed_calls": 10, "first_error": "LLMError: http 500"}

    s = ep.gate(ed, lib, _params(tmp_path), {"em": 0.5, "f1": 0.6, "n": 10}, outage)
    assert s["failed_calls"] == 10 and "endpoint error" in s["failure"] and s["val_pass"] == 0
    (g,) = json.loads((ed / "gate.json").read_text())
    assert g["delta_em"] is None and g["failed_calls"] == 10 and "http 500" in g["error"]
    _, _ = _admit(tmp_path, lib, ed)
    hist = {h["skill_id"]: h for h in json.loads((ed / "library" / "library_history.json").read_text())}
    reasons = hist["good_skill"]["reasons"]
    assert any("val run failed" in r for r in reasons) and not any("drops" in r for r in reasons)


# --------------------------------------------------------------------------- pinned anchors

def _anchors(tmp_path: Path, ids=("a1", "a2", "a3", "a4"), extra: str = "") -> Path:
    rows = [json.dumps({"id": i, "question": f"Where was {i} born?", "answers": ["Telvik"], "hops": 1,
                        "support": []}) for i in ids]
    path = tmp_path / "anchors.jsonl"
    path.write_text("\n".join(rows) + "\n" + extra)
    return path


def _second_good(ed: Path) -> None:
    """A second candidate that passes every cheap gate (beside good_skill)."""
    cands = json.loads((ed / "candidates.json").read_text())
    ep.write_json(cands + [_cand("flipper", _code("flipper")).to_dict()], ed / "candidates.json")
    ep.write_json(json.loads((ed / "validation.json").read_text()) + [_exec("flipper", True)], ed / "validation.json")
    ep.write_json(json.loads((ed / "reviews.json").read_text()) + [_review("flipper", "ACCEPT", 0.9)],
                  ed / "reviews.json")


def test_a_candidate_that_breaks_a_passing_anchor_is_refused_naming_it(epoch_files):
    from doubles import AnchorRunnerDouble

    tmp_path, lib, ed = epoch_files
    _second_good(ed)
    path = _anchors(tmp_path)
    p = _params(tmp_path, anchors=str(path))
    anchors = AnchorRunnerDouble(["a1", "a2", "a3", "a4"], fail={"a4"}, breaks={"flipper": {"a2", "a4"}})
    s = ep.gate(ed, lib, p, {"em": 0.5, "f1": 0.6, "n": 10}, ValRunnerDouble({"good_skill": 0.6, "flipper": 0.7}),
                anchors)
    # one library-alone run, then one per candidate the val gate passed
    assert anchors.calls[0] is None and sorted(anchors.calls[1:]) == ["flipper", "good_skill"]
    a = s["anchors"]
    assert (a["n"], a["passes_before"], a["refused"]) == (4, 3, {"flipper": ["a2"]})  # a4 failed before: not a break
    res = {r["skill_id"]: r for r in json.loads((ed / "anchors.json").read_text())}
    assert (res["flipper"]["passes_before"], res["flipper"]["passes_after"]) == (3, 2)
    assert res["flipper"]["delta"]["mean"] == pytest.approx(-0.25) and res["flipper"]["delta"]["n"] == 4
    assert res["good_skill"]["broken"] == [] and res["good_skill"]["passes_after"] == 3
    admitted, adm = _admit(tmp_path, lib, ed, anchors=str(path))
    assert admitted == {"good_skill"} and "anchors" in adm["gates"]
    hist = {h["skill_id"]: h for h in json.loads((ed / "library" / "library_history.json").read_text())}
    (why,) = [r for r in hist["flipper"]["reasons"] if r.startswith("anchors:")]
    assert "a2" in why and "a4" not in why and "n=4" in why and "passes 3 -> 2" in why


def test_anchors_run_with_the_val_gate_off_and_in_lite_mode(epoch_files):
    from doubles import AnchorRunnerDouble

    from hasp.evolve.gate import epoch_phases

    tmp_path, lib, ed = epoch_files
    path = _anchors(tmp_path)
    for evolve in ({"val_gate": False}, {"filtering": "none"}, {"mode": "lite"}):
        p = _params(tmp_path, anchors=str(path), **evolve)
        assert "gate" in epoch_phases(p.evolve) and active_gates(p.evolve)[-1] == "anchors"
        assert "gate" not in epoch_phases(_params(tmp_path, **evolve).evolve)  # without anchors nothing runs
    p = _params(tmp_path, anchors=str(path), val_gate=False)
    val = ValRunnerDouble({})
    anchors = AnchorRunnerDouble(["a1", "a2", "a3", "a4"], breaks={"good_skill": {"a1"}})
    s = ep.gate(ed, lib, p, {}, val, anchors)
    assert val.calls == [] and s["val_runs"] == 0 and s["anchors"]["refused"] == {"good_skill": ["a1"]}
    admitted, _ = _admit(tmp_path, lib, ed, anchors=str(path), val_gate=False)
    assert admitted == set()


@pytest.mark.parametrize("text,expected", [
    ("", "no anchor rows"),
    ('{"id": "a1", "question": "Q?", "answers": ["x"], "hops": 1}\n{"id": "a1", "question": "R?", "answers": ["y"], '
     '"hops": 1}\n', "anchors.jsonl:2: field 'id': duplicate anchor id 'a1' (first at line 1)"),
    ('{"id": "a1", "question": "Q?", "answers": ["x"], "hops": 1}\n{"id": "a2", "question": "R?", "hops": 1}\n',
     "anchors.jsonl:2: field 'answers' must be a non-empty list of strings"),
    ('{"id": "a1", "question": "Q?", "answers": ["x"], "hops": 1}\n{"id": "a2", "question": "R?", "answers": ["y"]\n',
     "anchors.jsonl:2: invalid JSON"),
])
def test_an_unusable_anchors_file_is_one_error_line_naming_file_line_and_field(tmp_path, text, expected):
    from hasp.evolve.anchors import AnchorError, load_anchors

    path = tmp_path / "anchors.jsonl"
    path.write_text(text)
    with pytest.raises(AnchorError) as e:
        load_anchors(path)
    assert expected in str(e.value) and str(path) in str(e.value) and "\n" not in str(e.value)


def test_cli_run_refuses_an_unusable_anchors_file_before_prefect_starts(tmp_path, capsys):
    import yaml

    from hasp.cli import main

    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["evolve"]["anchors"] = str(_anchors(tmp_path, ids=("a1", "a1")))
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    assert main(["evolve", "run", "--params", str(tmp_path / "params.yaml"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "anchors.jsonl:2: field 'id': duplicate anchor id 'a1'" in err[0]


def test_anchor_runner_answers_the_pinned_questions_with_the_real_agent(tmp_path):
    """The anchors run is the PF agent's real rollout over the anchor rows, on the epoch's corpus."""
    from hasp.domains.search.task import SearchTask

    p = load_params(ROOT / "params.yaml", {"data.n_questions": 10, "llm.max_concurrency": 1})
    prepare_data(p, tmp_path / "data")
    test = SearchTask.load(tmp_path / "data").questions("test")[:3]
    rows = [{"id": f"pin-{q.id}", "question": q.question, "answers": q.answers, "hops": q.hops,
             "support": q.support} for q in test]
    (tmp_path / "anchors.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    p = load_params(ROOT / "params.yaml", {"data.n_questions": 10, "llm.max_concurrency": 1,
                                           "evolve.anchors": str(tmp_path / "anchors.jsonl")})
    pol = AnsweringPolicyDouble({q.question: q.answers[0] for q in test}, correct=[test[0].question, test[2].question])
    run = ep.anchor_runner(p, tmp_path / "data", tmp_path / "runs", policy=pol)
    summary, ems = run(ROOT / "hasp" / "skills" / "search", "anchors_baseline")
    assert ems == {f"pin-{test[0].id}": 1.0, f"pin-{test[1].id}": 0.0, f"pin-{test[2].id}": 1.0}
    assert summary["n"] == 3 and set(pol.asked) == {q.question for q in test}
    assert ep.anchor_runner(_params(tmp_path), tmp_path / "data", tmp_path / "runs", policy=pol) is None
