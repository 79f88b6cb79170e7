"""Loaders for HotpotQA / 2Wiki / MuSiQue / AgentFlow files, paper splits, BM25 over real paragraphs.

Tests on the real samples read ``../shared/data`` (override with HASP_SHARED_DATA) and skip with a
reason when it is absent; format and error-handling tests build their own files in tmp_path.
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from pathlib import Path

import pytest

from hasp.domains.search.datasets import (
    LoadReport,
    detect_kind,
    load_2wiki,
    load_agentflow,
    load_dataset,
    load_hotpotqa,
    load_musique,
    paper_splits,
    paragraph_id,
    write_dataset,
)
from hasp.domains.search.generator import BenchmarkFormatError, QAItem, load_corpus, load_questions
from hasp.domains.search.retriever import BM25Retriever

DATA = Path(os.environ.get("HASP_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


def _data(rel: str) -> Path:
    path = DATA / rel
    if not path.exists():
        pytest.skip(f"benchmark sample {path} not present (the shared data folder is only on the dev/CI machine)")
    return path


def _write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def _hotpot_row(qid: str, question: str = "Who?", answer: str = "A", **extra) -> dict:
    row = {"_id": qid, "question": question, "answer": answer,
           "supporting_facts": [["Alpha", 0], ["Beta", 1]],
           "context": [["Alpha", ["Alpha is a town.", " It lies on a river."]],
                       ["Beta", ["Beta was born in Alpha.", " Beta is a poet."]],
                       ["Gamma", ["Gamma is unrelated."]]]}
    row.update(extra)
    return row


def _check_corpus(questions: list[QAItem], corpus: list[dict]) -> None:
    ids = [d["id"] for d in corpus]
    assert len(ids) == len(set(ids)), "corpus ids must be unique"
    assert len({(d["title"], d["contents"]) for d in corpus}) == len(corpus), "paragraphs must be deduplicated"
    for d in corpus:
        assert set(d) == {"id", "title", "contents"}
        assert d["contents"].startswith(f'"{d["title"]}"')  # Search-R1 contents layout
    known = set(ids)
    for q in questions:
        assert q.support and set(q.support) <= known
        assert q.answers and all(isinstance(a, str) and a for a in q.answers)


# ------------------------------------------------------------------ real samples
def test_hotpotqa_samples() -> None:
    qa, ca = load_hotpotqa(_data("hotpotqa/hotpot_dev_distractor_sample_a.jsonl"))
    qb, cb = load_hotpotqa(_data("hotpotqa/hotpot_dev_distractor_sample_b.jsonl"))
    assert (len(qa), len(ca)) == (200, 1971)  # 2000 paragraphs, 29 repeated across questions
    assert (len(qb), len(cb)) == (100, 998)
    for questions, corpus in ((qa, ca), (qb, cb)):
        _check_corpus(questions, corpus)
        assert Counter(q.hops for q in questions) == {2: len(questions)}
        assert all(len(q.support) == 2 for q in questions)
    first = qa[0]
    assert first.id == "5a7f6fd75542992e7d278cfa" and first.answers == ["Rush"]
    titles = {d["id"]: d["title"] for d in ca}
    assert [titles[s] for s in first.support] == ["Nobody's Hero", "Neil Peart"]  # supporting_facts order
    porcaro = next(d for d in ca if d["title"] == "Jeff Porcaro")
    assert "American drummer, songwriter, and record producer. In a career" in porcaro["contents"]


def test_2wiki_sample() -> None:
    questions, corpus, report = load_2wiki(_data("2wiki/2wiki_dev_sample.jsonl"))
    # This sample holds no context-less records; the skip path is covered with tmp files below.
    assert (len(questions), len(corpus)) == (100, 790)
    assert (report.loaded, report.skipped, report.reasons) == (100, 0, Counter())
    _check_corpus(questions, corpus)
    assert Counter(q.hops for q in questions) == {2: 71, 4: 29}  # bridge_comparison has 4 hops
    assert questions[0].answers == ["Free Guy"]


def test_musique_sample() -> None:
    path = _data("musique/musique_ans_dev_sample.jsonl")
    questions, corpus = load_musique(path)
    assert (len(questions), len(corpus)) == (100, 1603)
    _check_corpus(questions, corpus)
    assert Counter(q.hops for q in questions) == {2: 100}
    titles = {d["id"]: d["title"] for d in corpus}
    first = questions[0]
    # hop order comes from question_decomposition (paragraph 8 first, then 1), not from idx order
    assert [titles[s] for s in first.support] == ["Van Hook Township, Mountrail County, North Dakota",
                                                  "Mountrail County Courthouse"]
    assert questions[2].answers == ["Pittsburgh Pirates", "Orioles", "Pirates", "Baltimore Orioles",
                                    "New York Mets", "Mets"]


AGENTFLOW_COUNTS = {"2wiki": 200, "musique": 200, "hotpotqa": 100, "bamboogle": 125,
                    "aime24": 30, "amc23": 40, "gameof24": 300}


@pytest.mark.parametrize("task", sorted(AGENTFLOW_COUNTS))
def test_agentflow_samples(task: str) -> None:
    folder = _data(f"agentflow/{task}")
    questions, corpus = load_agentflow(folder)
    assert len(questions) == AGENTFLOW_COUNTS[task]
    assert corpus == []
    assert [q.id for q in questions[:2]] == [f"{task}-0", f"{task}-1"]
    assert all("<answer>" not in q.question and q.question.strip() == q.question for q in questions)
    assert all(q.answers and q.hops == 1 and q.support == [] for q in questions)
    assert len({q.id for q in questions}) == len(questions)


def test_agentflow_answer_shapes() -> None:
    bamboogle, _ = load_agentflow(_data("agentflow/bamboogle/data.json"))
    assert bamboogle[0].question == "Who was president of the United States in the year that Citibank was founded?"
    assert bamboogle[0].answers == ["james madison"]
    amc, _ = load_agentflow(_data("agentflow/amc23"))
    assert amc[0].answers == ["27"]
    g24, _ = load_agentflow(_data("agentflow/gameof24"))
    assert g24[0].question.startswith("Using the numbers [1, 1, 1, 8]") and g24[0].answers == ["(1+1+1)×8"]


def test_load_dataset_detects_every_format() -> None:
    expected = {"hotpotqa/hotpot_dev_distractor_sample_b.jsonl": ("hotpotqa", 100),
                "2wiki/2wiki_dev_sample.jsonl": ("2wiki", 100),
                "musique/musique_ans_dev_sample.jsonl": ("musique", 100),
                "agentflow/musique": ("agentflow", 200)}
    for rel, (kind, n) in expected.items():
        path = _data(rel)
        assert detect_kind(path) == kind
        ds = load_dataset(path)
        assert (ds.kind, len(ds.questions), ds.report.loaded, ds.report.skipped) == (kind, n, n, 0)


def test_bm25_finds_supporting_paragraphs_on_hotpotqa() -> None:
    """Measured on sample_a (200 questions, 1971 paragraphs), question text as the query:
    a supporting paragraph is the top hit for 152/200, in the top 3 for 184/200, in the top 10
    for 199/200. Asserted with margin so an analyzer tweak does not flake the test."""
    questions, corpus = load_hotpotqa(_data("hotpotqa/hotpot_dev_distractor_sample_a.jsonl"))
    retriever = BM25Retriever(corpus)

    def rate(k: int) -> float:
        found = sum(bool({h.id for h in retriever.search(q.question, k)} & set(q.support)) for q in questions)
        return found / len(questions)

    assert rate(1) >= 0.65
    assert rate(3) >= 0.85
    assert rate(10) >= 0.95


# ------------------------------------------------------------------ corpus building
def test_paragraphs_deduplicated_with_stable_ids(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "h.jsonl", [_hotpot_row("q1"), _hotpot_row("q2", question="Where?")])
    questions, corpus = load_hotpotqa(path)
    assert len(corpus) == 3  # same three paragraphs in both records
    assert questions[0].support == questions[1].support
    alpha = next(d for d in corpus if d["title"] == "Alpha")
    assert alpha["id"] == paragraph_id("hotpot", "Alpha", "Alpha is a town. It lies on a river.")
    assert alpha["contents"] == '"Alpha"\nAlpha is a town. It lies on a river.'
    # the ids do not depend on which rows (or which order) were loaded
    only_second = _write_jsonl(tmp_path / "h2.jsonl", [_hotpot_row("q2", question="Where?")])
    _, corpus2 = load_hotpotqa(only_second)
    assert [d["id"] for d in corpus2] == [d["id"] for d in corpus]
    _, prefixed = load_hotpotqa(path, id_prefix="hp")
    assert all(d["id"].startswith("hp-") for d in prefixed)


def test_json_array_layout_is_read(tmp_path: Path) -> None:
    """The official HotpotQA / 2Wiki dev files are one JSON array, not jsonl."""
    path = tmp_path / "hotpot_dev_distractor_v1.json"
    path.write_text(json.dumps([_hotpot_row("q1"), _hotpot_row("q2")], indent=2), encoding="utf-8")
    questions, corpus = load_hotpotqa(path)
    assert [q.id for q in questions] == ["q1", "q2"] and len(corpus) == 3


def test_2wiki_context_less_records_are_skipped_and_counted(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    good = _hotpot_row("w1", evidences=[["Beta", "place of birth", "Alpha"]])
    no_context = {"_id": "w2", "question": "Who directed X?", "answer": "Y",
                  "supporting_facts": "[['X', 0], ['Y', 0]]", "evidences": "[['X', 'director', 'Y']]"}
    string_context = {**_hotpot_row("w3"), "context": str(good["context"]),
                      "supporting_facts": str(good["supporting_facts"])}
    stringified_facts = {**_hotpot_row("w4"), "supporting_facts": "[['Alpha', 0]]"}
    broken_facts = {**_hotpot_row("w5"), "supporting_facts": "[['Alpha', 0"}
    path = _write_jsonl(tmp_path / "2wiki.jsonl", [good, no_context, string_context, stringified_facts, broken_facts])
    with caplog.at_level(logging.WARNING, logger="hasp.domains.search.datasets"):
        questions, corpus, report = load_2wiki(path)
    assert [q.id for q in questions] == ["w1", "w4"]
    assert report.skipped == 3 and report.loaded == 2
    assert report.reasons == Counter({"missing context": 1, "context is a stringified list, not a list": 1,
                                      "supporting_facts is an unparsable string": 1})
    assert questions[1].support == [paragraph_id("2wiki", "Alpha", "Alpha is a town. It lies on a river.")]
    assert f"{path}:2: skipped record: missing context" in caplog.text
    assert f"{path}:3:" in caplog.text and f"{path}:5:" in caplog.text
    assert "skipped 3" in report.summary()


def test_2wiki_skip_on_real_lines(tmp_path: Path) -> None:
    """Real 2Wiki records plus one in the broken published shape: only that one is dropped."""
    lines = _data("2wiki/2wiki_dev_sample.jsonl").read_text(encoding="utf-8").splitlines()[:5]
    broken = json.loads(lines[0])
    broken["_id"] = "broken"
    del broken["context"]
    broken["supporting_facts"], broken["evidences"] = str(broken["supporting_facts"]), str(broken["evidences"])
    path = _write_jsonl(tmp_path / "mix.jsonl", [*lines[:2], broken, *lines[2:]])
    questions, _, report = load_2wiki(path)
    assert len(questions) == 5 and "broken" not in {q.id for q in questions}
    assert (report.skipped, dict(report.reasons)) == (1, {"missing context": 1})


# ------------------------------------------------------------------ malformed rows
_MUSIQUE_ROW = {"id": "2hop__1_2", "question": "Q?", "answer": "A", "answer_aliases": [],
                "paragraphs": [{"idx": 0, "title": "T", "paragraph_text": "Text.", "is_supporting": True}]}


@pytest.mark.parametrize(("loader", "good"), [(load_hotpotqa, _hotpot_row("q1")), (load_2wiki, _hotpot_row("q1")),
                                              (load_musique, _MUSIQUE_ROW)])
def test_invalid_json_names_file_and_line(tmp_path: Path, loader, good: dict) -> None:
    path = _write_jsonl(tmp_path / "bad.jsonl", [good, "", "{not json"])
    with pytest.raises(BenchmarkFormatError, match=rf"{path.name}:3: invalid JSON"):
        loader(path)


@pytest.mark.parametrize("field", ["question", "answer"])
def test_missing_question_or_answer_names_line(tmp_path: Path, field: str) -> None:
    row = _hotpot_row("q2")
    del row[field]
    path = _write_jsonl(tmp_path / "bad.jsonl", [_hotpot_row("q1"), row])
    with pytest.raises(BenchmarkFormatError, match=rf"bad.jsonl:2: field '{field}'"):
        load_hotpotqa(path)
    with pytest.raises(BenchmarkFormatError, match=rf"bad.jsonl:2: field '{field}'"):
        load_2wiki(path)  # only a missing/stringified context is a skip; this is an error


def test_other_malformed_rows(tmp_path: Path) -> None:
    no_ctx = _hotpot_row("q1")
    del no_ctx["context"]
    with pytest.raises(BenchmarkFormatError, match=r"h.jsonl:1: field 'context' is missing"):
        load_hotpotqa(_write_jsonl(tmp_path / "h.jsonl", [no_ctx]))
    bad_ctx = _hotpot_row("q1", context=[["Alpha", 3]])
    with pytest.raises(BenchmarkFormatError, match=r"c.jsonl:1: context\[0\]"):
        load_hotpotqa(_write_jsonl(tmp_path / "c.jsonl", [bad_ctx]))
    with pytest.raises(BenchmarkFormatError, match=r"d.jsonl:2: duplicate question id 'q1'"):
        load_hotpotqa(_write_jsonl(tmp_path / "d.jsonl", [_hotpot_row("q1"), _hotpot_row("q1")]))
    with pytest.raises(BenchmarkFormatError, match=r"l.jsonl:2: expected a JSON object"):
        load_hotpotqa(_write_jsonl(tmp_path / "l.jsonl", [_hotpot_row("q1"), "[1, 2]"]))
    musique = {**_MUSIQUE_ROW, "paragraphs": [{"idx": 0, "title": "T"}]}
    with pytest.raises(BenchmarkFormatError, match=r"m.jsonl:1: paragraphs\[0\]"):
        load_musique(_write_jsonl(tmp_path / "m.jsonl", [musique]))


@pytest.mark.parametrize(("loader", "good"), [(load_hotpotqa, _hotpot_row("q1")), (load_2wiki, _hotpot_row("q1")),
                                              (load_musique, _MUSIQUE_ROW), (load_questions, None)])
def test_binary_line_names_file_and_line(tmp_path: Path, loader, good: dict | None) -> None:
    good = good or QAItem(id="q1", question="Q?", answers=["A"], hops=1, support=[]).to_dict()
    path = tmp_path / "bin.jsonl"
    path.write_bytes(json.dumps(good).encode() + b"\n\n\xff\xfe\x00binary\x89PNG\n")
    with pytest.raises(BenchmarkFormatError, match=r"bin.jsonl:3: not UTF-8 text") as err:
        loader(path)
    assert "codec" not in str(err.value)


def test_binary_json_array_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "arr.json"
    path.write_bytes(b'[\n{"query": "Q", "answer": "A", "pid": 1},\n{"query": "\xff"}]')
    with pytest.raises(BenchmarkFormatError, match=r"arr.json:3: not UTF-8 text"):
        load_agentflow(path)


@pytest.mark.parametrize("alias", [1, None, {"a": 1}])
def test_musique_non_string_alias_is_an_error(tmp_path: Path, alias) -> None:
    row = {**_MUSIQUE_ROW, "answer_aliases": ["B", alias]}
    path = _write_jsonl(tmp_path / "m.jsonl", [_MUSIQUE_ROW | {"id": "2hop__0"}, row])
    with pytest.raises(BenchmarkFormatError, match=r"m.jsonl:2: field 'answer_aliases\[1\]' must be a string"):
        load_musique(path)


def test_musique_is_supporting_must_be_boolean(tmp_path: Path) -> None:
    para = {"idx": 0, "title": "T", "paragraph_text": "Text.", "is_supporting": "false"}
    path = _write_jsonl(tmp_path / "m.jsonl", [{**_MUSIQUE_ROW, "paragraphs": [para]}])
    with pytest.raises(BenchmarkFormatError, match=r"m.jsonl:1: field 'paragraphs\[0\].is_supporting'"):
        load_musique(path)


def test_musique_unanswerable_rows_are_skipped_and_counted(tmp_path: Path) -> None:
    rows = [_MUSIQUE_ROW, {**_MUSIQUE_ROW, "id": "2hop__9", "answerable": False},
            {**_MUSIQUE_ROW, "id": "2hop__8", "answerable": True}]
    ds = load_dataset(_write_jsonl(tmp_path / "m.jsonl", rows), "musique")
    assert [q.id for q in ds.questions] == ["2hop__1_2", "2hop__8"]
    assert (ds.report.loaded, ds.report.skipped) == (2, 1)
    assert "1 row marked answerable: false" in ds.report.summary()
    with pytest.raises(BenchmarkFormatError, match=r"x.jsonl:1: field 'answerable'"):
        load_musique(_write_jsonl(tmp_path / "x.jsonl", [{**_MUSIQUE_ROW, "answerable": "no"}]))


def test_hotpotqa_rows_without_their_support_are_skipped_and_counted(tmp_path: Path) -> None:
    lost = _hotpot_row("q2", supporting_facts=[["Alpha", 0], ["Nowhere", 0]])
    none = _hotpot_row("q3", supporting_facts=[])
    path = _write_jsonl(tmp_path / "h.jsonl", [_hotpot_row("q1"), lost, none])
    ds = load_dataset(path, "hotpotqa")
    assert [q.id for q in ds.questions] == ["q1"] and ds.questions[0].hops == 2
    assert (ds.report.loaded, ds.report.skipped) == (1, 2)
    assert "2 rows unanswerable from their context" in ds.report.summary()
    questions, _ = load_hotpotqa(path)
    assert [q.id for q in questions] == ["q1"]


def test_agentflow_formats_and_errors(tmp_path: Path) -> None:
    folder = tmp_path / "mytask"
    folder.mkdir()
    rows = [{"pid": 7, "query": "Q one?", "answer": "['a', 'b']"},  # stringified list
            {"pid": "8", "question": "Q two?When ready, output the final answer enclosed in <answer> and "
             "</answer> tags. Do not generate any content after the </answer> tag.", "answer": 25.0},
            {"query": "Q three?", "answer": "[not a list"}]
    (folder / "data.json").write_text(json.dumps(rows), encoding="utf-8")
    questions, corpus = load_agentflow(folder)
    assert corpus == []
    assert [(q.id, q.question, q.answers) for q in questions] == [
        ("mytask-7", "Q one?", ["a", "b"]), ("mytask-8", "Q two?", ["25"]), ("mytask-2", "Q three?", ["[not a list"])]
    kept, _ = load_agentflow(folder / "data.json", name="", strip_format_instruction=False)
    assert kept[0].id == "7" and kept[1].question.endswith("</answer> tag.")

    (folder / "data.json").write_text(json.dumps([rows[0], {"pid": 9, "query": "Q?"}]), encoding="utf-8")
    with pytest.raises(BenchmarkFormatError, match=r"data.json item 1: field 'answer' is missing"):
        load_agentflow(folder)
    (folder / "data.json").write_text(json.dumps([{"pid": 1, "answer": "x", "question": [1, 2]}]), encoding="utf-8")
    with pytest.raises(BenchmarkFormatError, match=r"data.json item 0: missing question"):
        load_agentflow(folder)
    (folder / "data.json").write_text('[\n  {"pid": 1,\n   "query": "Q?" "answer": "x"}\n]', encoding="utf-8")
    with pytest.raises(BenchmarkFormatError, match=r"data.json:3: invalid JSON"):
        load_agentflow(folder)


# ------------------------------------------------------------------ splits
def _items(n: int) -> list[QAItem]:
    return [QAItem(id=f"q{i}", question=f"question {i}?", answers=["a"], hops=2, support=[]) for i in range(n)]


def test_paper_splits_protocol() -> None:
    items = _items(1000)
    s = paper_splits(items)
    assert s["test"] == items[:200] and s["train"] == items[200:]
    assert (len(s["seed"]), len(s["val"])) == (50, 50)
    seed_ids, val_ids = {q.id for q in s["seed"]}, {q.id for q in s["val"]}
    assert not seed_ids & val_ids
    assert seed_ids | val_ids <= {q.id for q in items[200:]}
    assert paper_splits(items) == s  # deterministic
    assert paper_splits(items, seed=43)["seed"] != s["seed"]
    assert [q.id for q in s["seed"]] != [f"q{i}" for i in range(200, 250)]  # shuffled, not the head of the tail


def test_paper_splits_small_files() -> None:
    capped = paper_splits(_items(230))  # tail of 30: seed/val capped at half the tail each
    assert (len(capped["test"]), len(capped["train"]), len(capped["seed"]), len(capped["val"])) == (200, 30, 15, 15)
    assert not {q.id for q in capped["seed"]} & {q.id for q in capped["val"]}
    no_tail = paper_splits(_items(120))  # size <= test boundary: auto-skipped for seed/val
    assert (len(no_tail["test"]), no_tail["train"], no_tail["seed"], no_tail["val"]) == (120, [], [], [])
    custom = paper_splits(_items(100), n_test=20, n_seed=10, n_val=5)
    assert (len(custom["test"]), len(custom["seed"]), len(custom["val"])) == (20, 10, 5)
    with pytest.raises(ValueError):
        paper_splits(_items(10), n_test=-1)


def test_splits_written_and_reloaded(tmp_path: Path) -> None:
    qa, ca = load_hotpotqa(_data("hotpotqa/hotpot_dev_distractor_sample_a.jsonl"))
    qb, cb = load_hotpotqa(_data("hotpotqa/hotpot_dev_distractor_sample_b.jsonl"))
    corpus = list({d["id"]: d for d in ca + cb}.values())  # stable ids make merging trivial
    splits = paper_splits(qa + qb)
    assert {k: len(v) for k, v in splits.items()} == {"test": 200, "train": 100, "seed": 50, "val": 50}
    paths = write_dataset(tmp_path, splits, corpus)
    assert set(paths) == {"test", "train", "seed", "val", "corpus"}
    assert load_questions(paths["seed"]) == splits["seed"]
    assert load_corpus(paths["corpus"]) == corpus
    from hasp.domains.search.task import SearchTask

    task = SearchTask.load(tmp_path)
    assert task.questions("val") == splits["val"] and len(task.retriever) == len(corpus)


def test_load_report_defaults() -> None:
    report = LoadReport()
    assert (report.skipped, report.reasons, report.loaded) == (0, Counter(), 0)
    assert report.summary() == "loaded 0, skipped 0"
