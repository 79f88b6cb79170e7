"""Search domain: generated benchmark, BM25 retriever, SEARCH/READ tools, EM/F1 metrics."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from hasp.domains.search.generator import (
    Benchmark,
    BenchmarkFormatError,
    QAItem,
    generate_benchmark,
    load_corpus,
    load_questions,
    split,
    write_benchmark,
)
from hasp.domains.search.metrics import exact_match, f1, normalize_answer
from hasp.domains.search.retriever import BM25Retriever, Hit, clear_cache
from hasp.domains.search.tools import SearchEnvironment


@pytest.fixture(scope="module")
def bench() -> Benchmark:
    return generate_benchmark(seed=7, n_questions=100)


@pytest.fixture(scope="module")
def retriever(bench: Benchmark) -> BM25Retriever:
    return BM25Retriever(bench.corpus)


def _docs(bench: Benchmark) -> dict[str, dict]:
    return {d["id"]: d for d in bench.corpus}


# ------------------------------------------------------------------ generator
def test_same_seed_identical_different_seed_differs() -> None:
    a, b, c = generate_benchmark(3, 40), generate_benchmark(3, 40), generate_benchmark(4, 40)
    assert a.corpus == b.corpus and a.questions == b.questions
    assert a.corpus != c.corpus
    assert [q.question for q in a.questions] != [q.question for q in c.questions]


def test_sizes_and_speed() -> None:
    t = time.perf_counter()
    b = generate_benchmark(11, 100)
    assert time.perf_counter() - t < 1.0
    assert len(b.questions) == 100 and len(b.corpus) == 300
    assert len({q.id for q in b.questions}) == 100
    assert len({q.question for q in b.questions}) == 100
    assert len({d["id"] for d in b.corpus}) == len(b.corpus)
    assert len({d["title"].lower() for d in b.corpus}) == len(b.corpus)  # names unique


def test_documents_are_search_r1_style(bench: Benchmark) -> None:
    for d in bench.corpus:
        assert set(d) == {"id", "title", "contents"}
        assert d["contents"].startswith(f'"{d["title"]}"\n')
        assert d["contents"].count(".") >= 2  # several sentences


def test_questions_answerable_from_their_support_chain(bench: Benchmark) -> None:
    docs = _docs(bench)
    for q in bench.questions:
        assert q.hops == len(q.support) and 2 <= q.hops <= 4
        assert len(set(q.support)) == q.hops  # the chain never revisits a document
        assert all(s in docs for s in q.support)
        assert q.answers and all(a.strip() for a in q.answers)
        # the gold answer is stated in the last support doc, each earlier doc names the next entity
        assert q.answers[0] in docs[q.support[-1]]["contents"]
        for prev, nxt in zip(q.support, q.support[1:]):
            assert docs[nxt]["title"] in docs[prev]["contents"]
        # the first-hop entity is named in the question itself
        assert docs[q.support[0]]["title"] in q.question


def test_hop_mix_and_negations(bench: Benchmark) -> None:
    hops = {q.hops for q in bench.questions}
    assert {2, 3} <= hops
    assert sum(" not " in d["contents"] for d in bench.corpus) > len(bench.corpus) // 3
    assert any("born" in d["contents"] and "19" in d["contents"] for d in bench.corpus)


def _one_letter_apart(a: str, b: str) -> bool:
    return len(a) == len(b) and sum(x != y for x, y in zip(a, b)) == 1


def _one_word_apart(a: str, b: str) -> bool:
    wa, wb = a.split(), b.split()
    return len(wa) == len(wb) > 1 and sum(x != y for x, y in zip(wa, wb)) == 1


def test_lookalike_distractors_exist_with_different_facts(bench: Benchmark) -> None:
    titles = [d["title"] for d in bench.corpus]
    pairs = [(a, b) for i, a in enumerate(titles) for b in titles[i + 1:]
             if _one_letter_apart(a, b) or _one_word_apart(a, b)]
    assert len(pairs) >= 20
    by_title = {d["title"]: d["contents"] for d in bench.corpus}
    for a, b in pairs:  # same facts would make the distractor harmless
        assert by_title[a].split("\n", 1)[1] != by_title[b].split("\n", 1)[1].replace(b, a)
    # some questions are anchored on an entity that has a look-alike
    anchored = {q.support[0] for q in bench.questions}
    ids = {d["title"]: d["id"] for d in bench.corpus}
    assert any(ids[a] in anchored or ids[b] in anchored for a, b in pairs)


def test_splits_disjoint_deterministic_and_order_independent(bench: Benchmark) -> None:
    s1 = split(bench, seed=0)
    s2 = split(list(reversed(bench.questions)), seed=0)
    s3 = split(bench, seed=1)
    assert s1 == s2
    ids = [{q.id for q in s1[k]} for k in ("train", "val", "test")]
    assert not (ids[0] & ids[1] or ids[0] & ids[2] or ids[1] & ids[2])
    assert sum(map(len, ids)) == len(bench.questions)
    assert (len(ids[0]), len(ids[1]), len(ids[2])) == (60, 20, 20)
    assert {q.id for q in s3["train"]} != ids[0]
    with pytest.raises(ValueError):
        split(bench, 0, fractions=(0.5, 0.5, 0.5))


def test_write_and_load_roundtrip(bench: Benchmark, tmp_path: Path) -> None:
    paths = write_benchmark(bench, tmp_path, seed=0)
    assert {p.name for p in paths.values()} == {"corpus.jsonl", "train.jsonl", "val.jsonl", "test.jsonl"}
    assert load_corpus(paths["corpus"]) == bench.corpus
    loaded = [q for k in ("train", "val", "test") for q in load_questions(paths[k])]
    assert sorted(loaded, key=lambda q: q.id) == sorted(bench.questions, key=lambda q: q.id)
    assert load_questions(paths["train"]) == split(bench, 0)["train"]
    again = write_benchmark(bench, tmp_path / "again", seed=0)
    assert again["train"].read_bytes() == paths["train"].read_bytes()  # byte-stable for DVC


@pytest.mark.parametrize("bad_line, expect", [
    ("{not json", "invalid JSON"),
    ('{"id": "q9", "question": "Q?", "answers": [], "hops": 2, "support": []}', "answers"),
    ('{"id": "q9", "question": "Q?", "answers": ["x"], "hops": "two", "support": []}', "hops"),
    ('["a list"]', "JSON object"),
])
def test_malformed_row_names_file_and_line(tmp_path: Path, bad_line: str, expect: str) -> None:
    good = QAItem("q1", "Who?", ["A"], 2, ["d1", "d2"]).to_dict()
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps(good) + "\n\n" + bad_line + "\n", encoding="utf-8")
    with pytest.raises(BenchmarkFormatError) as info:
        load_questions(path)
    msg = str(info.value)
    assert f"{path}:3:" in msg and expect in msg


# ------------------------------------------------------------------ retriever
def test_bm25_first_hop_in_top3(bench: Benchmark, retriever: BM25Retriever) -> None:
    hits = [q.support[0] in [h.id for h in retriever.search(q.question, 3)] for q in bench.questions]
    rate = sum(hits) / len(hits)
    # measured: 0.89 for seed 7; 0.87-0.97 (mean 0.92) over seeds 0-29
    assert rate >= 0.8, rate


def test_bm25_basic_behaviour(bench: Benchmark, retriever: BM25Retriever) -> None:
    doc = bench.corpus[5]
    top = retriever.search(doc["title"], 3)
    assert top and isinstance(top[0], Hit) and top[0].id == doc["id"]
    assert top[0].title == doc["title"] and top[0].score > 0 and top[0].snippet
    assert not top[0].snippet.startswith('"')  # title line is not repeated in the snippet
    assert [h.score for h in top] == sorted((h.score for h in top), reverse=True)
    assert retriever.search("", 3) == [] and retriever.search("   ", 3) == []
    assert retriever.search("zzqx wvvk", 3) == []  # no token in the vocabulary
    assert retriever.search("the of and", 3) == []  # stopwords only
    assert len(retriever.search("city", 1000)) <= len(bench.corpus)
    assert retriever.get(doc["id"]) == doc and retriever.get("nope") is None


def test_bm25_save_load_and_cache(bench: Benchmark, retriever: BM25Retriever, tmp_path: Path) -> None:
    retriever.save(tmp_path / "idx")
    loaded = BM25Retriever.load(tmp_path / "idx")
    for q in bench.questions[:10]:
        assert loaded.search(q.question, 3) == retriever.search(q.question, 3)
    assert loaded.hash == retriever.hash
    clear_cache()
    a = BM25Retriever.from_corpus(bench.corpus)
    b = BM25Retriever.from_corpus([dict(d) for d in bench.corpus])  # equal content, new objects
    c = BM25Retriever.from_corpus(bench.corpus[:-1])
    assert a is b and a is not c


def test_corpus_without_title_field() -> None:
    corpus = [{"id": "1", "contents": '"Alpha Beta"\nAlpha Beta is a town.'},
              {"id": "2", "contents": '"Gamma"\nGamma is a river.'}]
    r = BM25Retriever(corpus)
    assert r.titles() == {"1": "Alpha Beta", "2": "Gamma"}
    assert r.search("river", 2)[0].id == "2"


# ------------------------------------------------------------------ tools
def test_search_observation_format(bench: Benchmark, retriever: BM25Retriever) -> None:
    env = SearchEnvironment(retriever, top_k=3, snippet_chars=80)
    obs, hits = env.search(bench.questions[0].question)
    lines = obs.splitlines()
    assert len(lines) == len(hits) == 3
    for i, (line, h) in enumerate(zip(lines, hits), 1):
        assert line.startswith(f"{i}. [{h.id}] {h.title}: ")
        assert len(line) <= len(f"{i}. [{h.id}] {h.title}: ") + 81
    obs, hits = env.search("   ")
    assert hits == [] and "Empty" in obs
    obs, hits = env.search("qqqzzz")
    assert hits == [] and "No results" in obs


def test_read_accepts_sloppy_references(bench: Benchmark, retriever: BM25Retriever) -> None:
    env = SearchEnvironment(retriever)
    _, hits = env.search(bench.questions[1].question)
    first = hits[0]
    line2 = env.search(bench.questions[1].question)[0].splitlines()[1]
    cases = {
        first.id: first.id, f"[{first.id}]": first.id, first.id.upper(): first.id,
        f'"{first.title}"': first.id, first.title.lower(): first.id, f" {first.title}. ": first.id,
        "1": first.id, "[1]": first.id, "#2": hits[1].id, "result 3": hits[2].id,
        line2: hits[1].id,  # a pasted result line
        first.title[:-1]: first.id,  # one letter short: fuzzy
    }
    for ref, want in cases.items():
        obs, doc = env.read(ref)
        assert doc is not None and doc["id"] == want, (ref, obs)
        assert obs.splitlines()[0].endswith(f"[{want}] {doc['title']}") or "closest match" in obs


def test_read_prefers_exact_lookalike_and_warns(bench: Benchmark, retriever: BM25Retriever) -> None:
    titles = [d["title"] for d in bench.corpus]
    a, b = next((a, b) for i, a in enumerate(titles) for b in titles[i + 1:] if _one_letter_apart(a, b))
    env = SearchEnvironment(retriever)
    for t in (a, b):
        obs, doc = env.read(t)
        assert doc is not None and doc["title"] == t
        other = b if t == a else a
        assert "similar titles" in obs and other in obs


def test_read_not_found_is_an_observation(bench: Benchmark, retriever: BM25Retriever) -> None:
    env = SearchEnvironment(retriever)
    for ref in ("", "Completely Unknown Entity", "7", "[doc9999]"):
        obs, doc = env.read(ref)
        assert doc is None and "No document matches" in obs and "SEARCH" in obs
    env.search(bench.questions[0].question)
    obs, doc = env.read("9")  # out of range rank
    assert doc is None and "Last results" in obs


# ------------------------------------------------------------------ metrics
@pytest.mark.parametrize("pred, golds, em, f", [
    ("Paris", ["Paris"], 1.0, 1.0),
    ("the Velm River.", ["Velm River"], 1.0, 1.0),
    ("  VELM   river!! ", ["Velm River"], 1.0, 1.0),
    ("An apple", ["apple"], 1.0, 1.0),
    ("Velm", ["Velm River", "Velm"], 1.0, 1.0),  # max over aliases
    ("Velm", ["Velm River"], 0.0, 2 / 3),
    ("Varnok Tellin", ["Varnok Tellis"], 0.0, 0.5),
    ("1962", "1962", 1.0, 1.0),  # a bare string gold
    ("born in 1962", ["1962"], 0.0, 0.5),
    ("", ["1962"], 0.0, 0.0),
    (None, ["x"], 0.0, 0.0),
    ("the", ["a"], 1.0, 1.0),  # both normalise to empty
    ("anything", [], 0.0, 0.0),
    ("Ashen Drift", ["The Ashen Drift"], 1.0, 1.0),
])
def test_em_f1(pred, golds, em, f) -> None:
    assert exact_match(pred, golds) == em
    assert f1(pred, golds) == pytest.approx(f)


def test_normalize_answer() -> None:
    assert normalize_answer("The  Quick, brown-fox's  a tale!") == "quick brownfoxs tale"
    assert normalize_answer("Theory of an Atheist") == "theory of atheist"  # articles only as words
