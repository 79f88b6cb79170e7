"""Evolution from logged traces: reading HASP's own eval output and journals, the chat-log adapter, bad rows,
the label-free failure signals and their precision, ``hasp evolve import-traces`` and ``--from-traces``."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest
import yaml
from traj_builders import scripted_traj

from hasp.agent.rollout import read_trajectories, write_trajectories
from hasp.config import Params, TracesParams, load_params
from hasp.evolve.trace_signals import detect_signals, failure_set, signal_patterns, signal_precision
from hasp.evolve.traces import chat_to_trajectory, import_traces, read_traces
from hasp.records import Action, AuditEvent, StepRecord

ROOT = Path(__file__).resolve().parents[1]
SKILLS = ROOT / "hasp" / "skills" / "search"
DATA = Path(os.environ.get("HASP_SHARED_DATA", ROOT.parent / "shared" / "data"))
HOTPOT = DATA / "hotpotqa" / "hotpot_dev_distractor_sample_b.jsonl"
CFG = TracesParams()


def _chat(question="Who founded Brightwell Labs?", answers=("Ana Morro",), **extra):
    """A chat log: a search tool call, its result, a read that fails, then a plain-text answer."""
    return {"id": extra.pop("id", "c1"), "answers": list(answers), "messages": [
        {"role": "system", "content": "You are a helpful agent."},
        {"role": "user", "content": question},
        {"role": "assistant", "content": "I will search.", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "web_search", "arguments": json.dumps({"query": "Brightwell Labs founder"})}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "1. [d12] Brightwell Labs was founded by Ana Morro."},
        {"role": "assistant", "tool_calls": [
            {"id": "call_2", "type": "function", "function": {"name": "open", "arguments": '{"doc_id": "d99"}'}}]},
        {"role": "tool", "tool_call_id": "call_2", "content": '{"error": "no document d99"}'},
        {"role": "assistant", "content": "Ana Morro"}], **extra}


def _write(path: Path, rows: list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


# --------------------------------------------------------------------------- HASP's own eval output (real model)

@pytest.fixture(scope="module")
def real_eval(real_llm, tmp_path_factory):
    """``hasp eval``'s runner with the real embedded model: 2 hotpot questions, the react and pf arms."""
    from hasp.eval.datasets import load_eval_dataset, parse_dataset_spec
    from hasp.eval.runner import run_eval

    if not HOTPOT.exists():
        pytest.skip(f"benchmark sample {HOTPOT} not present")
    p = Params()
    params = p.model_copy(update={"agent": p.agent.model_copy(update={"max_steps": 3})})
    ds = load_eval_dataset(parse_dataset_spec(f"hotpotqa:{HOTPOT}"), params, limit=2)
    out = tmp_path_factory.mktemp("real_eval")
    res = run_eval(params, [ds], ["react", "pf"], policy=real_llm, library_root=SKILLS, out_dir=out / "eval",
                   progress=False)
    return out, res


def test_a_real_hasp_eval_output_folder_is_read_as_phase_a_trajectories(real_eval):
    out, res = real_eval
    read = read_traces(out / "eval", CFG)
    s = read.summary()
    assert (s["n_read"], s["n_bad"], s["n_with_gold"]) == (4, 0, 4)
    assert s["formats"] == {"hasp_trajectory": 4}
    assert sorted(Path(f).name for f in s["skipped_files"]) == ["pf.episodes.jsonl", "react.episodes.jsonl"]
    originals = {(r.traj.qid, c.variant): r.traj for c in res.cells for r in c.records}
    # the same question under the second arm gets its own qid: one qid per episode downstream
    assert len({t.qid for t in read.trajs}) == 4
    for t in read.trajs:
        o = originals[(t.qid.split("@")[0], t.variant)]
        assert (t.question, t.answers, t.em, t.prediction, len(t.steps)) == (o.question, o.answers, o.em,
                                                                             o.prediction, len(o.steps))
        assert all(s.audit is not None or s.parse_error for s in t.steps)
    rep = signal_precision(read.trajs, CFG)  # the signals against gold failure on real episodes
    flagged = [t for t in read.trajs if detect_signals(t, CFG)]
    assert (rep["n_labelled"], rep["gold_failures"]) == (4, sum(1 for t in read.trajs if t.em == 0))
    assert rep["per_signal"]["any"]["flagged"] == len(flagged)
    assert rep["per_signal"]["any"]["failed"] == sum(1 for t in flagged if t.em == 0)


