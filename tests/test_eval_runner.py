"""`hasp eval`: variants × datasets on real benchmark samples, MLflow parent/nested runs, traces with
PF spans, the PF-trigger plot, the LLM judge, teacher-snippet mode and dataset-spec errors.

Policies and teachers are test doubles (named so); the datasets are the real samples in
``../shared/data`` (tests skip with a reason when it is absent); MLflow is a real sqlite store in tmp.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest
from doubles import (AnsweringPolicyDouble, FailingTeacherDouble, JudgeTeacherDouble, RoleAwareEndpointDouble,
                     SelectiveOutageEndpointDouble, SnippetTeacherDouble)

from hasp.config import Params
from hasp.domains.search.retriever import BM25Retriever
from hasp.domains.search.teacher_snippets import READ_DISABLED, TeacherSnippetEnvironment
from hasp.domains.search.tools import SearchEnvironment
from hasp.eval.datasets import (
    DatasetSpecError,
    load_eval_dataset,
    parse_dataset_spec,
    parse_dataset_specs,
)
from hasp.episode.judge import judge_answer, parse_verdict
from hasp.eval.runner import run_eval

ROOT = Path(__file__).resolve().parents[1]
SKILLS = ROOT / "hasp" / "skills" / "search"
DATA = Path(os.environ.get("HASP_SHARED_DATA", ROOT.parent / "shared" / "data"))
HOTPOT = "hotpotqa/hotpot_dev_distractor_sample_b.jsonl"
MUSIQUE = "musique/musique_ans_dev_sample.jsonl"


def _data(rel: str) -> Path:
    path = DATA / rel
    if not path.exists():
        pytest.skip(f"benchmark sample {path} not present (the shared data folder is only on the dev/CI machine)")
    return path


# ----------------------------------------------------------------------------- helpers
def _params(**eval_overrides) -> Params:
    p = Params()
    return p.model_copy(update={
        "llm": p.llm.model_copy(update={"max_concurrency": 4}),
        "agent": p.agent.model_copy(update={"max_steps": 5}),
        "eval": p.eval.model_copy(update=eval_overrides)})


def _sets(params, limit=3, specs=(f"hotpotqa:{HOTPOT}", f"musique:{MUSIQUE}")):
    out = []
    for s in specs:
        kind, _, rel = s.partition(":")
        out.append(load_eval_dataset(parse_dataset_spec(f"{kind}:{_data(rel)}"), params, limit=limit))
    return out


def _gold(sets):
    return {q.question: q.answers[0] for ds in sets for q in ds.questions}


@pytest.fixture()
def mlflow_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default artifact root is relative to the working directory
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    return tmp_path


# ----------------------------------------------------------------------------- runner + MLflow
@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    """One evaluation (2 real datasets × react/pf) logged to a real sqlite MLflow store."""
    import mlflow

    from hasp.eval.tracking import log_eval_runs

    tmp = tmp_path_factory.mktemp("eval")
    mp = pytest.MonkeyPatch()
    mp.chdir(tmp)
    mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp / 'mlflow.db'}")
    params = _params()
    sets = _sets(params)
    correct = {ds.questions[0].question for ds in sets} | {ds.questions[1].question for ds in sets}
    policy = AnsweringPolicyDouble(_gold(sets), correct)
    res = run_eval(params, sets, ["react", "pf"], policy=policy, library_root=SKILLS, out_dir=tmp / "out",
                   progress=False)
    runs = log_eval_runs(res, experiment="eval-test", run_name="eval-unit", params={"model": "double"},
                         cell_params={ds.name: {"dataset_kind": ds.spec.kind} for ds in sets})
    yield {"res": res, "runs": runs, "sets": sets, "tmp": tmp, "mlflow": mlflow, "correct": correct}
    mp.undo()


def policy_correct(logged):
    return logged["correct"]


def test_runner_writes_cells_and_scores(logged):
    res, sets, tmp = logged["res"], logged["sets"], logged["tmp"]
    m = res.metrics()
    assert set(m) == {ds.name for ds in sets} and all(set(v) == {"react", "pf"} for v in m.values())
    for ds in sets:
        react, pf = m[ds.name]["react"], m[ds.name]["pf"]
        # the double answers 2 of 3 questions with the gold answer and FINALs at once
        assert react["n"] == 3 and react["em"] == pytest.approx(2 / 3) and react["mean_steps"] == 1
        assert react["pf_fires_total"] == 0 and react["pf_action_share"] == 0.0
        # with PFs the premature FINAL is rewritten (action level), so episodes get longer
        assert pf["pf_fires_total"] > 0 and pf["pf_fires"].get("premature_final", 0) == 3
        assert pf["pf_action_fires"] >= 3
        assert pf["pf_action_share"] + pf["pf_context_share"] == pytest.approx(1.0)
        assert pf["mean_steps"] > react["mean_steps"]
        assert pf["prompt_tokens"] == 11 * sum(1 for c in res.cells if c.dataset == ds.name and c.variant == "pf"
                                               for r in c.records for _ in r.traj.steps)
        assert pf["teacher_tokens"] == 0 and pf["wall_s"] > 0
        rows = [json.loads(x) for x in (tmp / "out" / ds.name / "pf.jsonl").read_text().splitlines()]
        assert [r["qid"] for r in rows] == [q.id for q in ds.questions]
        assert (tmp / "out" / ds.name / "pf.episodes.jsonl").exists()
        # EM per hop count: every scored episode in exactly one hop group, means agree with the cell's EM
        hops = react["em_by_hops"]
        want = {}
        for q in ds.questions:
            want.setdefault(str(q.hops), []).append(q.question in policy_correct(logged))
        assert {h: m["n"] for h, m in hops.items()} == {h: len(v) for h, v in want.items()}
        assert sum(m["mean"] * m["n"] for m in hops.values()) == pytest.approx(react["em"] * react["n_scored"], abs=1e-3)
        assert all(m["ci95"][0] <= m["mean"] <= m["ci95"][1] for m in hops.values())
    assert json.loads((tmp / "out" / "metrics.json").read_text())[sets[0].name]["react"]["n"] == 3


def test_mlflow_parent_nested_runs_metrics_and_plot(logged):
    mlflow, runs = logged["mlflow"], logged["runs"]
    client = mlflow.tracking.MlflowClient()
    parent = client.get_run(runs["parent"])
    assert len(runs["children"]) == 4
    for key, rid in runs["children"].items():
        child = client.get_run(rid)
        ds, variant = key.split("/")
        assert child.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert child.data.params["variant"] == variant and child.data.params["dataset"] == ds
        assert child.data.params["model"] == "double" and child.data.params["dataset_kind"] in ("hotpotqa", "musique")
        for k in ("em", "f1", "mean_steps", "prompt_tokens", "teacher_tokens", "pf_action_share", "wall_s"):
            assert k in child.data.metrics, k
        if variant == "pf":
            assert child.data.metrics["fires.premature_final"] == 3
            assert child.data.metrics["correct_via_vocabulary_rewrite"] == 0  # no declared rewrite here
        assert child.data.metrics["extractor_ceiling_n"] == 3  # every question has its supporting paragraphs
        assert child.data.metrics["extractor_ceiling_lo"] <= child.data.metrics["extractor_ceiling_em"]
        hop_keys = [k for k in child.data.metrics if k.startswith("em_hops_") and not k.endswith(("_lo", "_hi"))]
        assert hop_keys and all(f"{k}_lo" in child.data.metrics and f"n_hops_{k[8:]}" in child.data.metrics
                                for k in hop_keys)
    arts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"comparison.csv", "comparison.md", "metrics.json", "plots"} <= arts
    png = Path(client.download_artifacts(parent.info.run_id, "plots/pf_triggers.png", str(logged["tmp"])))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    md = Path(client.download_artifacts(parent.info.run_id, "comparison.md", str(logged["tmp"]))).read_text()
    # header + rule, the 4 cells, and per dataset the extractor's row on gold support
    assert md.count("\n") == 2 + 4 + 2 and "| pf |" in md and md.count("| extractor \\| gold support |") == 2


def test_traces_carry_real_timestamps_and_pf_spans(logged):
    mlflow, runs, res = logged["mlflow"], logged["runs"], logged["res"]
    assert runs["traces"] == 12
    key = next(k for k in runs["children"] if k.endswith("/pf"))
    traces = mlflow.search_traces(run_id=runs["children"][key], return_type="list")
    assert len(traces) == 3
    cell = next(c for c in res.cells if f"{c.dataset}/{c.variant}" == key)
    starts = {r.traj.qid: r.start_ns for r in cell.records}
    for tr in traces:
        spans = tr.data.spans
        root = next(s for s in spans if s.parent_id is None)
        qid = root.attributes["qid"]
        assert root.start_time_ns == starts[qid]  # anchored on the episode's real start
        assert all(root.start_time_ns <= s.start_time_ns <= s.end_time_ns <= root.end_time_ns for s in spans)
        steps = sorted((s for s in spans if s.name.startswith("step ")), key=lambda s: s.start_time_ns)
        assert [s.end_time_ns <= n.start_time_ns for s, n in zip(steps, steps[1:])] == [True] * (len(steps) - 1)
        pf_spans = [s for s in spans if s.name.startswith("pf:")]
        assert pf_spans, "every pf episode starts with a premature FINAL that a PF rewrites"
        first = next(s for s in pf_spans if s.attributes["skill_id"] == "premature_final")
        assert first.attributes["type"] == "MODIFY_ACTION" and first.attributes["applied"] is True
        assert first.attributes["reason"]
        assert tr.info.tags["hasp.variant"] == "pf"


# ----------------------------------------------------------------------------- judge
@pytest.mark.parametrize("text,verdict", [
    ("CORRECT", True), ("  incorrect.\n", False), ("**CORRECT**", True), ("'INCORRECT'", False),
    ("CORRECT, because it matches", None), ("I think CORRECT", None), ("", None), ("yes", None),
])
def test_judge_parsing_is_strict(text, verdict):
    assert parse_verdict(text) is verdict


def test_judge_errors_are_counted_not_wrong(mlflow_tmp):
    params = _params()
    sets = _sets(params, limit=4, specs=(f"hotpotqa:{HOTPOT}",))
    qs = sets[0].questions
    correct = {q.question for q in qs[:3]}
    policy = AnsweringPolicyDouble(_gold(sets), correct)
    # the double's chatty reply hits question 0's (correct) answer, the exception question 1's
    judge = JudgeTeacherDouble(chatty={qs[0].answers[0]}, broken={qs[1].answers[0]})
    res = run_eval(params, sets, ["react"], policy=policy, library_root=SKILLS, out_dir=mlflow_tmp / "o",
                   teacher=judge, judge=True, progress=False)
    s = res.cells[0].summary
    assert s["judge_errors"] == 2 and s["judge_n"] == 2
    assert s["judge_acc"] == pytest.approx(0.5)  # q2 correct, q3 wrong; errors are not in the denominator
    assert s["em"] == pytest.approx(0.75)
    verdicts = [r.judge for r in res.cells[0].records]
    assert verdicts[0].correct is None and "unparseable" in verdicts[0].error
    assert verdicts[1].correct is None and "TimeoutError" in verdicts[1].error


def test_judge_skips_empty_answers_and_needs_a_teacher(mlflow_tmp):
    judge = JudgeTeacherDouble()
    v = judge_answer(judge, "Who?", ["A"], "  ")
    assert v.correct is False and judge.calls == 0
    sets = _sets(_params(), limit=1, specs=(f"hotpotqa:{HOTPOT}",))
    with pytest.raises(ValueError, match="--judge need.* a teacher: set teacher.embedded"):
        run_eval(_params(), sets, ["react"], policy=AnsweringPolicyDouble({}, set()), library_root=None,
                 out_dir=mlflow_tmp, judge=True)


def test_teacher_goes_only_to_teacher_variants(mlflow_tmp, monkeypatch):
    """Episodes run through the harness; only a variant with ``use_teacher`` gets the teacher."""
    from hasp.agent.harness import Harness

    seen = {}
    real = Harness.episode

    def spy(self, question, teacher=None):
        seen.setdefault(self.variant.name, set()).add(teacher)
        return real(self, question, teacher)

    monkeypatch.setattr(Harness, "episode", spy)
    sets = _sets(_params(), limit=2, specs=(f"hotpotqa:{HOTPOT}",))
    teacher = SnippetTeacherDouble()
    run_eval(_params(), sets, ["pf", "pf_teacher"], policy=AnsweringPolicyDouble(_gold(sets), set()),
             library_root=SKILLS, out_dir=mlflow_tmp, teacher=teacher, progress=False)
    assert seen == {"pf": {None}, "pf_teacher": {teacher}}
    with pytest.raises(ValueError, match="variant pf_teacher need"):
        run_eval(_params(), sets, ["pf_teacher"], policy=AnsweringPolicyDouble({}, set()),
                 library_root=SKILLS, out_dir=mlflow_tmp, progress=False)


# ----------------------------------------------------------------------------- teacher snippets
@pytest.fixture(scope="module")
def hotpot_retriever():
    from hasp.domains.search.datasets import load_hotpotqa

    qs, corpus = load_hotpotqa(_data(HOTPOT))
    return qs, BM25Retriever.from_corpus(corpus)


def test_snippet_mode_search_is_teacher_written_and_read_disabled(hotpot_retriever):
    qs, retr = hotpot_retriever
    teacher = SnippetTeacherDouble()
    env = TeacherSnippetEnvironment(SearchEnvironment(retr, top_k=3), teacher, max_tokens=50, doc_chars=300)
    obs, hits = env.search(qs[0].question)
    assert len(hits) == 3 and obs.startswith("Summary of the top 3 results: Relevant: ")
    assert all(h.title in obs for h in hits) and all(f"[{h.id}]" in obs for h in hits)
    (messages, max_tokens), = teacher.requests
    assert max_tokens == 50
    doc0 = retr.get(hits[0].id)["contents"].split("\n", 1)[1]
    assert doc0[:100] in messages[-1]["content"]  # the teacher sees the retrieved document text
    text, doc = env.read(hits[0].id)
    assert text == READ_DISABLED and doc is None
    assert env.stats.calls == 1 and env.stats.fallbacks == 0


def test_snippet_length_is_bounded(hotpot_retriever):
    qs, retr = hotpot_retriever
    env = TeacherSnippetEnvironment(SearchEnvironment(retr), SnippetTeacherDouble("word " * 2000), max_tokens=40)
    obs, _ = env.search(qs[1].question)
    snippet = obs.split("\nSources:")[0]
    assert len(snippet) <= len("Summary of the top 3 results: ") + 40 * 5 + 1


@pytest.mark.parametrize("teacher", [FailingTeacherDouble(RuntimeError("429 Too Many Requests (double)")), SnippetTeacherDouble("   ")])
def test_snippet_falls_back_to_plain_results(hotpot_retriever, teacher, caplog):
    qs, retr = hotpot_retriever
    plain = SearchEnvironment(retr, top_k=3).search(qs[2].question)[0]
    env = TeacherSnippetEnvironment(SearchEnvironment(retr, top_k=3), teacher)
    with caplog.at_level(logging.WARNING, logger="hasp.domains.search.teacher_snippets"):
        obs, hits = env.search(qs[2].question)
    assert obs == plain and hits
    assert env.stats.fallbacks == 1 and env.stats.errors
    assert "showing plain search results" in caplog.text


def test_runner_counts_snippet_fallbacks(mlflow_tmp):
    params = _params(teacher_snippets=True)
    sets = _sets(params, limit=2, specs=(f"hotpotqa:{HOTPOT}",))
    policy = AnsweringPolicyDouble(_gold(sets), set())
    res = run_eval(params, sets, ["pf"], policy=policy, library_root=SKILLS, out_dir=mlflow_tmp,
                   teacher=FailingTeacherDouble(RuntimeError("429 Too Many Requests (double)")), progress=False)
    s = res.cells[0].summary
    assert s["snippet_calls"] >= 2 and s["snippet_fallbacks"] == s["snippet_calls"]  # premature_final searches
    assert s["n"] == 2 and s["episode_errors"] == 0
    ok = run_eval(params, sets, ["pf"], policy=policy, library_root=SKILLS, out_dir=mlflow_tmp,
                  teacher=SnippetTeacherDouble(), progress=False).cells[0]
    assert ok.summary["snippet_fallbacks"] == 0
    obs = [s.observation for r in ok.records for s in r.traj.steps if s.audit and s.audit.a_final.type == "SEARCH"]
    assert obs and all(o.startswith("Summary of the top") for o in obs)


# ----------------------------------------------------------------------------- episode failures
def test_failed_episodes_are_counted_and_all_failed_raises(mlflow_tmp):
    params = _params()
    sets = _sets(params, limit=3, specs=(f"hotpotqa:{HOTPOT}",))
    qs = sets[0].questions
    policy = AnsweringPolicyDouble(_gold(sets), {q.question for q in qs}, fail={qs[1].question})
    res = run_eval(params, sets, ["react"], policy=policy, library_root=None, out_dir=mlflow_tmp, progress=False)
    s = res.cells[0].summary
    # the failed episode (endpoint down) is not scored: EM is over the 2 that ran, the failure beside it
    assert (s["n"], s["n_scored"], s["n_failed"], s["episode_errors"]) == (3, 2, 1, 1)
    assert s["em"] == pytest.approx(1.0) and s["pf_errors"] == 0 and s["answered_rate"] == pytest.approx(1.0)
    assert res.cells[0].records[1].traj.terminated == "error"
    down = AnsweringPolicyDouble(_gold(sets), set(), fail={q.question for q in qs})
    with pytest.raises(RuntimeError, match="all 3 episodes failed.*ConnectionError"):
        run_eval(params, sets, ["react"], policy=down, library_root=None, out_dir=mlflow_tmp, progress=False)


def test_hung_endpoint_ends_at_the_episode_deadline_as_a_failed_episode(mlflow_tmp):
    """One question's model call hangs (the client's own timeout is 300 s): the episode's 2 s wall
    budget ends it within seconds, and it is counted as an infrastructure failure, not as EM 0."""
    import time

    from hasp.llm.client import LLMClient, LLMConfig

    params = _params()
    params = params.model_copy(update={"harness": params.harness.model_copy(update={"timeout_seconds": 2.0})})
    (ds,) = _sets(params, limit=2, specs=(f"hotpotqa:{HOTPOT}",))
    hung, ok = ds.questions
    with SelectiveOutageEndpointDouble([hung.question], fault="hang") as ep:
        client = LLMClient(LLMConfig(base_url=ep.base_url, model="policy-double", timeout_s=300.0, max_retries=3))
        t0 = time.monotonic()
        res = run_eval(params, [ds], ["react"], policy=client, library_root=None, out_dir=mlflow_tmp, progress=False)
        took = time.monotonic() - t0
    assert took < 10, took
    s = res.cells[0].summary
    assert (s["n"], s["n_scored"], s["n_failed"]) == (2, 1, 1)
    bad = next(r for r in res.cells[0].records if r.traj.qid == hung.id)
    assert bad.traj.terminated == "error" and "deadline" in bad.traj.pf_errors[-1]


# ----------------------------------------------------------------------------- dataset specs
def test_dataset_spec_errors(tmp_path):
    with pytest.raises(DatasetSpecError, match="unknown kind 'squad'"):
        parse_dataset_spec("squad:/data/x.jsonl")
    with pytest.raises(DatasetSpecError, match="no such file .*missing.jsonl"):
        parse_dataset_spec(f"hotpotqa:{tmp_path / 'missing.jsonl'}")
    with pytest.raises(DatasetSpecError, match="needs a path"):
        parse_dataset_spec("musique:")
    with pytest.raises(DatasetSpecError, match="not 'generated', KIND:PATH or an existing file"):
        parse_dataset_spec("hotpot_dev.jsonl")
    with pytest.raises(DatasetSpecError, match="both map to"):
        parse_dataset_specs(["generated", "generated"])


def test_dataset_specs_load_real_files(tmp_path):
    spec = parse_dataset_spec(str(_data(MUSIQUE)))  # bare path: kind detected
    assert spec.kind == "musique" and spec.name == "musique-musique_ans_dev_sample"
    ds = load_eval_dataset(spec, _params(n_test=10), split="test", limit=4)
    assert len(ds.questions) == 4 and ds.n_split == 10 and ds.corpus_size > 100
    tail = load_eval_dataset(spec, _params(n_test=10, n_seed=5), split="seed")
    assert len(tail.questions) == 5 and not {q.id for q in tail.questions} & {q.id for q in ds.questions}
    with pytest.raises(DatasetSpecError, match="split 'dev'"):
        load_eval_dataset(spec, _params(), split="dev")
    af = parse_dataset_spec(f"agentflow:{_data('agentflow/bamboogle/data.json').parent}")
    assert af.name == "agentflow-bamboogle"
    with pytest.raises(DatasetSpecError, match="--retriever-url"):
        load_eval_dataset(af, _params())


def test_generated_dataset_is_prepared_from_params(tmp_path):
    p = _params()
    p = p.model_copy(update={"data": p.data.model_copy(update={"n_questions": 12})})
    ds = load_eval_dataset(parse_dataset_spec("generated"), p, data_dir=tmp_path / "data", limit=2)
    assert (tmp_path / "data" / "corpus.jsonl").exists() and len(ds.questions) == 2 and ds.spec.name == "generated"


def test_cli_reports_bad_spec_in_one_line(capsys):
    from hasp.cli import main

    assert main(["eval", "--dataset", "wiki:/nope.jsonl", "--variants", "react",
                 "--params", str(ROOT / "params.yaml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: dataset spec 'wiki:/nope.jsonl': unknown kind 'wiki'; expected one of generated, "
                   "hotpotqa, 2wiki, musique, agentflow, qa"]


# ----------------------------------------------------------------------------- the CLI end to end
def test_cli_end_to_end_with_judge_and_snippets(mlflow_tmp, capsys):
    import mlflow
    import yaml

    from hasp.cli import main

    hotpot = _data(HOTPOT)
    with RoleAwareEndpointDouble() as ep:
        params = yaml.safe_load((ROOT / "params.yaml").read_text())
        params["llm"].update(base_url=ep.base_url, model="policy-double", max_concurrency=2)
        params["teacher"].update(base_url=ep.base_url, model="teacher-double")
        params["tracking"]["experiment"] = "cli-eval"
        (mlflow_tmp / "params.yaml").write_text(yaml.safe_dump(params))
        rc = main(["eval", "--params", str(mlflow_tmp / "params.yaml"), "--variants", "react,pf",
                   "--dataset", f"hotpotqa:{hotpot}", "--limit", "2", "--judge", "--teacher-snippets",
                   "--library", str(SKILLS), "--out", str(mlflow_tmp / "out"), "--no-progress"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "hotpotqa-hotpot_dev_distractor_sample_b" in out and "MLflow parent run" in out
    assert {"judge", "snippet", "policy"} <= set(ep.roles)
    metrics = json.loads((mlflow_tmp / "out" / "metrics.json").read_text())
    pf = metrics["hotpotqa-hotpot_dev_distractor_sample_b"]["pf"]
    react = metrics["hotpotqa-hotpot_dev_distractor_sample_b"]["react"]
    assert react["judge_acc"] == 0.0 and react["judge_n"] == 2 and react["judge_errors"] == 0
    # pf: premature_final turns FINAL into SEARCH, whose teacher snippet costs 10 + 5 tokens
    assert pf["snippet_calls"] >= 2 and pf["teacher_tokens"] == 15 * pf["snippet_calls"]
    assert react["teacher_tokens"] == 0  # react never searched
    runs = mlflow.search_runs(experiment_names=["cli-eval"], output_format="list")
    assert len(runs) == 3
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    assert parent.data.params["teacher_snippets"] == "True" and parent.data.params["model"] == "policy-double"


def test_results_table_shows_scored_failed_and_parse_errors():
    from hasp.eval.report import header, table_rows

    m = {"ds": {"react": {"n": 10, "n_scored": 8, "n_failed": 2, "em": 0.5, "parse_error_rate": 0.25,
                          "em_by_hops": {"1": {"mean": 0.75, "n": 4, "ci95": [0.25, 1.0]},
                                         "2": {"mean": 0.25, "n": 4, "ci95": [0.0, 0.75]}}}}}
    row = dict(zip(header(), table_rows(m)[0]))
    assert (row["n"], row["scored"], row["failed"], row["EM"], row["parse err"]) == ("10", "8", "2", "0.500", "0.25")
    assert row["EM by hops [95% CI]"] == "1h 0.750 [0.25,1.00] n4; 2h 0.250 [0.00,0.75] n4"


def test_finished_cells_survive_a_later_cell_that_fails(mlflow_tmp):
    params = _params()
    sets = _sets(params, limit=2)
    first, second = sets
    policy = AnsweringPolicyDouble(_gold(sets), {q.question for q in first.questions},
                                   fail={q.question for q in second.questions})
    with pytest.raises(RuntimeError, match="all 2 episodes failed"):
        run_eval(params, sets, ["react"], policy=policy, library_root=None, out_dir=mlflow_tmp / "partial",
                 progress=False)
    m = json.loads((mlflow_tmp / "partial" / "metrics.json").read_text())
    assert m[first.name]["react"]["em"] == pytest.approx(1.0) and m[first.name]["react"]["n"] == 2
    assert "all 2 episodes failed" in m[second.name]["react"]["cell_error"]


def test_cli_logs_each_finished_cell_before_a_later_cell_fails(mlflow_tmp, capsys):
    """`hasp eval` over two datasets whose second one hits an outage: the first cell's nested run
    and metrics are in MLflow (the parent is marked failed), not lost with the failing cell."""
    import mlflow
    import yaml

    from hasp.cli import main

    hotpot, musique = _data(HOTPOT), _data(MUSIQUE)
    (second,) = _sets(_params(), limit=2, specs=(f"musique:{MUSIQUE}",))
    with SelectiveOutageEndpointDouble([q.question for q in second.questions]) as ep:
        params = yaml.safe_load((ROOT / "params.yaml").read_text())
        params["llm"].update(base_url=ep.base_url, model="policy-double", max_concurrency=2, max_retries=0)
        params["tracking"]["experiment"] = "cli-eval-partial"
        (mlflow_tmp / "params.yaml").write_text(yaml.safe_dump(params))
        rc = main(["eval", "--params", str(mlflow_tmp / "params.yaml"), "--variants", "react",
                   "--dataset", f"hotpotqa:{hotpot}", "--dataset", f"musique:{musique}", "--limit", "2",
                   "--library", str(SKILLS), "--out", str(mlflow_tmp / "out"), "--no-progress", "--no-traces"])
    assert rc == 1 and "all 2 episodes failed" in capsys.readouterr().err
    runs = mlflow.search_runs(experiment_names=["cli-eval-partial"], output_format="list")
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert parent.info.status == "FAILED"
    assert [c.info.run_name for c in children] == ["hotpotqa-hotpot_dev_distractor_sample_b/react"]
    first = children[0]
    assert first.info.status == "FINISHED" and first.data.metrics["n"] == 2 and "em" in first.data.metrics
    assert first.data.params["dataset_kind"] == "hotpotqa" and first.data.params["model"] == "policy-double"
