"""The plain data format: questions {question, answers[, id]} and a corpus {id, title, text}, jsonl or csv."""

from __future__ import annotations

import json

import pytest

from hasp.config import load_params
from hasp.domains.search.generator import BenchmarkFormatError
from hasp.eval.datasets import DatasetSpecError, load_eval_dataset, parse_dataset_spec

ROWS = [{"question": "Where was Ana Morro born?", "answers": ["Telvik"]},
        {"question": "Who founded Brightwell Labs?", "answer": "Ana Morro", "id": "b2"},
        {"answers": ["x"]},
        {"question": "What colour is the Verzi flag?", "answers": ["green", "Green"]}]
CORPUS_CSV = ("id,title,text\nd1,Ana Morro,Ana Morro was born in Telvik in 1961.\n"
              "d2,Brightwell Labs,Brightwell Labs was founded by Ana Morro.\n,No id,text\n"
              "d3,Verzi,The flag of Verzi is green.\n")


@pytest.fixture
def folder(tmp_path):
    d = tmp_path / "mine"
    d.mkdir()
    (d / "questions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    (d / "corpus.csv").write_text(CORPUS_CSV)
    return d


@pytest.mark.parametrize("spec", ["{d}", "qa:{d}", "{d}/questions.jsonl", "qa:{d}/questions.jsonl"])
def test_a_folder_or_its_questions_file_loads_with_bad_rows_skipped_and_named(folder, spec, caplog):
    ds = load_eval_dataset(parse_dataset_spec(spec.format(d=folder)), load_params(None))
    assert [q.id for q in ds.questions] == ["q1", "b2", "q4"]
    assert ds.questions[1].answers == ["Ana Morro"] and ds.questions[2].answers == ["green", "Green"]
    assert ds.corpus_size == 3 and ds.retriever.search("Telvik born", 1)[0].id == "d1"
    assert f"{folder}/questions.jsonl:3: skipped record: field 'question' must be a non-empty string" in caplog.text
    assert f"{folder}/corpus.csv:4: skipped record: field 'id' (the document id) is missing or empty" in caplog.text
    assert "skipped 2" in ds.load_report


def test_csv_questions_split_answers_on_a_bar(tmp_path):
    (tmp_path / "questions.csv").write_text("question,answers\nWhat colour is Verzi's flag?,green|olive\n")
    (tmp_path / "corpus.jsonl").write_text(json.dumps({"id": "v", "text": "Verzi's flag is green."}) + "\n")
    ds = load_eval_dataset(parse_dataset_spec(str(tmp_path / "questions.csv")), load_params(None))
    assert ds.questions[0].answers == ["green", "olive"] and ds.questions[0].id == "q1"


def test_no_usable_row_or_no_corpus_is_one_error_line(tmp_path):
    (tmp_path / "questions.jsonl").write_text(json.dumps({"question": "Q?"}) + "\n")
    with pytest.raises(BenchmarkFormatError, match=r"questions.jsonl: no usable question row"):
        load_eval_dataset(parse_dataset_spec(f"qa:{tmp_path}"), load_params(None))
    (tmp_path / "questions.jsonl").write_text(json.dumps({"question": "Q?", "answers": ["a"]}) + "\n")
    with pytest.raises(DatasetSpecError, match="no corpus to search"):
        load_eval_dataset(parse_dataset_spec(f"qa:{tmp_path}"), load_params(None))