def test_an_evaluation_journal_is_read_and_its_duplicate_of_the_cell_file_counted(real_eval, tmp_path):
    """A killed evaluation leaves ``<label>.journal.jsonl`` (header + records) beside the cell's files."""
    from hasp.eval.journal import CellJournal, journal_path

    out, res = real_eval
    cell = res.cells[0]
    j = CellJournal(journal_path(tmp_path, cell.dataset, cell.variant), "a-cell-key")
    for i, rec in enumerate(cell.records):
        j.append(i, rec)
    j.close()
    read = read_traces(tmp_path, CFG)
    assert read.summary()["formats"] == {"hasp_journal": len(cell.records)}
    assert [t.qid for t in read.trajs] == [r.traj.qid for r in cell.records]
    # the journal beside the cell file it became: each episode once
    both = tmp_path / "both"
    both.mkdir()
    (both / "a.journal.jsonl").write_bytes(journal_path(tmp_path, cell.dataset, cell.variant).read_bytes())
    (both / "b.jsonl").write_bytes(cell.trajectories_path.read_bytes())
    again = read_traces(both, CFG)
    assert (len(again.trajs), again.duplicates) == (len(cell.records), len(cell.records))


def test_phase_b_analyses_a_real_eval_imported_without_gold(real_eval, tmp_path):
    """--no-gold: the answers are dropped, and Phase B's failures are the label-free ones."""
    from hasp.evolve.epoch import analyse

    out, _ = real_eval
    summary = import_traces(out / "eval", tmp_path, CFG.model_copy(update={"gold": False}))
    assert summary["traces"]["n_with_gold"] == 0 and "em" not in summary
    trajs = read_trajectories(tmp_path / "rollout.jsonl")
    assert len(trajs) == 4 and all(t.answers == [] for t in trajs)
    p = load_params(ROOT / "params.yaml", {"evolve.min_cluster_size": 1, "evolve.summarizer": False})
    s = analyse(tmp_path / "rollout.jsonl", SKILLS, p, tmp_path)
    flagged = sum(1 for t in trajs if detect_signals(t, p.evolve.traces))
    assert s["failure_source"] == {"gold": 0, "label_free": flagged}
    assert s["analysed"] == flagged and s["signals"]["n_labelled"] == 0
    assert flagged >= 1  # the 135M policy at 3 steps: unparseable replies, no answer, answers without evidence
    cats = {c["category"] for c in json.loads((tmp_path / "failures.json").read_text())}
    fired = {x.kind for t in trajs for x in detect_signals(t, p.evolve.traces)}
    assert {f"trace_{k}" for k in fired} <= cats and s["clusters"] >= 1


# --------------------------------------------------------------------------- the chat-log adapter

def test_the_chat_adapter_maps_tool_calls_results_errors_and_the_answer():
    t = chat_to_trajectory(_chat(), CFG, "c1")
    acts = [(s.audit.a_final.type, s.audit.a_final.arg) for s in t.steps]
    assert acts == [("SEARCH", "Brightwell Labs founder"), ("READ", "d99"), ("FINAL", "Ana Morro")]
    assert t.steps[0].observation.startswith("1. [d12]") and t.steps[0].thought == "I will search."
    assert t.steps[1].audit.feedback["tool_error"] == "no document d99" and t.steps[1].audit.feedback["found"] is False
    assert (t.question, t.prediction, t.terminated, t.em, t.f1) == ("Who founded Brightwell Labs?", "Ana Morro",
                                                                    "final", 1.0, 1.0)
    assert [x.kind for x in detect_signals(t, CFG)] == ["tool_error"]


