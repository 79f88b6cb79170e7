"""Loaders for public multi-hop QA benchmarks in their own file formats.

Each loader takes a path and returns the questions as :class:`QAItem` plus a Search-R1 style
corpus ``[{id, title, contents}]`` built from the context paragraphs that ship with the questions:

* HotpotQA distractor (``_id, question, answer, supporting_facts, context [[title, [sentences]]]``)
* 2WikiMultihopQA (same context layout, plus ``evidences``). Some published copies hold records
  without ``context`` whose list fields are stringified; those are skipped, logged and counted in a
  :class:`LoadReport` instead of failing the whole file.
* MuSiQue (``id, question, answer, answer_aliases, paragraphs [{idx, title, paragraph_text,
  is_supporting}], question_decomposition``)
* plain ``qa`` data (``hasp.domains.search.plain_data``): a user's questions ``{question, answers[, id]}``
  and corpus ``{id, title, text}``, jsonl or csv.
* AgentFlow ``data.json`` (a JSON array of ``query``/``question``, ``answer``, ``pid``). It has no
  paragraphs, so its corpus is empty and the caller must bring a retriever (e.g. a remote one).

Corpus documents are deduplicated on (title, text) across questions, and their ids are a hash of
that content (``hotpot-3fa9c2d1e0``): the same paragraph gets the same id whichever subset, order
or split of the file is loaded, so DVC/Prefect caches and recorded trajectories stay valid.

HotpotQA and 2Wiki dev files are published as one JSON array, the samples as jsonl; both layouts
are read. Anything malformed other than the documented 2Wiki case raises one
:class:`BenchmarkFormatError` naming the file and the line (jsonl) or item (JSON array).

:func:`paper_splits` reproduces the split protocol of the HASP paper (App. D.1, after AgentFlow):
the first N rows are the test set, the rest is the training pool, and the seed/val pools for
evolution are drawn from that tail after a seeded shuffle.
"""

from __future__ import annotations

import ast
import hashlib
import json
import logging
import random
import re
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from hasp.domains.jsonl import decode_text, json_file_objects

from .generator import BenchmarkFormatError, QAItem

__all__ = [
    "DATASET_KINDS",
    "Dataset",
    "LoadReport",
    "detect_kind",
    "load_2wiki",
    "load_agentflow",
    "load_dataset",
    "load_hotpotqa",
    "load_musique",
    "paper_splits",
    "paragraph_id",
    "write_dataset",
]

log = logging.getLogger(__name__)

Corpus = list[dict[str, str]]

DATASET_KINDS = ("hotpotqa", "2wiki", "musique", "agentflow", "qa")

# AgentFlow appends an output-format instruction for its own <answer> tags to some questions.
# Our agent answers with FINAL[...], so the instruction would only confuse the policy.
_AGENTFLOW_FORMAT = re.compile(
    r"\s*When ready, output the final answer enclosed in <answer> and </answer> tags\..*\Z", re.DOTALL)
_MUSIQUE_HOPS = re.compile(r"^(\d+)hop")


# --------------------------------------------------------------------------------------------
# Reports
# --------------------------------------------------------------------------------------------
@dataclass
class LoadReport:
    """What a loader dropped and why. ``reasons`` counts skipped records per reason."""

    skipped: int = 0
    reasons: Counter[str] = field(default_factory=Counter)
    loaded: int = 0

    def skip(self, where: str, reason: str) -> None:
        self.skipped += 1
        self.reasons[reason] += 1
        log.warning("%s: skipped record: %s", where, reason)

    def summary(self) -> str:
        if not self.skipped:
            return f"loaded {self.loaded}, skipped 0"
        why = ", ".join(f"{n} {'row' if n == 1 else 'rows'} {r}" for r, n in self.reasons.most_common())
        return f"loaded {self.loaded}, skipped {self.skipped} ({why})"


class Dataset(NamedTuple):
    """Uniform result of :func:`load_dataset`."""

    kind: str
    questions: list[QAItem]
    corpus: Corpus
    report: LoadReport


