"""The generated benchmark's version 2 (``data.version: 2``) and version 1 kept as it is.

Everything is read back from the folder ``hasp data prepare`` writes (``prepare_data``), with the
loader and the score the search episodes use, so the tests see what a run sees.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from hasp.config import Params, load_params
from hasp.domains.search.generator import template_catalogue as v1_catalogue
from hasp.domains.search.generator_v2 import generate_benchmark_v2, template_catalogue
from hasp.domains.search.metrics import normalize_answer
from hasp.domains.search.prepare import prepare_data
from hasp.domains.search.task import SearchTask, score
from hasp.evolve.dvc_yaml import dvc_yaml
from hasp.evolve.phase_graph import DVC_LAYOUT, cache_key

ROOT = Path(__file__).resolve().parents[1]
SPLITS = ("train", "val", "test")
#: sha256 of version 1's files for the default data params (seed 7, 80 one-hop questions, 28/12/40)
V1_DEFAULT_SHA256 = {
    "corpus": "660d0cf8448b2596a5bf9154a6d2e67dc8a241f8dc35016fa61fa5d6c09ccb74",
    "train": "f6b08b7e89a3614ea17e9a6954349ccd071c29d4d84b405a4ae0e706f79e5a20",
    "val": "206a4a3d67b6f4eb921af48422f7a3a9b4fc95806647c7081c79f1310c636a7c",
    "test": "7a1530218d6a383ac05f594c33aea601c1259f9fd8e98a2e50c432f12e432fe4",
}
MIXED_HOPS = {1: 0.4, 2: 0.3, 3: 0.3}


def _prepare(tmp: Path, **data: object) -> Path:
    prepare_data(Params.model_validate({"data": data}), tmp)
    return tmp


def _rows(folder: Path, split: str) -> list[dict]:
    return [json.loads(line) for line in (folder / f"{split}.jsonl").read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def v2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default data params with version 2 and a 1-3 hop mix, 150 questions."""
    return _prepare(tmp_path_factory.mktemp("v2"), version=2, n_questions=150, hop_weights=MIXED_HOPS)


@pytest.fixture(scope="module")
def plan(v2: Path) -> dict:
    return json.loads((v2 / "templates.json").read_text(encoding="utf-8"))


# ------------------------------------------------------------------ version 1 stays as it is
def test_version_1_files_for_the_default_data_params_are_pinned(tmp_path: Path) -> None:
    assert Params().data.version == 1 and load_params(ROOT / "params.yaml").data.version == 1
    out = _prepare(tmp_path)
    got = {name: hashlib.sha256((out / f"{name}.jsonl").read_bytes()).hexdigest() for name in V1_DEFAULT_SHA256}
    assert got == V1_DEFAULT_SHA256
    rows = {s: _rows(out, s) for s in SPLITS}
    assert all(set(r) == {"id", "question", "answers", "hops", "support"} for s in SPLITS for r in rows[s])
    record = json.loads((out / "templates.json").read_text(encoding="utf-8"))
    assert record["version"] == 1 and record["held_out"] == {"relations": [], "templates": []}
    assert record["templates"] == v1_catalogue() and len(record["templates"]) == 18
    for s in SPLITS:  # each split's templates are phrasings its questions really have
        texts = {record["templates"][t]["text"] for t in record["splits"][s]}
        assert all(any(q["question"].startswith(x.split("{x}")[0]) and q["question"].endswith(x.split("{x}")[1])
                       for x in texts) for q in rows[s])


# ------------------------------------------------------------------ held-out templates
def test_no_test_only_phrasing_or_relation_appears_in_train_or_val(v2: Path, plan: dict) -> None:
    held_relations, held_templates = set(plan["held_out"]["relations"]), set(plan["held_out"]["templates"])
    assert len(held_relations) == 3
    catalogue = template_catalogue()
    assert plan["templates"] == catalogue
    # every phrasing of a held-out relation is held out, and one phrasing of every other relation
    for rel in {t["relation"] for t in catalogue.values()}:
        ids = {k for k, t in catalogue.items() if t["relation"] == rel}
        assert len(ids) >= 3
        assert ids <= held_templates if rel in held_relations else len(ids & held_templates) == 1
    for s in ("train", "val"):
        rows = _rows(v2, s)
        assert rows and all(r["seen"] for r in rows)
        assert not {r["template"] for r in rows} & held_templates
        assert not {rel for r in rows for rel in r["relations"]} & held_relations  # bridges included
        assert sorted({r["template"] for r in rows}) == plan["splits"][s]
    test = _rows(v2, "test")
    assert sorted({r["template"] for r in test}) == plan["splits"]["test"]
    asked = {r["relations"][-1] for r in test}
    assert held_relations <= asked  # each held-out relation is asked in test
    assert any(r["template"] in held_templates and r["relations"][-1] not in held_relations for r in test)