def test_the_chat_adapter_reads_hasp_action_text_and_a_question_field():
    row = {"question": "Where was Ana Morro born?", "answers": "Telvik", "messages": [
        {"role": "user", "content": "Question: Where was Ana Morro born?"},
        {"role": "assistant", "content": "Thought: look her up\nAction: SEARCH[Ana Morro]"},
        {"role": "user", "content": "Observation: 1. [d40] Ana Morro was born in Telvik."},
        {"role": "assistant", "content": "hmm"},
        {"role": "user", "content": "Reply with an action."},
        {"role": "assistant", "content": "Thought: done\nAction: FINAL[Lisbon]"}]}
    t = chat_to_trajectory(row, CFG, "q7")
    assert [s.audit.a_final.render() if s.audit else f"parse:{s.parse_error}" for s in t.steps] == [
        "SEARCH[Ana Morro]", "parse:no SEARCH[...], READ[...] or FINAL[...] action found", "FINAL[Lisbon]"]
    assert t.steps[0].observation.startswith("Observation: 1. [d40]") and t.steps[0].thought == "look her up"
    assert (t.answers, t.em) == (["Telvik"], 0.0)
    assert {x.kind for x in detect_signals(t, CFG)} == {"parse_failure"}


def test_a_chat_log_without_an_answer_is_unfinished():
    row = {"messages": [{"role": "user", "content": "q?"},
                        {"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": "search",
                                                                                      "arguments": "q"}}]},
                        {"role": "tool", "tool_call_id": "a", "content": "nothing useful"}]}
    t = chat_to_trajectory(row, CFG, "u")
    assert (t.terminated, t.prediction, t.answers) == ("unfinished", "", [])
    assert t.steps[0].audit.a_final == Action("SEARCH", "q")
    assert "no_answer" in {x.kind for x in detect_signals(t, CFG)}


# --------------------------------------------------------------------------- bad rows

def test_each_bad_row_is_one_line_naming_file_line_and_field_and_the_rest_are_read(tmp_path, caplog):
    good = scripted_traj("g1", [("SEARCH", "a"), ("FINAL", "x")], em=1.0, prediction="x").to_dict()
    no_audit = scripted_traj("b1", [("SEARCH", "a"), ("FINAL", "x")]).to_dict()
    no_audit["steps"][1]["audit"] = None
    unknown_tool = _chat(id="b2")
    unknown_tool["messages"][2]["tool_calls"][0]["function"]["name"] = "calculator"
    bad_role = _chat(id="b3")
    bad_role["messages"][3]["role"] = "robot"
    # the answer-only turn after the step budget has no audit record and no parse error, and is no bad row
    budget = scripted_traj("g2", [("SEARCH", "a"), ("SEARCH", "b")]).to_dict()
    budget["steps"].append({"index": 2, "raw_output": "Action: FINAL[x]", "thought": ""})
    budget.update(terminated="budget_final", prediction="x")
    f = _write(tmp_path / "logs" / "mixed.jsonl", [
        good, json.dumps(_chat(id="c-ok"))[:57], no_audit, unknown_tool, {"something": "else"}, bad_role,
        _chat(id="c-ok"), budget])
    with caplog.at_level(logging.WARNING, logger="hasp.evolve.traces"):
        read = read_traces(tmp_path / "logs", CFG)
    s = read.summary()
    assert [t.qid for t in read.trajs] == ["g1", "c-ok", "g2"]
    assert (s["n_read"], s["n_bad"], s["n_with_gold"]) == (3, 5, 3)
    assert s["bad_by_reason"] == {"no_audit": 1, "truncated_json": 1, "unknown_row": 1, "unmappable": 2}
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        f"{f}:2: field (line): truncated_json: not JSON: Invalid control character (character 57); a line of 57 "
        "characters",
        f"{f}:3: field steps[1].audit: no_audit: a step with neither an audit record nor a parse error",
        f"{f}:4: field messages[2].tool_calls[0].function.name: unmappable: tool 'calculator' is not in "
        "evolve.traces.tool_actions",
        f"{f}:5: field (row): unknown_row: neither a HASP trajectory (qid, steps), a journal record (record) nor a "
        "chat log (messages)",
        f"{f}:6: field messages[3].role: unmappable: unknown role 'robot' (expected one of ('system', 'developer', "
        "'user', 'assistant', 'tool', 'function'))"]
    assert s["bad"] == lines