# --------------------------------------------------------------------------------------------
# Reading records
# --------------------------------------------------------------------------------------------
def _first_char(path: Path) -> str:
    """First non-whitespace character, read as bytes so a binary file is left to the line reader
    (which names the bad line) instead of failing here with a bare codec error."""
    with path.open("rb") as fh:
        while True:
            chunk = fh.read(4096)
            if not chunk:
                return ""
            stripped = chunk.lstrip()
            if stripped:
                return chr(stripped[0])


def _iter_records(path: str | Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield ``(where, record)`` from a jsonl file or a JSON-array file.

    ``where`` is ``"<file>:<line>"`` for jsonl and ``"<file> item <i>"`` (0-based) for an array,
    so every error message can point at the offending row."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such file")
    if _first_char(p) == "[":
        try:
            data = json.loads(decode_text(p.read_bytes(), p, BenchmarkFormatError))
        except json.JSONDecodeError as exc:
            raise BenchmarkFormatError(f"{p}:{exc.lineno}: invalid JSON ({exc.msg})") from None
        if not isinstance(data, list):  # pragma: no cover - '[' always parses to a list
            raise BenchmarkFormatError(f"{p}: expected a JSON array of records")
        for i, row in enumerate(data):
            where = f"{p} item {i}"
            if not isinstance(row, dict):
                raise BenchmarkFormatError(f"{where}: expected a JSON object, got {type(row).__name__}")
            yield where, row
        return
    for lineno, row in json_file_objects(p, BenchmarkFormatError):
        yield f"{p}:{lineno}", row


def _require_str(row: Mapping[str, Any], key: str, where: str) -> str:
    value = row.get(key)
    if not isinstance(value, str) or not value.strip():
        got = "missing" if key not in row else f"got {type(value).__name__} {str(value)[:40]!r}"
        raise BenchmarkFormatError(f"{where}: field '{key}' must be a non-empty string ({got})")
    return value.strip()


def _require_id(row: Mapping[str, Any], key: str, where: str) -> str:
    value = row.get(key)
    if isinstance(value, bool) or not isinstance(value, (str, int)) or not str(value).strip():
        raise BenchmarkFormatError(f"{where}: field '{key}' (the question id) is missing or empty")
    return str(value).strip()


class _Ids:
    """Rejects a question id seen twice in one file (splits and caches key on it)."""

    def __init__(self) -> None:
        self._seen: dict[str, str] = {}

    def check(self, qid: str, where: str) -> str:
        if qid in self._seen:
            raise BenchmarkFormatError(f"{where}: duplicate question id {qid!r} (first at {self._seen[qid]})")
        self._seen[qid] = where
        return qid


def _unique(values: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(v for v in values if v))


# --------------------------------------------------------------------------------------------
# Corpus
# --------------------------------------------------------------------------------------------
def paragraph_id(prefix: str, title: str, text: str) -> str:
    """Stable id of a paragraph: ``<prefix>-`` plus 10 hex digits of sha256(title, text)."""
    digest = hashlib.sha256(json.dumps([title, text], ensure_ascii=False).encode()).hexdigest()
    return f"{prefix}-{digest[:10]}"