def test_seen_says_whether_train_or_val_use_the_template(v2: Path, plan: dict) -> None:
    training = {r["template"] for s in ("train", "val") for r in _rows(v2, s)}
    test = _rows(v2, "test")
    unseen = [r for r in test if not r["seen"]]
    assert unseen and len(unseen) < len(test)
    assert all(r["template"] not in training for r in unseen)
    assert all(r["template"] in training for r in test if r["seen"])
    assert plan["unseen_in_test"] == sorted({r["template"] for r in unseen})
    for r in test:  # the template id names the phrasing the question is asked in
        head, tail = plan["templates"][r["template"]]["text"].split("{x}")
        assert r["question"][len(head):].endswith(tail) and r["question"].lower().startswith(head.lower())
        assert r["template"].startswith(r["relations"][-1] + "/")


# ------------------------------------------------------------------ answers and the corpus
def test_aliases_are_scored_correct_by_the_search_score(v2: Path) -> None:
    task = SearchTask.load(v2)
    rows = [r for s in SPLITS for r in _rows(v2, s)]
    items = {q.id: q for s in SPLITS for q in task.questions(s)}
    forms = {"surname": 0, "in_year": 0, "number_word": 0}
    for r in rows:
        golds = items[r["id"]].answers
        assert golds == r["answers"] and len({normalize_answer(a) for a in golds}) == len(golds)
        for alias in golds:
            assert score(f"{alias.upper()}.", golds)[0] == 1.0
        canonical = golds[0]
        if r["relations"][-1] in ("person.birth_year", "company.founded", "band.formed", "city.founded"):
            assert f"in {canonical}" in golds and score(f"In {canonical}", golds)[0] == 1.0
            assert score(str(int(canonical) + 1), golds)[0] == 0.0
            forms["in_year"] += 1
        if r["relations"][-1] in ("band.members", "city.districts"):
            word = golds[1]
            assert word.isalpha() and score(word.capitalize(), golds) == (1.0, 1.0)
            forms["number_word"] += 1
        if len(canonical.split()) == 2 and canonical.split()[1] in golds:
            surname = canonical.split()[1]
            assert score(surname, golds)[0] == 1.0 and score(f"Mx {surname}", golds)[0] == 0.0
            forms["surname"] += 1
    assert all(forms.values()), forms


def test_every_answer_is_stated_in_its_last_support_document(v2: Path) -> None:
    docs = {d["id"]: f" {normalize_answer(d['contents'])} " for d in map(json.loads, open(v2 / "corpus.jsonl"))}
    for r in (r for s in SPLITS for r in _rows(v2, s)):
        assert any(f" {normalize_answer(a)} " in docs[r["support"][-1]] for a in r["answers"]), r["id"]


def test_the_corpus_writes_dates_and_numbers_in_several_formats(v2: Path) -> None:
    text = "\n".join(json.loads(line)["contents"] for line in open(v2 / "corpus.jsonl"))
    months = "January|February|March|April|May|June|July|August|September|October|November|December"
    patterns = {"in_year": r"founded in \d{4}\b", "month_year": rf"in (?:{months}) \d{{4}}",
                "the_year": r"in the year \d{4}", "bare_birth_year": r"\(born \d{4} in ",
                "us_date": rf"\(born (?:{months}) \d+, \d{{4}}, in ",
                "uk_date": rf"\(born \d+ (?:{months}) \d{{4}} in ",
                "number_word": r"\b(?:three|four|five|six|seven|eight|nine|ten|eleven|twelve) "
                               r"(?:members|musicians|districts)",
                "number_digits": r"\b\d+ (?:members|musicians|districts)", "thousands": r"\d,\d{3} km long"}
    missing = [name for name, pat in patterns.items() if not re.search(pat, text)]
    assert missing == []


def test_near_name_distractors_are_in_the_corpus_and_are_not_the_gold(v2: Path) -> None:
    titles = {json.loads(line)["id"]: json.loads(line)["title"] for line in open(v2 / "corpus.jsonl")}
    rows = [r for s in SPLITS for r in _rows(v2, s)]
    with_distractors = [r for r in rows if r["distractors"]]
    assert len(with_distractors) > len(rows) / 2
    for r in with_distractors:
        chain = [titles[d] for d in r["support"]] + [r["answers"][0]]
        for d in r["distractors"]:
            assert d["name"] in titles.values() and d["name"] not in chain
            assert score(d["name"], r["answers"])[0] == 0.0
            assert d["answer"] is None or score(d["answer"], r["answers"])[0] == 0.0  # different facts
            near, real = d["name"].split(), chain[d["hop"]].split()
            assert len(near) == len(real) and sum(a != b for a, b in zip(near, real, strict=True)) == 1


def test_hop_weights_decide_a_one_to_three_hop_mix(v2: Path) -> None:
    hops = [r["hops"] for s in SPLITS for r in _rows(v2, s)]
    assert {h: hops.count(h) > 20 for h in (1, 2, 3)} == {1: True, 2: True, 3: True}
    assert all(len(r["relations"]) == r["hops"] == len(r["support"]) for s in SPLITS for r in _rows(v2, s))
    with pytest.raises(ValidationError, match="data.hop_weights"):
        Params.model_validate({"data": {"version": 2, "hop_weights": {2: 0.5, 4: 0.5}}})
    Params.model_validate({"data": {"version": 1, "hop_weights": {2: 0.5, 4: 0.5}}})
    with pytest.raises(ValueError, match="1-3"):
        generate_benchmark_v2(7, 10, hop_weights={4: 1.0})