def test_a_missing_source_or_one_without_trace_files_is_one_error(tmp_path):
    from hasp.evolve.traces import TraceFormatError

    with pytest.raises(TraceFormatError, match="no such trace file or folder"):
        read_traces(tmp_path / "nope", CFG)
    (tmp_path / "empty").mkdir()
    with pytest.raises(TraceFormatError, match="no \\*.jsonl trace file under it"):
        read_traces(tmp_path / "empty", CFG)


# --------------------------------------------------------------------------- the label-free signals

def _rewritten(qid: str) -> "object":
    """A PF rewrote an early FINAL into a READ; two steps later the agent gave that FINAL anyway."""
    t = scripted_traj(qid, [("SEARCH", "Ana"), ("READ", "d0"), ("SEARCH", "Ana birthplace"), ("FINAL", "Lisbon")])
    t.steps[1].audit.a_orig = Action("FINAL", "Lisbon")
    return t


CASES = {
    "repeated_action": scripted_traj("ra", [("SEARCH", "Ana Morro"), ("READ", "d0"), ("SEARCH", "ana  morro"),
                                            ("FINAL", "x")]),
    "repeated_query": scripted_traj("rq", [("SEARCH", "where was Ana Morro born"), ("READ", "d1"),
                                           ("SEARCH", "where was Ana Morro born city"), ("FINAL", "x")]),
    "final_without_evidence": scripted_traj("fe", [("FINAL", "x")]),
    "pf_override_undone": _rewritten("po"),
    "no_answer": scripted_traj("na", [("SEARCH", "a"), ("READ", "d1")]),
}


@pytest.mark.parametrize("kind", sorted([*CASES, "parse_failure", "tool_error"]))
def test_each_signal_fires_on_its_case_and_names_its_kind(kind):
    if kind == "parse_failure":
        t = scripted_traj("pf", [("SEARCH", "a"), ("FINAL", "x")])
        t.steps.insert(1, StepRecord(index=1, raw_output="I think", parse_error="no action found"))
    elif kind == "tool_error":
        t = scripted_traj("te", [("SEARCH", "a"), ("READ", "d7"), ("FINAL", "x")])
        t.steps[1].audit.feedback = {"found": False, "doc_id": "d7"}
    else:
        t = CASES[kind]
    fired = detect_signals(t, CFG)
    assert kind in [x.kind for x in fired]
    one = next(x for x in fired if x.kind == kind)
    assert one.qid == t.qid and one.detail


def test_a_clean_episode_fires_no_signal():
    t = scripted_traj("ok", [("SEARCH", "Ana Morro"), ("READ", "d0"), ("FINAL", "Telvik")], prediction="Telvik")
    assert detect_signals(t, CFG) == []


