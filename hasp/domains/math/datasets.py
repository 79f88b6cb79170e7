"""Math benchmark loaders: every format becomes a list of ``MathItem``.

Formats (all loaders take a path; nothing is downloaded or bundled):

* AIME24 jsonl — ``id, problem, solution, answer``; ``answer`` is a string that may carry leading
  zeros ("025"); it is kept as written (equivalence treats "025" and 25 as equal).
* AMC23 jsonl — ``id, problem, answer`` with a float answer (27.0 → "27").
* AgentFlow ``data.json`` — a JSON array. aime24/amc23: ``question`` text and an ``answer`` that
  is a number, a string, a list or a stringified list; gameof24: ``question`` is the list of four
  numbers (or its string form "[1, 1, 1, 8]") and ``answer`` the reference expressions.
* Game-of-24 csv (Tree-of-Thoughts ``24.csv`` layout) — a ``Puzzles`` column ("1 1 4 6").

A malformed row raises one :class:`MathDataError` whose message starts ``<file>:<row>:`` with the
1-based row (the line for jsonl/csv files — csv counts its header as line 1 — and the array
position for ``data.json``).
"""

from __future__ import annotations

import ast
import csv
import json
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from hasp.domains.jsonl import json_objects
from hasp.domains.math.game24 import TARGET, solvable_tuples

__all__ = [
    "GAME24_PROMPT", "MathDataError", "MathItem", "game24_items", "game24_prompt", "load_agentflow",
    "load_aime24", "load_amc23", "load_game24_csv", "load_math_dataset", "load_math_jsonl",
]

Kind = Literal["numeric", "game24"]

GAME24_PROMPT = ("Make {target} from the numbers {numbers}. Combine them with +, -, * and / and "
                 "parentheses, using every number exactly once. Give the expression as your answer.")

#: AgentFlow appends its own output-format instruction to AIME questions; our prompt asks for
#: FINAL[...], so the loader drops this sentence (set ``keep_format_instructions=True`` to keep it).
_AGENTFLOW_FORMAT = re.compile(r"\s*When ready, output the final answer enclosed in <answer>.*$", re.S)


class MathDataError(ValueError):
    """A malformed dataset file or row; the message names the file and the 1-based row."""


@dataclass
class MathItem:
    """One math problem.

    ``answers`` are the accepted gold answers as text (any one may match). For ``kind ==
    "game24"`` they are reference expressions, possibly empty: any expression the exact verifier
    accepts for ``numbers`` is correct.
    """

    id: str
    problem: str
    answers: list[str]
    kind: Kind = "numeric"
    numbers: list[int] | None = None
    source: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def game24_prompt(numbers: Iterable[int], target: int = TARGET) -> str:
    return GAME24_PROMPT.format(target=target, numbers=list(numbers))


# ----------------------------------------------------------------------------- helpers


def _format_number(x: int | float) -> str:
    if isinstance(x, float):
        if not math.isfinite(x):
            raise ValueError(f"answer {x!r} is not a finite number")
        return str(int(x)) if x.is_integer() else repr(x)
    return str(x)


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _literal_list(text: str) -> list[Any] | None:
    """``"['33', '34']"`` → ``['33', '34']`` (``ast.literal_eval``, never ``eval``); else None."""
    t = text.strip()
    if not (t.startswith("[") and t.endswith("]")):
        return None
    try:
        v = ast.literal_eval(t)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return v if isinstance(v, list) else None


def _answers(raw: Any) -> list[str]:
    """Gold answer(s) in any of the shipped shapes → non-empty list of strings (or ValueError)."""
    if raw is None:
        raise KeyError("answer")
    if _is_number(raw):
        return [_format_number(raw)]
    if isinstance(raw, str):
        lst = _literal_list(raw)
        if lst is not None:
            return _answers(lst)
        if not raw.strip():
            raise ValueError("'answer' is empty")
        return [raw.strip()]
    if isinstance(raw, list):
        if not raw:
            raise ValueError("'answer' is an empty list")
        out = []
        for a in raw:
            if _is_number(a):
                out.append(_format_number(a))
            elif isinstance(a, str) and a.strip():
                out.append(a.strip())
            else:
                raise ValueError(f"'answer' list holds {a!r}, not a number or non-empty string")
        return out
    raise ValueError(f"'answer' must be a string, number or list, got {type(raw).__name__}")