# ------------------------------------------------------------------ determinism and the pipeline
def test_the_same_seed_gives_identical_files_and_another_seed_other_ones(tmp_path: Path) -> None:
    kw = {"version": 2, "n_questions": 60, "hop_weights": MIXED_HOPS}
    a, b = _prepare(tmp_path / "a", **kw), _prepare(tmp_path / "b", **kw)
    c = _prepare(tmp_path / "c", seed=8, **kw)
    names = sorted(p.name for p in a.iterdir())
    assert names == ["corpus.jsonl", "templates.json", "test.jsonl", "train.jsonl", "val.jsonl"]
    assert [(a / n).read_bytes() for n in names] == [(b / n).read_bytes() for n in names]
    assert (a / "corpus.jsonl").read_bytes() != (c / "corpus.jsonl").read_bytes()
    assert (a / "templates.json").read_bytes() != (c / "templates.json").read_bytes()


def test_data_version_reaches_the_prepare_stage_and_its_cache_key() -> None:
    stage = yaml.safe_load(dvc_yaml())["stages"]["prepare"]
    assert "data" in stage["params"] and "outputs/data/templates.json" in stage["outs"]
    assert "hasp/domains/search/generator_v2.py" in stage["deps"]
    v1, v2 = Params(), Params.model_validate({"data": {"version": 2}})
    assert cache_key("prepare", v1, DVC_LAYOUT) != cache_key("prepare", v2, DVC_LAYOUT)


# ------------------------------------------------------------------ seen / unseen templates in every table
class AnswersSeenTemplatesDouble:
    """A policy double that answers a question with its gold answer when training used its template,
    and with a wrong name otherwise: every table must then split EM 1 (seen) from EM 0 (unseen)."""

    def __init__(self, rows: list[dict]):
        self.rows = rows

    def chat(self, messages, **kw):
        from doubles import ReplyDouble

        user = "\n".join(m["content"] for m in messages if m["role"] == "user")
        row = next(r for r in self.rows if r["question"] in user)
        return ReplyDouble(f"Thought: done.\nAction: FINAL[{row['answers'][0] if row['seen'] else 'Nobody Known'}]")


def test_evaluations_report_seen_and_unseen_templates_apart(v2: Path, tmp_path: Path) -> None:
    from hasp.eval.datasets import load_eval_dataset, parse_dataset_spec
    from hasp.eval.paired import em_by_qid, paired_gain
    from hasp.eval.report import to_markdown
    from hasp.eval.runner import run_eval
    from hasp.eval.tracking import cell_metrics

    rows = _rows(v2, "test")
    p = Params().model_copy(update={"llm": Params().llm.model_copy(update={"max_concurrency": 1})})
    ds = load_eval_dataset(parse_dataset_spec(f"generated:{v2}"), p, split="test", limit=12)
    assert set(ds.template_seen) == {str(q.id) for q in ds.questions}
    seen = sum(ds.template_seen.values())
    assert 0 < seen < 12  # the test split rotates seen and held-out templates
    res = run_eval(p, [ds], ["react"], policy=AnswersSeenTemplatesDouble(rows), library_root=None,
                   out_dir=tmp_path / "eval", progress=False)
    cell = res.metrics()[ds.name]["react"]
    by = cell["em_by_template"]
    assert (by["seen"]["mean"], by["seen"]["n"]) == (1.0, seen) and (by["unseen"]["mean"], by["unseen"]["n"]) == (0.0, 12 - seen)
    ceiling = cell["extractor_ceiling"]["by_template"]
    assert ceiling["seen"]["n"] + ceiling["unseen"]["n"] == cell["extractor_ceiling"]["n"]
    assert cell_metrics(cell)["em_template_unseen"] == 0.0 and cell_metrics(cell)["n_template_seen"] == seen
    assert "EM seen/unseen templates" in to_markdown(res.metrics()) and "seen 1.000" in to_markdown(res.metrics())
    after = em_by_qid(tmp_path / "eval" / ds.name / "react.jsonl")
    gain = paired_gain({q: 0.0 for q in after}, after, template_of=ds.template_seen)
    assert gain["by_template"]["seen"]["mean"] == 1.0 and gain["by_template"]["unseen"]["mean"] == 0.0


def test_a_seen_flag_that_is_not_a_boolean_is_one_error_naming_file_and_line(v2: Path, tmp_path: Path) -> None:
    from hasp.domains.search.generator import BenchmarkFormatError, load_template_seen

    rows = _rows(v2, "test")[:3]
    rows[1]["seen"] = "yes"
    bad = tmp_path / "test.jsonl"
    bad.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with pytest.raises(BenchmarkFormatError, match=rf"^{re.escape(str(bad))}:2: field 'seen' must be true or false"):
        load_template_seen(bad)