def test_the_signal_knobs_are_read():
    t = scripted_traj("r3", [("SEARCH", "a b"), ("SEARCH", "a b"), ("FINAL", "x")])
    assert "repeated_action" in {x.kind for x in detect_signals(t, CFG)}
    assert "repeated_action" not in {x.kind for x in detect_signals(t, CFG.model_copy(update={"repeat_threshold": 3}))}
    near = scripted_traj("nq", [("SEARCH", "a b c d"), ("SEARCH", "a b c e"), ("FINAL", "x")])
    assert "repeated_query" not in {x.kind for x in detect_signals(near, CFG)}  # Jaccard 3/5
    assert "repeated_query" in {x.kind for x in detect_signals(near, CFG.model_copy(update={"query_similarity": 0.6}))}
    only = CFG.model_copy(update={"signals": ["no_answer"]})
    assert [x.kind for x in detect_signals(CASES["repeated_action"], only)] == []


def test_signal_precision_against_gold_failure():
    """repeated_action flags three labelled episodes, two of which failed; the third failure it misses."""
    loop = [("SEARCH", "a"), ("SEARCH", "a"), ("FINAL", "x")]
    trajs = [scripted_traj("l1", loop), scripted_traj("l2", loop), scripted_traj("l3", loop, em=1.0),
             scripted_traj("f1", [("SEARCH", "a"), ("READ", "d1"), ("FINAL", "y")]),
             scripted_traj("ok", [("SEARCH", "a"), ("READ", "d1"), ("FINAL", "x")], em=1.0),
             scripted_traj("nogold", loop, answers=())]
    rep = signal_precision(trajs, CFG)
    assert (rep["n_labelled"], rep["gold_failures"]) == (5, 3)
    assert rep["per_signal"]["repeated_action"] == {"flagged": 3, "failed": 2, "precision": 0.6667, "recall": 0.6667}
    assert rep["per_signal"]["tool_error"] == {"flagged": 0, "failed": 0, "precision": None, "recall": 0.0}


def test_the_failure_set_is_gold_where_gold_exists_and_label_free_elsewhere():
    loop = [("SEARCH", "a"), ("SEARCH", "a"), ("FINAL", "x")]
    clean = [("SEARCH", "a"), ("READ", "d1"), ("FINAL", "x")]
    trajs = [scripted_traj("g-fail", clean), scripted_traj("g-ok-loop", loop, em=1.0),
             scripted_traj("u-loop", loop, answers=()), scripted_traj("u-clean", clean, answers=())]
    err = scripted_traj("u-error", loop, answers=())
    err.terminated = "error"
    fs = failure_set([*trajs, err], CFG)
    assert [t.qid for t in fs.failed] == ["g-fail", "u-loop"] and fs.summary() == {"gold": 1, "label_free": 1}
    pats = signal_patterns(fs.failed, fs.signals)
    assert [(p.category, p.qid, p.source) for p in pats] == [("trace_repeated_action", "u-loop", "trace_signal")]
    assert pats[0].evidence["failing_steps"][0]["step"] == 1


# --------------------------------------------------------------------------- the CLI

def test_hasp_evolve_import_traces_writes_the_rollout_and_the_summary(tmp_path):
    from hasp.cli import main

    good = scripted_traj("g1", [("SEARCH", "a"), ("SEARCH", "a"), ("FINAL", "x")]).to_dict()
    _write(tmp_path / "in" / "eval.jsonl", [good, '{"qid": "torn", "ste'])
    _write(tmp_path / "in" / "chat.jsonl", [_chat(), _chat(id="c2", answers=())])
    assert main(["evolve", "import-traces", str(tmp_path / "in"), "--out", str(tmp_path / "out"),
                 "--params", str(ROOT / "params.yaml")]) == 0
    trajs = read_trajectories(tmp_path / "out" / "rollout.jsonl")
    assert sorted(t.qid for t in trajs) == ["c1", "c2", "g1"]
    s = json.loads((tmp_path / "out" / "traces_summary.json").read_text())
    assert (s["traces"]["n_read"], s["traces"]["n_bad"], s["traces"]["n_with_gold"]) == (3, 1, 2)
    assert s["traces"]["bad_by_reason"] == {"truncated_json": 1}
    assert (s["n_scored"], s["em"]) == (2, 0.5)
    # g1 failed by gold, c2 (no gold) by its tool error; repeated_action flags one labelled failure
    assert s["signals"]["failure_source"] == {"gold": 1, "label_free": 1}
    assert s["signals"]["per_signal"]["repeated_action"]["precision"] == 1.0
    assert main(["evolve", "import-traces", str(tmp_path / "missing"), "--out", str(tmp_path / "o2")]) == 2