class _CorpusBuilder:
    """Collects paragraphs in first-seen order, one document per distinct (title, text)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._docs: dict[str, dict[str, str]] = {}

    def add(self, title: str, text: str) -> str:
        title, text = title.strip(), text.strip()
        doc_id = paragraph_id(self.prefix, title, text)
        known = self._docs.get(doc_id)
        if known is None:
            contents = f'"{title}"\n{text}' if text else f'"{title}"'
            self._docs[doc_id] = {"id": doc_id, "title": title, "contents": contents, "_text": text}
        elif (known["title"], known["_text"]) != (title, text):  # pragma: no cover - 40-bit hash
            raise ValueError(f"paragraph id collision for {doc_id}: {known['title']!r} vs {title!r}")
        return doc_id

    def corpus(self) -> Corpus:
        return [{k: v for k, v in d.items() if k != "_text"} for d in self._docs.values()]


def _join_sentences(sentences: Sequence[str]) -> str:
    """HotpotQA sentences carry their own leading space, 2Wiki ones do not; join both cleanly."""
    out = ""
    for s in sentences:
        if out and s and not out[-1].isspace() and not s[0].isspace():
            out += " "
        out += s
    return out.strip()


def _literal_list(value: Any) -> Any:
    """A stringified Python/JSON list back to a list; anything else unchanged (or None if broken)."""
    if not isinstance(value, str):
        return value
    try:
        parsed = ast.literal_eval(value.strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return parsed if isinstance(parsed, list) else None


def _context_paragraphs(context: Any, where: str) -> list[tuple[str, str]]:
    """``[[title, [sentences]], ...]`` (or ``[title, "text"]``) -> [(title, text)]."""
    if not isinstance(context, list):
        raise BenchmarkFormatError(f"{where}: field 'context' must be a list of [title, sentences]")
    out: list[tuple[str, str]] = []
    for j, entry in enumerate(context):
        ok = isinstance(entry, (list, tuple)) and len(entry) >= 2 and isinstance(entry[0], str)
        body = entry[1] if ok else None
        if isinstance(body, list) and all(isinstance(s, str) for s in body):
            out.append((entry[0], _join_sentences(body)))
        elif isinstance(body, str):
            out.append((entry[0], body.strip()))
        else:
            raise BenchmarkFormatError(
                f"{where}: context[{j}] must be [title, [sentences]], got {str(entry)[:80]!r}")
    return out


def _support_titles(facts: Any) -> list[str]:
    """Titles from ``supporting_facts`` ([[title, sent_idx], ...]) in first-mention order.
    Tolerates enriched variants ([title, [idx], [sents], {...}]) by reading element 0 only."""
    if not isinstance(facts, list):
        return []
    return _unique([f[0] for f in facts if isinstance(f, (list, tuple)) and f and isinstance(f[0], str)])


UNANSWERABLE = "unanswerable from their context"


def _context_item(row: Mapping[str, Any], where: str, ids: _Ids, builder: _CorpusBuilder,
                  facts: Any, report: LoadReport) -> QAItem | None:
    """The question of a context-style row, or None (skipped and counted in ``report``) when its
    supporting titles are missing from its own context: such a row would otherwise load as an
    answerable question with no support, and count as a policy failure when it is not one."""
    qid = ids.check(_require_id(row, "_id", where), where)
    question = _require_str(row, "question", where)
    answer = _require_str(row, "answer", where)
    paragraphs = _context_paragraphs(row.get("context"), where)
    titles = _support_titles(facts)
    present = {title.strip() for title, _ in paragraphs}
    missing = [t for t in titles if t.strip() not in present]
    if not titles or missing:
        report.skip(where, UNANSWERABLE)
        return None
    by_title: dict[str, list[str]] = {}
    for title, text in paragraphs:
        by_title.setdefault(title.strip(), []).append(builder.add(title, text))
    support = _unique([d for t in titles for d in by_title.get(t.strip(), [])])
    return QAItem(id=qid, question=question, answers=[answer], hops=len(titles), support=support)


def _finish(path: str | Path, items: list[QAItem], report: LoadReport) -> LoadReport:
    report.loaded = len(items)
    if report.skipped:
        log.warning("%s: %s", path, report.summary())
    return report


# --------------------------------------------------------------------------------------------
# Loaders
# --------------------------------------------------------------------------------------------
def load_hotpotqa(path: str | Path, *, id_prefix: str = "hotpot",
                  report: LoadReport | None = None) -> tuple[list[QAItem], Corpus]:
    """HotpotQA distractor format. ``support`` = paragraphs named in ``supporting_facts``;
    ``hops`` = number of distinct supporting titles (2 for HotpotQA). Rows whose supporting
    titles are not in their own context are skipped and counted in ``report`` (when given) as
    "unanswerable from their context"; :func:`load_dataset` always passes one."""
    builder, ids, items = _CorpusBuilder(id_prefix), _Ids(), []
    report = report if report is not None else LoadReport()
    for where, row in _iter_records(path):
        if "context" not in row:
            raise BenchmarkFormatError(f"{where}: field 'context' is missing (is this the fullwiki "
                                       "test set? only the distractor format carries paragraphs)")
        item = _context_item(row, where, ids, builder, row.get("supporting_facts"), report)
        if item is not None:
            items.append(item)
    _finish(path, items, report)
    return items, builder.corpus()


def load_2wiki(path: str | Path, *, id_prefix: str = "2wiki") -> tuple[list[QAItem], Corpus, LoadReport]:
    """2WikiMultihopQA. Records without a usable ``context`` (missing, or stringified as a
    string) are skipped with a logged reason and counted in the returned :class:`LoadReport`;
    stringified ``supporting_facts`` next to a real context are parsed back."""
    builder, ids, items, report = _CorpusBuilder(id_prefix), _Ids(), [], LoadReport()
    for where, row in _iter_records(path):
        context = row.get("context")
        if context is None:
            report.skip(where, "missing context")
            continue
        if isinstance(context, str):
            report.skip(where, "context is a stringified list, not a list")
            continue
        facts = _literal_list(row.get("supporting_facts", []))
        if facts is None:
            report.skip(where, "supporting_facts is an unparsable string")
            continue
        item = _context_item(row, where, ids, builder, facts, report)
        if item is not None:
            items.append(item)
    _finish(path, items, report)
    return items, builder.corpus(), report


def _musique_aliases(row: Mapping[str, Any], where: str) -> list[str]:
    """``answer_aliases`` as strings. A non-string alias is an error, not ``str()``-ed: ``1``,
    ``None`` or ``{"a": 1}`` would otherwise become gold answers "1", "None", "{'a': 1}"."""
    aliases = _literal_list(row.get("answer_aliases") or [])
    if not isinstance(aliases, list):
        raise BenchmarkFormatError(f"{where}: field 'answer_aliases' must be a list of strings")
    for k, alias in enumerate(aliases):
        if not isinstance(alias, str):
            raise BenchmarkFormatError(f"{where}: field 'answer_aliases[{k}]' must be a string "
                                       f"(got {type(alias).__name__} {str(alias)[:40]!r})")
    return [a.strip() for a in aliases]


def _musique_flag(para: Mapping[str, Any], where: str, j: int) -> bool:
    """``is_supporting`` must be a JSON boolean: the string "false" is truthy in Python."""
    value = para.get("is_supporting", False)
    if not isinstance(value, bool):
        raise BenchmarkFormatError(f"{where}: field 'paragraphs[{j}].is_supporting' must be true or false "
                                   f"(got {type(value).__name__} {str(value)[:40]!r})")
    return value


def load_musique(path: str | Path, *, id_prefix: str = "musique",
                 report: LoadReport | None = None) -> tuple[list[QAItem], Corpus]:
    """MuSiQue. ``answers`` = answer + aliases; ``support`` = supporting paragraphs in hop order
    (from ``question_decomposition`` when present); ``hops`` from the id (``3hop1__...``).
    Rows marked ``answerable: false`` (the MuSiQue-Full distractors) are skipped and counted in
    ``report`` (when given): scoring them as normal questions would punish a correct abstention."""
    builder, ids, items = _CorpusBuilder(id_prefix), _Ids(), []
    report = report if report is not None else LoadReport()
    for where, row in _iter_records(path):
        qid = ids.check(_require_id(row, "id", where), where)
        answerable = row.get("answerable", True)
        if not isinstance(answerable, bool):
            raise BenchmarkFormatError(f"{where}: field 'answerable' must be true or false "
                                       f"(got {type(answerable).__name__} {str(answerable)[:40]!r})")
        if not answerable:
            report.skip(where, "marked answerable: false")
            continue
        question = _require_str(row, "question", where)
        answer = _require_str(row, "answer", where)
        aliases = _musique_aliases(row, where)
        paragraphs = row.get("paragraphs")
        if not isinstance(paragraphs, list):
            raise BenchmarkFormatError(f"{where}: field 'paragraphs' must be a list")
        doc_by_idx: dict[int, str] = {}
        supporting: list[int] = []
        for j, para in enumerate(paragraphs):
            if not (isinstance(para, dict) and isinstance(para.get("title"), str)
                    and isinstance(para.get("paragraph_text"), str)):
                raise BenchmarkFormatError(f"{where}: paragraphs[{j}] needs string 'title' and 'paragraph_text'")
            idx = para.get("idx", j)
            idx = idx if isinstance(idx, int) else j
            doc_by_idx[idx] = builder.add(para["title"], para["paragraph_text"])
            if _musique_flag(para, where, j):
                supporting.append(idx)
        decomposition = _literal_list(row.get("question_decomposition") or [])
        order = [s.get("paragraph_support_idx") for s in decomposition or [] if isinstance(s, dict)]
        ordered = [i for i in order if i in supporting] + [i for i in supporting if i not in order]
        support = _unique([doc_by_idx[i] for i in ordered])
        m = _MUSIQUE_HOPS.match(qid)
        hops = int(m.group(1)) if m else max(1, len(support))
        answers = _unique([answer, *aliases])
        items.append(QAItem(id=qid, question=question, answers=answers, hops=hops, support=support))
    _finish(path, items, report)
    return items, builder.corpus()


def _agentflow_answers(value: Any, where: str) -> list[str]:
    if isinstance(value, str) and value.strip().startswith("[") and value.strip().endswith("]"):
        parsed = _literal_list(value)
        value = parsed if parsed is not None else value
    if isinstance(value, bool):
        value = str(value).lower()
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, (str, int, float)):
        value = [value]
    if isinstance(value, list):
        answers = _unique([str(v).strip() for v in value if isinstance(v, (str, int, float))])
        if answers:
            return answers
    raise BenchmarkFormatError(f"{where}: field 'answer' must be a non-empty string, number or list "
                               f"(got {str(value)[:60]!r})")


def load_agentflow(path: str | Path, *, name: str | None = None,
                   strip_format_instruction: bool = True) -> tuple[list[QAItem], Corpus]:
    """AgentFlow test-set ``data.json`` (``path`` may be the file or its folder).

    The question is ``query`` (falling back to ``question`` when that is a string); AgentFlow's
    ``<answer>`` tag instruction is removed unless ``strip_format_instruction=False``. ``answer``
    may be a string, a number, a list, or a stringified list. Ids are ``<name>-<pid>`` where
    ``name`` defaults to the folder name (``agentflow/2wiki/data.json`` -> ``2wiki-0``).
    Hop counts and supporting documents are unknown: ``hops=1``, ``support=[]``. No paragraphs
    ship with these files, so the corpus is always empty."""
    p = Path(path)
    if p.is_dir():
        p = p / "data.json"
    if name is None:
        name = p.parent.name if p.name == "data.json" else p.stem
    ids, items = _Ids(), []
    for i, (where, row) in enumerate(_iter_records(p)):
        text = next((row[k] for k in ("query", "question") if isinstance(row.get(k), str) and row[k].strip()), None)
        if text is None:
            raise BenchmarkFormatError(f"{where}: missing question (neither 'query' nor 'question' "
                                       "is a non-empty string)")
        if strip_format_instruction:
            text = _AGENTFLOW_FORMAT.sub("", text)
        if "answer" not in row or row["answer"] is None:
            raise BenchmarkFormatError(f"{where}: field 'answer' is missing")
        answers = _agentflow_answers(row["answer"], where)
        raw_id = next((row[k] for k in ("pid", "idx") if isinstance(row.get(k), (str, int))
                       and not isinstance(row.get(k), bool) and str(row[k]).strip()), i)
        qid = ids.check(f"{name}-{str(raw_id).strip()}" if name else str(raw_id).strip(), where)
        items.append(QAItem(id=qid, question=text.strip(), answers=answers, hops=1, support=[]))
    return items, []


def detect_kind(path: str | Path) -> str:
    """Guess the format from the first record's keys (one of :data:`DATASET_KINDS`)."""
    from hasp.domains.search.plain_data import QUESTION_FILES, is_plain_row

    p = Path(path)
    if p.is_dir():
        if any((p / n).is_file() for n in QUESTION_FILES):
            return "qa"
        p = p / "data.json"
    if p.suffix.lower() == ".csv":
        return "qa"
    for where, row in _iter_records(p):
        if is_plain_row(row):
            return "qa"
        if "paragraphs" in row:
            return "musique"
        if "evidences" in row or "entity_ids" in row:
            return "2wiki"
        if "context" in row or "supporting_facts" in row:
            return "hotpotqa"
        if "query" in row or "pid" in row:
            return "agentflow"
        raise BenchmarkFormatError(f"{where}: cannot tell the dataset format from keys {sorted(row)[:8]}")
    raise BenchmarkFormatError(f"{p}: no records")


