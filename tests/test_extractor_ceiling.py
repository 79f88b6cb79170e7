"""The vocabulary answer extractor beside every score: its ceiling on gold support documents, the
share of a PF cell's correct answers a vocabulary rewrite wrote, and both in every evaluation table.

The ceiling runs the real extractor on crafted generated-benchmark rows and on the real benchmark
samples in ``../shared/data`` (skipped with a reason when absent); the rewrite share is checked on
crafted trajectories and on an evaluation run through the real runner, harness and a declared PF
(the policy is a scripted test double).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
from pathlib import Path

import pytest
import yaml
from doubles import ReplyDouble

from hasp.config import Params
from hasp.domains.search.datasets import load_dataset, write_dataset
from hasp.domains.search.generator import QAItem
from hasp.eval.ceiling import (ANSWER_SOURCES, CEILING_KEY, CEILING_SOURCE, ORACLE_LABEL, VIA_REWRITE_KEY,
                               answered_by_vocabulary_rewrite, extractor_ceiling, retriever_lookup,
                               vocabulary_rewrite_share)
from hasp.eval.datasets import load_eval_dataset, parse_dataset_spec
from hasp.eval.report import header, table_rows, to_markdown, write_csv
from hasp.eval.runner import dataset_ceiling, run_eval
from hasp.pf.declaration import PFDeclaration
from hasp.pf.declared import compile_declaration
from hasp.pf.dispatcher import Dispatcher
from hasp.records import Action, AuditEvent, StepRecord, Trajectory

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("HASP_SHARED_DATA", ROOT.parent / "shared" / "data"))

# generated-benchmark documents (the generator's layout: a quoted title line, then the text)
CORPUS = [
    {"id": "doc0002", "title": "Felwick", "contents": '"Felwick"\nFelwick is a city located in Nisbrethia, founded '
                                                      "in 1317. The Nalzond River flows through Felwick. The current "
                                                      "mayor of Felwick is Baskeir Hendell."},
    {"id": "doc0141", "title": "Baskeir Hendell", "contents": '"Baskeir Hendell"\nBaskeir Hendell (born 4 June 1918 '
                                                              "in Rairburg) is an economist. He works for Kendthirn "
                                                              "Shipping."},
    {"id": "doc0300", "title": "Rethpa Danen", "contents": '"Rethpa Danen"\nRethpa Danen is a lawyer. She works for '
                                                           "Holor Textiles. She has never married."},
]
WHEN = QAItem("t-when", "When was Felwick founded?", ["1317"], 1, ["doc0002"])
CHAIN = QAItem("t-chain", "In what year was the mayor of Felwick born?", ["1918"], 2, ["doc0002", "doc0141"])
LACKS = QAItem("t-lacks", "In what year was Rethpa Danen born?", ["1911"], 1, ["doc0300"])
NO_SUPPORT = QAItem("t-none", "Which river flows through Felwick?", ["Nalzond River"], 1, ["doc9999"])
CONTENTS = {d["id"]: d["contents"] for d in CORPUS}


# ----------------------------------------------------------------------------- the ceiling

def test_the_ceiling_answers_from_gold_support_and_counts_what_has_none():
    c = extractor_ceiling([WHEN, CHAIN, LACKS, NO_SUPPORT], CONTENTS.get)
    # the year of a "when" question and of a two-hop chain (read in hop order) are found; a support
    # without the answer gives a wrong span; a question whose support the corpus lacks is not scored
    assert (c["n"], c["em_k"], c["no_support"], c["n_questions"]) == (3, 2, 1, 4)
    assert c["em"] == pytest.approx(2 / 3, abs=1e-4) and c["source"] == CEILING_SOURCE
    assert c["em_ci95"][0] < 2 / 3 < c["em_ci95"][1]
    assert c["f1"] == pytest.approx(2 / 3, abs=1e-4)  # the wrong span shares no token with the gold
    assert extractor_ceiling([WHEN], CONTENTS.get)["em"] == 1.0
    assert extractor_ceiling([LACKS], CONTENTS.get)["em"] == 0.0
    empty = extractor_ceiling([NO_SUPPORT], CONTENTS.get)
    assert (empty["n"], empty["no_support"], empty["em"]) == (0, 1, 0.0)


def _generated(tmp_path: Path, items=(WHEN, CHAIN, LACKS, NO_SUPPORT)) -> Path:
    data = tmp_path / "data"
    write_dataset(data, {"train": [], "val": [], "test": list(items)}, CORPUS)
    return data


def test_a_dataset_ceiling_reads_the_retriever_and_is_computed_once_per_question_set(tmp_path):
    ds = load_eval_dataset(parse_dataset_spec(f"generated:{_generated(tmp_path)}"), Params(), split="test")
    cache: dict = {}
    first = dataset_ceiling(ds, cache)
    assert (first["n"], first["em_k"], first["no_support"]) == (3, 2, 1)
    assert dataset_ceiling(ds, cache) is first and len(cache) == 1
    assert retriever_lookup(ds.retriever)("doc0002") == CONTENTS["doc0002"]  # what a READ records
    assert retriever_lookup(ds.retriever)("doc9999") is None


REAL = [("hotpotqa", "hotpotqa/hotpot_dev_distractor_sample_a.jsonl"),
        ("hotpotqa", "hotpotqa/hotpot_dev_distractor_sample_b.jsonl"),
        ("2wiki", "2wiki/2wiki_dev_sample.jsonl"), ("musique", "musique/musique_ans_dev_sample.jsonl")]


def _sample(rel: str) -> Path:
    path = DATA / rel
    if not path.exists():
        pytest.skip(f"benchmark sample {path} not present (the shared data folder is only on the dev/CI machine)")
    return path


@pytest.mark.parametrize("kind,rel", REAL)
def test_the_ceiling_runs_on_real_samples_with_their_supporting_paragraphs(kind, rel):
    ds = load_eval_dataset(parse_dataset_spec(f"{kind}:{_sample(rel)}"), Params(), split="test", limit=6)
    assert all(q.support for q in ds.questions)  # the loaders keep the supporting paragraphs' ids
    c = dataset_ceiling(ds, {})
    assert (c["n"], c["no_support"], c["n_questions"]) == (6, 0, 6)
    assert 0 <= c["em_k"] <= 6 and c["em_ci95"][0] <= c["em"] <= c["em_ci95"][1]


def test_agentflow_files_list_no_support_so_their_ceiling_has_no_questions():
    questions = load_dataset(_sample("agentflow/hotpotqa/data.json"), "agentflow").questions[:5]
    c = extractor_ceiling(questions, lambda doc_id: None)
    assert (c["n"], c["no_support"], c["n_questions"]) == (0, 5, 5)


# ----------------------------------------------------------------------------- which answers the extractor wrote

def _traj(qid: str, steps: list[tuple[Action, Action, list[dict]]], em: float) -> Trajectory:
    t = Trajectory(qid=qid, question="q", answers=["1317"], variant="pf", em=em, f1=em, terminated="final")
    for i, (orig, final, fired) in enumerate(steps):
        t.steps.append(StepRecord(index=i, raw_output="", audit=AuditEvent(state={}, a_orig=orig, a_final=final,
                                                                           fired=fired)))
    t.prediction = steps[-1][1].arg
    return t


REWRITE = {"skill_id": "answer_from_evidence", "type": "MODIFY_ACTION", "reason": "", "applied": True,
           "source": "answer_span_from_evidence"}
SEARCH = (Action("SEARCH", "Felwick"), Action("SEARCH", "Felwick"), [])


def test_the_rewrite_share_counts_correct_answers_a_vocabulary_rewrite_wrote():
    via = _traj("a", [SEARCH, (Action("FINAL", "Nowhere"), Action("FINAL", "1317"), [REWRITE])], 1.0)
    own = _traj("b", [SEARCH, (Action("FINAL", "1317"), Action("FINAL", "1317"), [])], 1.0)
    wrong = _traj("c", [SEARCH, (Action("FINAL", "1300"), Action("FINAL", "1316"), [REWRITE])], 0.0)
    earlier = _traj("d", [(Action("SEARCH", "x"), Action("FINAL", "1317"), [REWRITE]),  # not the answering step
                          (Action("FINAL", "1317"), Action("FINAL", "1317"), [])], 1.0)
    query_source = _traj("e", [(Action("FINAL", "F"), Action("FINAL", "1317"),
                                [{**REWRITE, "source": "question_keywords"}])], 1.0)
    suppressed = _traj("f", [(Action("FINAL", "F"), Action("FINAL", "1317"), [{**REWRITE, "applied": False}])], 1.0)
    assert [answered_by_vocabulary_rewrite(t) for t in (via, own, wrong, earlier, query_source, suppressed)] == [
        True, False, True, False, False, False]
    assert vocabulary_rewrite_share([via, own, wrong, earlier]) == {"k": 1, "n": 3, "share": 0.3333}
    assert vocabulary_rewrite_share([wrong]) == {"k": 0, "n": 0, "share": 0.0}
    assert {"answer_span_from_evidence", "answer_span_from_results", "answer_span_from_last_read"} == ANSWER_SOURCES


def test_a_declared_rewrite_records_its_source_on_the_fire():
    pf = compile_declaration("answer_from_evidence", PFDeclaration(
        watches=["FINAL"], when=["evidence_has_answer", "!answer_in_evidence"],
        rewrite={"action": "FINAL", "arg": ["answer_span_from_last_read", "answer_span_from_results"]}),
        "t/hasp.yaml: pf")
    # nothing read yet: the first source yields nothing, the second answers from the results
    ctx = {"question": WHEN.question, "read_count": 0, "max_steps": 6, "step_count": 1,
           "last_search_results_text": "1. [doc0002] Felwick: Felwick is a city located in Nisbrethia, "
                                       "founded in 1317."}
    iv = pf.intervene(dict(ctx), "FINAL", "Nowhere")
    assert (iv.new_action_arg, iv.source) == ("1317", "answer_span_from_results")
    fired = Dispatcher([pf]).dispatch(dict(ctx), "FINAL", "Nowhere").fired
    assert [(f.skill_id, f.applied, f.source) for f in fired] == [("answer_from_evidence", True,
                                                                   "answer_span_from_results")]


# ----------------------------------------------------------------------------- through the runner and the tables

def _library(tmp_path: Path) -> Path:
    """A one-skill search library whose PF answers FINAL from the evidence when the answer proposed is not in it."""
    folder = shutil.copytree(ROOT / "hasp" / "skills" / "search" / "redundant-read", tmp_path / "lib" / "redundant-read")
    meta = yaml.safe_load((folder / "hasp.yaml").read_text())
    meta["pf"] = {"watches": ["FINAL"], "when": ["evidence_has_answer", "!answer_in_evidence"],
                  "rewrite": {"action": "FINAL", "arg": "answer_span_from_evidence"}, "reason": "answer from evidence"}
    (folder / "hasp.yaml").write_text(yaml.safe_dump(meta))
    return folder.parent


class ScriptedByQuestionPolicyDouble:
    """Per question (found in the user turns) its scripted replies in order. Thread-safe."""

    def __init__(self, script: dict[str, list[str]]):
        self.script = {k: list(v) for k, v in script.items()}
        self._lock = threading.Lock()

    def chat(self, messages, **kw):
        user = "\n".join(m["content"] for m in messages if m["role"] == "user")
        with self._lock:
            return ReplyDouble(self.script[next(q for q in self.script if q in user)].pop(0), 5, 3)


def _script() -> dict[str, list[str]]:
    def turn(action: str) -> str:
        return f"Thought: next.\nAction: {action}"

    return {WHEN.question: [turn("SEARCH[Felwick founded]"), turn("READ[doc0002]"), turn("FINAL[Nowhere Special]")],
            CHAIN.question: [turn("SEARCH[Baskeir Hendell]"), turn("READ[doc0141]"), turn("FINAL[1918]")],
            LACKS.question: [turn("FINAL[Holor Textiles]")]}


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ceiling")
    data = _generated(tmp, (WHEN, CHAIN, LACKS))
    p = Params()
    p = p.model_copy(update={"harness": p.harness.model_copy(update={"pf_selection": "all"}),
                             "llm": p.llm.model_copy(update={"max_concurrency": 1})})
    ds = load_eval_dataset(parse_dataset_spec(f"generated:{data}"), p, split="test")
    lib, res = _library(tmp), {}
    for arm in ("react", "pf"):  # one policy double per arm: each pops its own script
        res[arm] = run_eval(p, [ds], [arm], policy=ScriptedByQuestionPolicyDouble(_script()), library_root=lib,
                            out_dir=tmp / "out" / arm, progress=False)
    return res, ds


def test_the_runner_puts_the_ceiling_in_every_search_cell_and_the_rewrite_share_in_pf_cells(evaluated):
    res, ds = evaluated
    react = res["react"].metrics()[ds.name]["react"]
    pf = res["pf"].metrics()[ds.name]["pf"]
    assert react["em"] == pytest.approx(1 / 3) and pf["em"] == pytest.approx(2 / 3)  # the rewrite fixed one
    assert VIA_REWRITE_KEY not in react
    assert pf[VIA_REWRITE_KEY] == {"k": 1, "n": 2, "share": 0.5}
    assert react[CEILING_KEY] == pf[CEILING_KEY] and (pf[CEILING_KEY]["n"], pf[CEILING_KEY]["em_k"]) == (3, 2)
    on_disk = json.loads((res["pf"].out_dir / "metrics.json").read_text())[ds.name]["pf"]
    assert on_disk[VIA_REWRITE_KEY]["k"] == 1 and on_disk[CEILING_KEY]["n"] == 3
    fire = next(f for c in res["pf"].cells for r in c.records if r.traj.qid == WHEN.id
                for a in r.traj.audits() for f in a.fired)
    assert fire["source"] == "answer_span_from_evidence" and fire["applied"]


def _metrics(evaluated) -> dict:
    res, ds = evaluated
    return {ds.name: {**res["react"].metrics()[ds.name], **res["pf"].metrics()[ds.name]}}


def test_the_eval_table_shows_the_oracle_row_and_the_rewrite_column(evaluated, tmp_path, capsys):
    from hasp.eval.cli import print_table

    metrics = _metrics(evaluated)
    rows = [dict(zip(header(), r)) for r in table_rows(metrics)]
    assert [r["variant"] for r in rows] == ["react", "pf", ORACLE_LABEL]
    oracle = rows[-1]
    assert oracle["n"] == "3" and oracle["EM"].startswith("0.667 [") and oracle["F1"] == "0.667"
    assert oracle["correct via vocab rewrite"] == "–" and oracle["steps"] == "–"
    assert rows[1]["correct via vocab rewrite"] == "1/2" and rows[0]["correct via vocab rewrite"] == "–"

    print_table(metrics)  # what `hasp eval` prints
    text = capsys.readouterr().out
    assert "correct via vocab rewrite" in text
    oracle_line = next(line for line in text.splitlines() if "extractor | gold support" in line)
    assert oracle["EM"] in oracle_line and "1/2" in next(line for line in text.splitlines() if " pf " in line)

    md = to_markdown(metrics)
    assert "| extractor \\| gold support | 3 |" in md  # the pipe escaped, so the row keeps its cells
    assert {len(re.split(r"(?<!\\)\|", line)) - 2 for line in md.splitlines()} == {len(header())}
    csv_text = write_csv(metrics, tmp_path / "t.csv").read_text()
    assert ORACLE_LABEL in csv_text and '""n"": 3' in csv_text


def test_the_oracle_row_says_how_many_questions_had_no_support():
    ceiling = extractor_ceiling([WHEN, NO_SUPPORT], CONTENTS.get)
    rows = table_rows({"ds": {"pf": {"n": 2, "em": 0.5, CEILING_KEY: ceiling}}})
    assert rows[-1][1] == f"{ORACLE_LABEL} (1 without support)"
    none = table_rows({"ds": {"pf": {"n": 1, CEILING_KEY: extractor_ceiling([NO_SUPPORT], CONTENTS.get)}}})
    assert dict(zip(header(), none[-1]))["EM"] == "–"


def test_the_grid_table_puts_the_ceiling_beside_the_trained_arms(evaluated):
    import hasp.eval.ceiling as ceiling_mod
    from hasp.track import grid_report

    assert (grid_report.CEILING_KEY, grid_report.VIA_REWRITE_KEY) == (ceiling_mod.CEILING_KEY,
                                                                      ceiling_mod.VIA_REWRITE_KEY)
    assert grid_report.ORACLE_ARM == ceiling_mod.ORACLE_LABEL
    res, ds = evaluated
    pf = res["pf"].metrics()[ds.name]["pf"]
    grid = {"untrained": {"untrained_pf": pf},
            "experiments": {"E2_cpu": {"eval": {"trained_pf": {"n": 3, "em": 1.0, "f1": 1.0,
                                                               VIA_REWRITE_KEY: {"k": 0, "n": 3, "share": 0.0}}},
                                       "wall_s": 5.0}}}
    rows = grid_report.comparison_rows(grid)
    assert [(r["experiment"], r["arm"]) for r in rows] == [("untrained", "untrained_pf"), ("E2_cpu", "trained_pf"),
                                                          ("oracle", ORACLE_LABEL)]
    md = grid_report.table_markdown(rows)
    lo, hi = pf[CEILING_KEY]["em_ci95"]
    assert f"| oracle | extractor \\| gold support | 3 | - | 0.667 [{lo:.2f}, {hi:.2f}] | 0.667 | - | - | - | - |" in md
    assert "| untrained | untrained_pf | 3 | 0 | 0.667 | 0.667 | 1-hop " in md and "| 1/2 | - |" in md
    assert "| E2_cpu | trained_pf | 3 | 0 | 1.000 | 1.000 | - | - | 0/3 | 5 |" in md


def test_the_bench_grid_report_computes_the_ceiling_of_a_grid_that_ran_without_it(tmp_path, monkeypatch):
    import importlib.util

    from hasp.track.grid_report import comparison_rows

    monkeypatch.syspath_prepend(str(ROOT / "bench"))  # the script imports its sibling ``results``
    spec = importlib.util.spec_from_file_location("grid_report_bench", ROOT / "bench" / "grid_report.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    grid = {"untrained": {"untrained_pf": {"n": 3, "em": 0.0, "f1": 0.0}}, "experiments": {}}
    bench.add_ceiling(tmp_path / "grid", grid, tmp_path / "nowhere")  # no prepared data: nothing to compute
    assert CEILING_KEY not in grid["untrained"]["untrained_pf"]
    bench.add_ceiling(tmp_path / "grid", grid, _generated(tmp_path, (WHEN, CHAIN, LACKS)))
    rows = comparison_rows(grid)
    assert (rows[-1]["arm"], rows[-1]["n"], rows[-1]["em"]) == (ORACLE_LABEL, 3, pytest.approx(2 / 3, abs=1e-4))