def test_import_traces_with_the_judge_reports_its_precision_against_gold(tmp_path, capsys):
    """--judge asks the teacher endpoint (here a double that finds every answer but 'x' supported) about
    each answered trace and reports the judge beside the label-free signals."""
    from doubles import OpenAIEndpointDouble

    from hasp.cli import main

    rows = [scripted_traj("g1", [("SEARCH", "a"), ("FINAL", "x")], prediction="x").to_dict(),
            scripted_traj("g2", [("SEARCH", "a"), ("FINAL", "Ana")], prediction="Ana", em=1.0).to_dict(),
            scripted_traj("g3", [("SEARCH", "a"), ("FINAL", "y")], prediction="y").to_dict()]
    _write(tmp_path / "in" / "eval.jsonl", rows)
    verdict = (lambda body: "UNSUPPORTED" if "Final answer: x" in body["messages"][-1]["content"] else "SUPPORTED")
    with OpenAIEndpointDouble(reply=verdict) as judge:
        params = yaml.safe_load((ROOT / "params.yaml").read_text())
        params["teacher"].update(base_url=judge.base_url, model="judge-double")
        (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
        assert main(["evolve", "import-traces", str(tmp_path / "in"), "--out", str(tmp_path / "out"), "--judge",
                     "--params", str(tmp_path / "params.yaml")]) == 0
    s = json.loads((tmp_path / "out" / "traces_summary.json").read_text())["signals"]
    assert s["judge"] == {"asked": 3, "unsupported": 1, "errors": 0}
    assert s["per_signal"]["judge"] == {"flagged": 1, "failed": 1, "precision": 1.0, "recall": 0.5}
    assert "judge: 3 asked, 1 unsupported, 0 unusable; against gold (EM 0): 1 flagged, precision 1.0, recall 0.5" \
        in capsys.readouterr().out


# --------------------------------------------------------------------------- the flow

def test_evolve_run_from_traces_runs_phases_b_to_h_on_the_logged_traces(tmp_path, prefect_harness):
    """Phase A reads the traces (no policy call), Phase B clusters their label-free failures, the
    other phases run as usual; a changed trace file changes Phase A's key and is read again."""
    from doubles import flow_with_doubles

    from hasp.flows.evolve import evolve_flow

    mp = pytest.MonkeyPatch()
    mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    try:
        doubles = flow_with_doubles(mp, tmp_path, SKILLS)
        loop = [("SEARCH", "founder company"), ("SEARCH", "founder company"), ("FINAL", "Nobody")]
        logs = _write(tmp_path / "logs" / "run.jsonl",
                      [scripted_traj(f"t{i}", loop, answers=()).to_dict() for i in range(3)] + [_chat()])
        params = yaml.safe_load((ROOT / "params.yaml").read_text())
        params["data"].update(n_questions=8)
        params["agent"].update(max_steps=3)
        params["llm"].update(base_url="http://127.0.0.1:9/v1", model="traces-double-model", max_concurrency=2)
        params["evolve"].update(max_candidates=2, min_cluster_size=1, proposal_format="code")
        params["train"].update(enabled=False)
        params["tracking"]["experiment"] = "hasp-traces-test"
        (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))

        def run():
            return evolve_flow(epochs=1, params_path=str(tmp_path / "params.yaml"), out_root=str(tmp_path / "out"),
                               library=str(tmp_path / "skills" / "search"), final_eval=False,
                               traces=str(tmp_path / "logs"), traces_gold=False)

        res = run()
        ep = tmp_path / "out" / "epoch_0"
        a, b = res["epochs"][0]["rollout"], res["epochs"][0]["analyse"]
        assert a["traces"]["n_read"] == 4 and a["traces"]["n_with_gold"] == 0
        assert len(read_trajectories(ep / "rollout.jsonl")) == 4
        assert b["failure_source"] == {"gold": 0, "label_free": 4} and b["clusters"] >= 1
        assert (a["spend"]["calls"], a["spend"]["tokens"]) == (0, 0)  # no model ran; logged tokens are apart
        assert res["epochs"][0]["propose"]["proposed"] >= 1 and "admit" in res["epochs"][0]
        assert doubles["student"] is not None
        _write(tmp_path / "logs" / "more.jsonl", [scripted_traj("t9", loop, answers=()).to_dict()])
        again = run()
        assert again["epochs"][0]["rollout"]["traces"]["n_read"] == 5
        assert len(read_trajectories(ep / "rollout.jsonl")) == 5
    finally:
        mp.undo()