def load_dataset(path: str | Path, kind: str | None = None, **kwargs: Any) -> Dataset:
    """Load any supported format with one signature; ``kind=None`` detects it from the file."""
    kind = kind or detect_kind(path)
    if kind == "2wiki":
        questions, corpus, report = load_2wiki(path, **kwargs)
        return Dataset(kind, questions, corpus, report)
    if kind in ("hotpotqa", "musique"):
        report = LoadReport()
        loader = load_hotpotqa if kind == "hotpotqa" else load_musique
        questions, corpus = loader(path, report=report, **kwargs)
        return Dataset(kind, questions, corpus, report)
    if kind == "qa":
        from hasp.domains.search.plain_data import load_plain

        report = LoadReport()
        questions, corpus = load_plain(path, report)
        if report.skipped:
            log.warning("%s: %s", path, report.summary())
        return Dataset(kind, questions, corpus, report)
    if kind != "agentflow":
        raise ValueError(f"unknown dataset kind {kind!r}; expected one of {', '.join(DATASET_KINDS)}")
    questions, corpus = load_agentflow(path, **kwargs)
    return Dataset(kind, questions, corpus, LoadReport(loaded=len(questions)))


# --------------------------------------------------------------------------------------------
# Splits
# --------------------------------------------------------------------------------------------
def paper_splits(items: Sequence[QAItem], n_test: int = 200, n_seed: int = 50, n_val: int = 50,
                 seed: int = 42) -> dict[str, list[QAItem]]:
    """The HASP / AgentFlow protocol (App. D.1), in file order:

    * ``test``: the first ``n_test`` rows;
    * ``train``: the remaining rows (the training pool, file order kept);
    * ``seed`` / ``val``: the pool shuffled with ``random.Random(seed)``, then the first
      ``n_seed`` and the next ``n_val`` rows. Each is capped at half the pool, so they never
      overlap; a file no longer than ``n_test`` has no pool and gets empty seed/val splits.
    """
    if min(n_test, n_seed, n_val) < 0:
        raise ValueError("split sizes must be >= 0")
    rows = list(items)
    test, pool = rows[:n_test], rows[n_test:]
    shuffled = pool[:]
    random.Random(seed).shuffle(shuffled)
    half = len(pool) // 2
    k_seed, k_val = min(n_seed, half), min(n_val, half)
    return {"test": test, "train": pool, "seed": shuffled[:k_seed],
            "val": shuffled[k_seed:k_seed + k_val]}


def write_dataset(out_dir: str | Path, splits: Mapping[str, Sequence[QAItem]],
                  corpus: Sequence[Mapping[str, Any]] = ()) -> dict[str, Path]:
    """Write ``<split>.jsonl`` per split and ``corpus.jsonl`` (when the corpus is not empty) in
    the layout :class:`hasp.domains.search.task.SearchTask` and ``load_questions`` read.
    Output is byte-stable (sorted keys)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    rows: dict[str, list[Mapping[str, Any]]] = {name: [q.to_dict() for q in qs] for name, qs in splits.items()}
    if corpus:
        rows["corpus"] = list(corpus)
    for name, data in rows.items():
        paths[name] = out / f"{name}.jsonl"
        with paths[name].open("w", encoding="utf-8") as fh:
            for row in data:
                fh.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
    return paths