def _numbers(raw: Any) -> list[int] | None:
    """The 24-game numbers if ``raw`` is a list of ints or its string form, else None."""
    if isinstance(raw, str):
        raw = _literal_list(raw)
    if isinstance(raw, list) and raw and all(isinstance(n, int) and not isinstance(n, bool) for n in raw):
        return list(raw)
    return None


def _id(row: dict[str, Any], keys: tuple[str, ...], fallback: int | None) -> str:
    for k in keys:
        v = row.get(k)
        if isinstance(v, (str, int)) and not isinstance(v, bool) and str(v).strip():
            return str(v).strip()
    if fallback is None:
        raise KeyError(keys[0])
    return str(fallback)


def _iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        fh = path.open("rb")
    except OSError as e:
        raise MathDataError(f"{path}: cannot read: {e}") from None
    with fh:
        yield from json_objects(fh, path, MathDataError)


def _row_error(path: Path, row_no: int, exc: Exception) -> MathDataError:
    if isinstance(exc, KeyError):
        return MathDataError(f"{path}:{row_no}: missing {exc.args[0]!r}")
    return MathDataError(f"{path}:{row_no}: {exc}")


def _problem(row: dict[str, Any], keys: tuple[str, ...] = ("problem", "question")) -> str:
    for k in keys:
        v = row.get(k)
        if isinstance(v, str) and v.strip():
            return v.strip()
        if k in row and v is not None and not isinstance(v, str):
            raise ValueError(f"{k!r} must be a string, got {type(v).__name__}")
    raise KeyError(keys[0])


# ----------------------------------------------------------------------------- loaders


def load_math_jsonl(path: str | Path, *, source: str | None = None) -> list[MathItem]:
    """AIME/AMC-style jsonl: ``id``, ``problem`` (or ``question``), ``answer`` (string or number)."""
    p = Path(path)
    items: list[MathItem] = []
    seen: set[str] = set()
    for lineno, row in _iter_jsonl(p):
        try:
            item_id = _id(row, ("id",), None)
            problem = _problem(row)
            if "answer" not in row or row["answer"] is None:
                raise KeyError("answer")
            raw = row["answer"]
            if not (isinstance(raw, str) or _is_number(raw)):
                raise ValueError(f"'answer' must be a string or number, got {type(raw).__name__}")
            answers = _answers(raw)
            if item_id in seen:
                raise ValueError(f"duplicate id {item_id!r}")
        except (KeyError, ValueError) as e:
            raise _row_error(p, lineno, e) from None
        seen.add(item_id)
        items.append(MathItem(id=item_id, problem=problem, answers=answers, kind="numeric",
                              source=source or p.stem,
                              meta={k: row[k] for k in ("url", "solution") if isinstance(row.get(k), str)}))
    return items


def load_aime24(path: str | Path) -> list[MathItem]:
    """AIME 2024 jsonl (``id, problem, solution, answer``); answers kept as written ("025")."""
    return load_math_jsonl(path, source="aime24")


def load_amc23(path: str | Path) -> list[MathItem]:
    """AMC 2023 jsonl (``id, problem, answer`` as a float; 27.0 becomes "27")."""
    return load_math_jsonl(path, source="amc23")