# --------------------------------------------------------------------------- MLflow traces

def test_hasp_episode_traces_in_mlflow_are_read_back_and_a_foreign_trace_is_one_bad_line(tmp_path, monkeypatch,
                                                                                        caplog):
    import time

    import mlflow

    from hasp.evolve.traces import source_key
    from hasp.track.traces import log_episode_trace

    monkeypatch.chdir(tmp_path)
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    try:
        mlflow.set_experiment("hasp-logged")
        rewritten = _rewritten("po")
        rewritten.steps[1].audit.fired = [{"skill_id": "read-first", "type": "MODIFY_ACTION", "reason": "no read",
                                           "applied": True}]
        unparsed = scripted_traj("pe", [("SEARCH", "a"), ("FINAL", "x")], em=1.0, prediction="x")
        unparsed.steps.insert(1, StepRecord(index=1, raw_output="hmm", parse_error="no action found"))
        unparsed.steps[2].index = 2
        for t in (rewritten, unparsed):
            log_episode_trace(mlflow, t, start_ns=time.time_ns(), dataset="train", variant="pf")
        foreign = mlflow.start_span_no_context("chat", inputs={"q": "hi"})
        foreign.end(outputs={"a": "hello"})
        mlflow.flush_trace_async_logging()
        key = source_key("mlflow:hasp-logged")
        with caplog.at_level(logging.WARNING, logger="hasp.evolve.traces"):
            read = read_traces("mlflow:hasp-logged", CFG)
        s = read.summary()
        assert (s["n_read"], s["n_bad"], s["formats"]) == (2, 1, {"mlflow_trace": 2})
        assert [r.getMessage() for r in caplog.records] == [read.bad[0].line_text()]
        assert read.bad[0].reason == "unmappable" and "root.attributes.qid" in read.bad[0].field
        got = {t.qid: t for t in read.trajs}
        for orig in (rewritten, unparsed):
            t = got[orig.qid]
            assert (t.question, t.answers, t.em, t.prediction) == (orig.question, orig.answers, orig.em, orig.prediction)
            assert [(s.audit.a_orig, s.audit.a_final, s.observation) if s.audit else s.parse_error for s in t.steps] == [
                (s.audit.a_orig, s.audit.a_final, s.observation) if s.audit else s.parse_error for s in orig.steps]
        assert got["po"].steps[1].audit.fired[0]["skill_id"] == "read-first"
        assert got["po"].steps[0].audit.feedback == {"n_hits": 1, "hit_ids": ["d0"]}
        assert "pf_override_undone" in {x.kind for x in detect_signals(got["po"], CFG)}
        log_episode_trace(mlflow, unparsed, start_ns=time.time_ns(), dataset="train", variant="pf")
        mlflow.flush_trace_async_logging()
        assert source_key("mlflow:hasp-logged") != key  # a new trace changes Phase A's key
        from hasp.evolve.traces import TraceFormatError

        with pytest.raises(TraceFormatError, match="mlflow:nope: no such MLflow experiment"):
            read_traces("mlflow:nope", CFG)
    finally:
        mlflow.set_tracking_uri(None)


