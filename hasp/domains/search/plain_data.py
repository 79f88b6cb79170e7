"""The plain data format a user brings: questions ``{question, answers[, id]}`` and a corpus
``{id, title, text}``, each as jsonl or csv.

Why a format of its own: the benchmark formats (HotpotQA, MuSiQue, the generated benchmark) carry hop
counts, support chains and title-prefixed contents that a user's own questions do not have. Here
everything else is optional: ``id`` defaults to the row's line, ``answer`` (one string) may stand
for ``answers``, csv ``answers`` are split on ``|``, ``hops`` defaults to 1 and ``support`` (doc ids of
the gold chain) to none; a corpus row may give ``contents`` instead of ``text``.

A file is either the questions (the corpus is ``corpus.jsonl`` or ``corpus.csv`` beside it) or a
folder holding ``questions.{jsonl,csv}`` and ``corpus.{jsonl,csv}``. A malformed row (no question,
no answer, a corpus row without an id or text, a duplicate id) is skipped with one warning line that
names file, line and field, and counted in the ``LoadReport``; the other rows still load. A file
without one usable row is an error.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hasp.domains.jsonl import decode_text, json_file_objects
from hasp.domains.search.generator import BenchmarkFormatError, QAItem

__all__ = ["QUESTION_FILES", "CORPUS_FILES", "is_plain_row", "load_plain", "questions_file"]

QUESTION_FILES = ("questions.jsonl", "questions.csv")
CORPUS_FILES = ("corpus.jsonl", "corpus.csv")
#: separator of several accepted answers in one csv cell
CSV_ANSWER_SEP = "|"


def is_plain_row(row: dict[str, Any]) -> bool:
    """A row of the plain question format (``question`` and ``answers`` or ``answer``, nothing of a benchmark)."""
    return "question" in row and ("answers" in row or "answer" in row) and not (
        {"context", "paragraphs", "supporting_facts", "query", "pid", "evidences"} & set(row))


def questions_file(path: Path) -> Path:
    """The questions file of ``path`` (itself, or the one inside a folder)."""
    if path.is_dir():
        found = [path / n for n in QUESTION_FILES if (path / n).is_file()]
        if not found:
            raise BenchmarkFormatError(f"{path}: a plain data folder holds {' or '.join(QUESTION_FILES)}")
        return found[0]
    return path


def _rows(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """``("<file>:<line>", row)`` of a jsonl or csv file (csv lines count the header as line 1)."""
    if path.suffix.lower() == ".csv":
        text = decode_text(path.read_bytes(), path, BenchmarkFormatError)
        reader = csv.DictReader(io.StringIO(text))
        for row in reader:
            yield f"{path}:{reader.line_num}", {k.strip(): v for k, v in row.items() if isinstance(k, str)}
        return
    for lineno, row in json_file_objects(path, BenchmarkFormatError):
        yield f"{path}:{lineno}", row


def _answers(row: dict[str, Any], csv_file: bool) -> list[str] | str:
    """The accepted answers, or why there are none."""
    value = row.get("answers", row.get("answer"))
    if isinstance(value, str):
        value = value.split(CSV_ANSWER_SEP) if csv_file and "answers" in row else [value]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = [str(value)]
    if not isinstance(value, list) or not value or not all(isinstance(a, (str, int, float)) for a in value):
        return "field 'answers' must be a non-empty list of strings (or 'answer' one string)"
    answers = list(dict.fromkeys(str(a).strip() for a in value if str(a).strip()))
    return answers or "field 'answers' holds only empty strings"


def _question(where: str, row: dict[str, Any], i: int, csv_file: bool) -> QAItem | str:
    question = row.get("question")
    if not isinstance(question, str) or not question.strip():
        return "field 'question' must be a non-empty string"
    answers = _answers(row, csv_file)
    if isinstance(answers, str):
        return answers
    raw_id = row.get("id")
    qid = str(raw_id).strip() if isinstance(raw_id, (str, int)) and str(raw_id).strip() else f"q{i}"
    support = row.get("support") or []
    if isinstance(support, str):
        support = [s for s in support.split(CSV_ANSWER_SEP) if s.strip()]
    if not isinstance(support, list) or not all(isinstance(s, str) for s in support):
        return "field 'support' must be a list of doc ids"
    hops = row.get("hops") or max(1, len(support))
    try:
        hops = int(hops)
    except (TypeError, ValueError):
        return "field 'hops' must be a whole number"
    return QAItem(id=qid, question=question.strip(), answers=answers, hops=max(1, hops), support=list(support))


def _doc(row: dict[str, Any]) -> dict[str, str] | str:
    raw_id = row.get("id")
    if not isinstance(raw_id, (str, int)) or isinstance(raw_id, bool) or not str(raw_id).strip():
        return "field 'id' (the document id) is missing or empty"
    text = row.get("text", row.get("contents"))
    if not isinstance(text, str) or not text.strip():
        return "field 'text' must be a non-empty string"
    title = row.get("title") if isinstance(row.get("title"), str) else ""
    title = title.strip() or text.strip().split("\n", 1)[0][:80]
    return {"id": str(raw_id).strip(), "title": title, "contents": f'"{title}"\n{text.strip()}'}


def load_plain(path: str | Path, report: Any) -> tuple[list[QAItem], list[dict[str, str]]]:
    """Questions and corpus of a plain data file or folder (see the module doc); skips go to ``report``."""
    qfile = questions_file(Path(path))
    if not qfile.is_file():
        raise FileNotFoundError(f"{qfile}: no such file")
    items: list[QAItem] = []
    seen: dict[str, str] = {}
    for i, (where, row) in enumerate(_rows(qfile), 1):
        item = _question(where, row, i, qfile.suffix.lower() == ".csv")
        if isinstance(item, str):
            report.skip(where, item)
            continue
        if item.id in seen:
            report.skip(where, f"field 'id': duplicate question id {item.id!r} (first at {seen[item.id]})")
            continue
        seen[item.id] = where
        items.append(item)
    if not items:
        raise BenchmarkFormatError(f"{qfile}: no usable question row ({report.summary()})")
    corpus: list[dict[str, str]] = []
    cfile = next((qfile.parent / n for n in CORPUS_FILES if (qfile.parent / n).is_file()), None)
    docs: dict[str, str] = {}
    for where, row in _rows(cfile) if cfile is not None else ():
        doc = _doc(row)
        if isinstance(doc, str):
            report.skip(where, doc)
        elif doc["id"] in docs:
            report.skip(where, f"field 'id': duplicate document id {doc['id']!r} (first at {docs[doc['id']]})")
        else:
            docs[doc["id"]] = where
            corpus.append(doc)
    report.loaded = len(items)
    return items, corpus