def load_agentflow(path: str | Path, *, kind: Kind | Literal["auto"] = "auto", source: str | None = None,
                   keep_format_instructions: bool = False) -> list[MathItem]:
    """AgentFlow test-set ``data.json`` (aime24, amc23, gameof24).

    ``kind="auto"`` makes a row a 24-game puzzle when its ``question`` is a list of integers (or
    the string form of one); otherwise it is a numeric problem. ``source`` defaults to the name of
    the folder holding the file (``…/gameof24/data.json`` → ``gameof24``).
    """
    p = Path(path)
    src = source or (p.parent.name if p.name == "data.json" else p.stem)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise MathDataError(f"{p}: cannot read: {e}") from None
    except json.JSONDecodeError as e:
        raise MathDataError(f"{p}: invalid JSON at line {e.lineno} column {e.colno} ({e.msg})") from None
    if not isinstance(data, list):
        raise MathDataError(f"{p}: expected a JSON array of problems, got {type(data).__name__}")
    items: list[MathItem] = []
    for i, row in enumerate(data, 1):
        try:
            if not isinstance(row, dict):
                raise ValueError(f"expected a JSON object, got {type(row).__name__}")
            if "question" not in row or row["question"] is None:
                raise KeyError("question")
            if "answer" not in row or row["answer"] is None:
                raise KeyError("answer")
            item_id = _id(row, ("pid", "idx", "id"), i)
            nums = _numbers(row["question"])
            row_kind = kind if kind != "auto" else ("game24" if nums is not None else "numeric")
            if row_kind == "game24":
                if nums is None:
                    raise ValueError(f"'question' must be the list of puzzle numbers, got {row['question']!r:.60}")
                query = row.get("query")
                problem = query.strip() if isinstance(query, str) and query.strip() else game24_prompt(nums)
                items.append(MathItem(id=item_id, problem=problem, answers=_answers(row["answer"]),
                                      kind="game24", numbers=nums, source=src))
            else:
                problem = _problem(row, ("question",))
                if not keep_format_instructions:
                    problem = _AGENTFLOW_FORMAT.sub("", problem).strip() or problem
                items.append(MathItem(id=item_id, problem=problem, answers=_answers(row["answer"]),
                                      kind="numeric", source=src))
        except (KeyError, ValueError) as e:
            raise _row_error(p, i, e) from None
    return items


def load_game24_csv(path: str | Path, *, target: int = TARGET) -> list[MathItem]:
    """Game-of-24 csv with a ``Puzzles`` column ("1 1 4 6"); ``Rank`` (if present) is the id."""
    p = Path(path)
    try:
        fh = p.open(encoding="utf-8", newline="")
    except OSError as e:
        raise MathDataError(f"{p}: cannot read: {e}") from None
    items: list[MathItem] = []
    with fh:
        reader = csv.DictReader(fh)
        if not reader.fieldnames or "Puzzles" not in reader.fieldnames:
            raise MathDataError(f"{p}:1: no 'Puzzles' column (columns: {reader.fieldnames})")
        for row in reader:
            line = reader.line_num
            cell = (row.get("Puzzles") or "").strip()
            if not cell:
                raise MathDataError(f"{p}:{line}: missing 'Puzzles'")
            toks = cell.replace(",", " ").split()
            if not all(re.fullmatch(r"\d+", t) for t in toks) or len(toks) != 4:
                raise MathDataError(f"{p}:{line}: 'Puzzles' must be four integers, got {cell!r}")
            nums = [int(t) for t in toks]
            rank = (row.get("Rank") or "").strip()
            items.append(MathItem(id=rank or str(len(items) + 1), problem=game24_prompt(nums, target),
                                  answers=[], kind="game24", numbers=nums, source=p.stem,
                                  meta={k: v for k, v in row.items() if k not in ("Puzzles", "Rank") and k}))
    return items


def game24_items(lo: int = 1, hi: int = 13, target: int = TARGET) -> list[MathItem]:
    """Every solvable 4-number puzzle over [lo, hi] as items (the generated, file-free benchmark)."""
    return [MathItem(id="g24-" + "-".join(map(str, t)), problem=game24_prompt(t, target), answers=[],
                     kind="game24", numbers=list(t), source=f"game24_gen_{lo}_{hi}")
            for t in solvable_tuples(lo, hi, target)]


def load_math_dataset(path: str | Path) -> list[MathItem]:
    """Pick the loader by file type: ``.csv`` → 24-game csv, ``.json`` → AgentFlow, ``.jsonl`` → AIME/AMC."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix == ".csv":
        return load_game24_csv(p)
    if suffix == ".json":
        return load_agentflow(p)
    if suffix == ".jsonl":
        return load_math_jsonl(p)
    raise MathDataError(f"{p}: unknown math dataset format {suffix!r} (expected .jsonl, .json or .csv)")