def test_the_dvc_rollout_stage_reads_the_traces_named_in_params(tmp_path):
    """``evolve.traces.source`` in params.yaml: ``hasp evolve rollout`` (dvc.yaml's stage) writes the traces."""
    from hasp.cli import main

    logs = _write(tmp_path / "logs.jsonl", [_chat(), _chat(id="c2")])
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["evolve"]["traces"]["source"] = str(logs)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    assert main(["evolve", "rollout", "--epoch-dir", str(tmp_path / "epoch_0"), "--library", str(SKILLS),
                 "--params", str(tmp_path / "params.yaml")]) == 0
    assert [t.qid for t in read_trajectories(tmp_path / "epoch_0" / "rollout.jsonl")] == ["c1", "c2"]
    s = json.loads((tmp_path / "epoch_0" / "summary_rollout.json").read_text())
    assert s["traces"]["n_read"] == 2 and s["spend"]["calls"] == 0


class _JudgeDouble:
    """A judge endpoint double: its replies in turn (an exception is raised)."""

    def __init__(self, replies):
        self.replies, self.seen = list(replies), []

    def chat(self, messages, **kw):
        from doubles import ReplyDouble

        self.seen.append(messages)
        self.kw = kw
        r = self.replies.pop(0)
        if isinstance(r, Exception):
            raise r
        return ReplyDouble(r, 5, 1)


def test_the_trace_judge_is_a_signal_for_traces_without_gold_and_is_measured_on_those_with_it():
    from hasp.evolve.trace_judge import judge_traces

    cfg = TracesParams(judge=True)
    no_gold = [scripted_traj(q, [("SEARCH", "Ana"), ("READ", "d1"), ("FINAL", "Lisbon")], answers=(),
                             prediction="Lisbon") for q in ("n1", "n2", "n3")]
    gold = [scripted_traj("g1", [("SEARCH", "Ana"), ("READ", "d1"), ("FINAL", "x")], em=1.0, prediction="x"),
            scripted_traj("g0", [("SEARCH", "Ana"), ("READ", "d1"), ("FINAL", "y")], em=0.0, prediction="y")]
    silent = scripted_traj("n4", [("SEARCH", "Ana")], answers=())  # no answer: the judge is not asked
    judge = _JudgeDouble(["UNSUPPORTED", "Supported.", "maybe?", "SUPPORTED", "UNSUPPORTED"])
    judged = judge_traces([*no_gold, silent, *gold], judge)
    assert len(judge.seen) == 5 and "Final answer: Lisbon" in judge.seen[0][-1]["content"]
    assert judge.kw["grammar"] == 'root ::= "SUPPORTED" | "UNSUPPORTED"\n'  # one of the two words, where taken
    assert "step 1: text 1" in judge.seen[0][-1]["content"]  # what the agent saw
    assert judged.summary() == {"asked": 5, "unsupported": 2, "errors": 1,
                                "first_error": "n3: unparseable judge reply 'maybe?'"}
    found = failure_set([*no_gold, *gold], cfg, judged.signals)
    assert {t.qid for t in found.failed} >= {"n1", "g0"} and "n2" not in {t.qid for t in found.failed}
    prec = signal_precision([*no_gold, *gold], cfg, found.signals)["per_signal"]["judge"]
    assert prec == {"flagged": 1, "failed": 1, "precision": 1.0, "recall": 1.0}  # g0 judged unsupported, EM 0
    patterns = signal_patterns(found.failed, found.signals)
    assert any(p.category == "trace_judge" and p.qid == "n1" for p in patterns)
    down = judge_traces(no_gold[:1], _JudgeDouble([TimeoutError("slow")]))
    assert down.errors == 1 and not down.signals and "TimeoutError" in down.first_error
