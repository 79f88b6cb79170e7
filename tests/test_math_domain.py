"""Math domain: 24-game generator/solver/verifier, answer equivalence, loaders, environment, seed PFs.

Tests on the real samples read ``../shared/data`` (override with HASP_SHARED_DATA) and skip with a
clear reason when that folder is absent (a fresh clone does not have it).
"""

from __future__ import annotations

import csv
import json
import os
import random
import threading
import time
from fractions import Fraction
from itertools import permutations
from pathlib import Path

import pytest

from hasp.domains.math.answers import (
    _with_timeout,
    answers_equivalent,
    arithmetic_claims,
    clean_answer,
    extract_final_answer,
    normalize_answer,
    parse_number,
)
from hasp.domains.math.datasets import (
    MathDataError,
    MathItem,
    game24_items,
    load_agentflow,
    load_aime24,
    load_amc23,
    load_game24_csv,
    load_math_dataset,
    load_math_jsonl,
)
from hasp.domains.math.game24 import (
    all_tuples,
    evaluate_arithmetic,
    is_solvable,
    numbers_from_text,
    solvable_tuples,
    solve,
    verify_expression,
)
from hasp.domains.math.task import (
    MathEnvironment,
    build_messages,
    game24_numbers,
    math_ctx,
    pre_final,
    bare_game24_answer,
    score,
    split_output,
    split_output_for,
)
from hasp.pf.intervention import InterventionType
from hasp.pf.library import load_library
from hasp.pf.skill_md import load_skill

ROOT = Path(__file__).resolve().parents[1]
SKILLS = ROOT / "hasp" / "skills" / "math"
DATA = Path(os.environ.get("HASP_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))

MATH_SKILLS = {
    "algebraic_sign_error", "arithmetic_slip", "simplification_incomplete", "boundary_violation",
    "units_dimension_mismatch", "case_incompleteness", "overgeneralization", "proof_step_gap",
    "substitution_invalid", "verification_missing", "final_format_error",
}


def need(rel: str) -> Path:
    path = DATA / rel
    if not path.exists():
        pytest.skip(f"benchmark sample {path} not present (the shared data folder is only on the dev/CI machine)")
    return path


# =============================================================================== game of 24
def _brute_force(nums: tuple[int, ...]) -> bool:
    """Independent check: the classic 'combine any two, recurse' search over every ordering."""
    def rec(vals: list[Fraction]) -> bool:
        if len(vals) == 1:
            return vals[0] == 24
        for i, j in permutations(range(len(vals)), 2):
            rest = [v for k, v in enumerate(vals) if k not in (i, j)]
            a, b = vals[i], vals[j]
            outs = [a + b, a - b, a * b] + ([a / b] if b else [])
            if any(rec(rest + [o]) for o in outs):
                return True
        return False
    return rec([Fraction(n) for n in nums])


def test_all_tuples_is_every_multiset() -> None:
    tuples = all_tuples()
    assert len(tuples) == 1820 == len(set(tuples))  # C(13 + 4 - 1, 4)
    assert all(list(t) == sorted(t) and 1 <= t[0] and t[-1] <= 13 for t in tuples)


def test_solvable_count_and_speed() -> None:
    solvable_tuples.cache_clear()
    t0 = time.perf_counter()
    s = solvable_tuples()
    assert time.perf_counter() - t0 < 10.0
    assert len(s) == 1362
    assert len(all_tuples()) - len(s) == 458


def test_generated_set_equals_public_csv() -> None:
    path = need("math/game24_tot.csv")
    with path.open(encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    puzzles = {tuple(sorted(int(x) for x in r["Puzzles"].split())) for r in rows}
    ours = set(solvable_tuples())
    assert len(rows) == len(puzzles) == 1362
    assert ours - puzzles == set() and puzzles - ours == set(), "generated set differs from game24_tot.csv"


@pytest.mark.parametrize("nums,solvable", [
    ((1, 1, 1, 1), False), ((1, 1, 1, 2), False), ((4, 4, 6, 6), False), ((13, 13, 13, 13), False),
    ((1, 1, 1, 8), True), ((3, 3, 8, 8), True),  # 8/(3-8/3): needs fractions
    ((1, 5, 5, 5), True), ((1, 3, 4, 6), True),  # 5*(5-1/5), 6/(1-3/4)
    ((1, 1, 4, 6), True), ((2, 3, 5, 12), True), ((4, 4, 10, 10), True),
])
def test_spot_checks(nums: tuple[int, ...], solvable: bool) -> None:
    assert is_solvable(nums) is solvable
    assert _brute_force(nums) is solvable
    expr = solve(nums)
    assert (expr is not None) is solvable
    if expr:
        assert verify_expression(expr, nums).ok, expr


def test_solver_agrees_with_brute_force_on_a_sample() -> None:
    sample = random.Random(7).sample(all_tuples(), 60)
    for t in sample:
        assert is_solvable(t) == _brute_force(t), t


def test_every_solution_verifies() -> None:
    for t in solvable_tuples():
        expr = solve(t)
        v = verify_expression(expr, t)
        assert v.ok, (t, expr, v)
        assert "**" not in expr and "//" not in expr


def test_order_of_input_numbers_does_not_matter() -> None:
    assert solve([8, 3, 8, 3]) == solve([3, 3, 8, 8])


@pytest.mark.parametrize("expr,nums,ok,code", [
    ("(1+1+1)*8", [1, 1, 1, 8], True, "ok"),
    ("(1+1+1)×8", [1, 1, 1, 8], True, "ok"),                    # AgentFlow's spelling
    ("8/(3-8/3)", [3, 3, 8, 8], True, "ok"),                    # exact, not float
    ("\\frac{8}{3-\\frac{8}{3}}", [3, 3, 8, 8], True, "ok"),
    ("$(13-1) \\times (1+1)$", [1, 1, 1, 13], True, "ok"),
    ("[(1+1)*12]*1", [1, 1, 1, 12], True, "ok"),
    ("(1+1+1)*8 = 24", [1, 1, 1, 8], True, "ok"),
    ("8*(1+1+1)", [8, 1, 1, 1], True, "ok"),                    # puzzle order irrelevant
    ("(1+1)*8", [1, 1, 1, 8], False, "numbers"),                 # a number missing
    ("(1+1+1)*7", [1, 1, 1, 8], False, "numbers"),               # wrong number
    ("(8+8+8)*1", [1, 1, 1, 8], False, "numbers"),               # reuse
    ("(1+1+1)*8*1", [1, 1, 1, 8], False, "numbers"),             # extra number
    ("24", [1, 1, 1, 8], False, "numbers"),
    ("8/(1-1)+1", [1, 1, 1, 8], False, "zero_division"),
    ("(1+1+1)*8*1", [1, 1, 1, 1, 8], True, "ok"),                # any puzzle size
    ("(1+1)*8+1+6", [1, 1, 1, 6, 8], False, "value"),            # 23
    ("1+1+1+8", [1, 1, 1, 8], False, "value"),
    ("8/(8/3-3)", [3, 3, 8, 8], False, "value"),                 # -24
    ("-(1-5)*6*1", [1, 1, 5, 6], False, "unsupported"),          # unary minus not allowed
    ("(1+1+1.0)*8", [1, 1, 1, 8], False, "unsupported"),         # float literal
    ("(1+1+1)**8", [1, 1, 1, 8], False, "unsupported"),
    ("(1+1+1)//8", [1, 1, 1, 8], False, "unsupported"),
    ("__import__('os').system('true')", [1, 1, 1, 8], False, "unsupported"),
    ("x*8", [1, 1, 1, 8], False, "unsupported"),
    ("(lambda: 24)()", [1, 1, 1, 8], False, "unsupported"),
    ("(1+1+1)*8; 1", [1, 1, 1, 8], False, "syntax"),
    ("(1+1+1*8", [1, 1, 1, 8], False, "syntax"),
    ("", [1, 1, 1, 8], False, "empty"),
    ("(" * 150 + "1" + ")" * 150, [1], False, "syntax"),        # over the length cap, no recursion
])
def test_verifier_table(expr: str, nums: list[int], ok: bool, code: str) -> None:
    v = verify_expression(expr, nums)
    assert v.ok is ok, v
    assert v.code == code, v
    assert v.reason


def test_verdict_details_for_pfs() -> None:
    v = verify_expression("(1+1)*8+1+6", [1, 1, 1, 6, 8])
    assert v.value == 23 and "23" in v.reason and sorted(v.used) == [1, 1, 1, 6, 8]
    v = verify_expression("(8+8+8)*1", [1, 1, 1, 8])
    assert v.value == 24 and "8 used 3x" in v.reason and "1 used 1x" in v.reason


def test_verifier_never_evaluates_code(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    v = verify_expression(f"__import__('pathlib').Path({str(marker)!r}).touch()", [1, 1, 1, 8])
    assert not v.ok and not marker.exists()


def test_evaluate_arithmetic_extended() -> None:
    assert evaluate_arithmetic("2^10", extended=True) == 1024
    assert evaluate_arithmetic("0.1 + 0.2", extended=True) == Fraction(3, 10)
    assert evaluate_arithmetic("-3 + 5", extended=True) == 2
    with pytest.raises(ValueError):
        evaluate_arithmetic("9^99999", extended=True)
    with pytest.raises(ValueError):
        evaluate_arithmetic("2^10")  # not extended: no powers
    with pytest.raises(ValueError):
        evaluate_arithmetic("1/0")


def test_numbers_from_text() -> None:
    assert numbers_from_text("Using the numbers [1, 1, 1, 8], create an expression") == [1, 1, 1, 8]
    assert numbers_from_text("Make 24 from the numbers 1 1 4 6.") == [1, 1, 4, 6]
    assert numbers_from_text("Find the area of the triangle.") is None


# =============================================================================== answers
@pytest.mark.parametrize("pred,gold,eq", [
    ("025", "25", True), ("25", "025", True), ("27.0", 27.0, True), ("27", 27.0, True),
    ("\\boxed{25}", "25", True), ("$1,234$", "1234", True), ("1,234", 1234, True),
    ("\\frac{3}{4}", "0.75", True), ("3/4", "\\dfrac34", True), ("-\\frac{1}{2}", "-0.5", True),
    ("x = 5", "5", True), ("27 miles", "27", True), ("\\boxed{25 \\text{ miles}}.", "25", True),
    ("45^\\circ", "45", True), ("-1", -1.0, True), ("The answer is 42", "42", True),
    ("\\frac{\\sqrt{2}}{2}", "1/\\sqrt{2}", True), ("2\\sqrt{3}", "\\sqrt{12}", True),
    ("\\pi/2", "\\frac{\\pi}{2}", True), ("x^2+2x+1", "(x+1)^2", True),
    ("(0,-7)", "(0, -7)", True), ("\\{1,2\\}", "\\{2,1\\}", True),
    ("24", "25", False), ("0.333", "1/3", False), ("1,2", "12", False), ("(1,2)", "(2,1)", False),
    ("2\\sqrt{3}", "\\sqrt{13}", False), ("", "5", False), (None, "5", False), ("5", None, False),
])
def test_answer_equivalence_table(pred, gold, eq) -> None:
    # what is equivalent, not how fast: a loaded machine (a second test worker, a model server) can take
    # longer than the default wall-clock budget for sympy's first parse, which then reads "not equivalent"
    assert answers_equivalent(pred, gold, timeout=60.0) is eq


@pytest.mark.parametrize("junk", [
    "foo(", "\\frac{", "}{", "10^10^10", "((((((((((", "x" * 5000, "\\unknowncommand{3}", "1/0", "nan", "[[[",
    "2^{99999999}", "\\sqrt{-1}", "__import__('os')",
])
def test_equivalence_never_crashes(junk: str) -> None:
    t0 = time.perf_counter()
    assert answers_equivalent(junk, "5") in (True, False)
    assert answers_equivalent("5", junk) in (True, False)
    assert time.perf_counter() - t0 < 6.0


def test_timeout_guard_main_thread_and_worker_thread() -> None:
    def slow() -> int:
        end = time.perf_counter() + 5
        while time.perf_counter() < end:
            pass
        return 1

    t0 = time.perf_counter()
    assert _with_timeout(slow, 0.2) is None
    assert time.perf_counter() - t0 < 2.0
    assert _with_timeout(lambda: 7, 1.0) == 7
    assert _with_timeout(lambda: 1 / 0, 1.0) is None
    box: list = []
    th = threading.Thread(target=lambda: box.append((_with_timeout(slow, 0.2), _with_timeout(lambda: 3, 1.0))))
    t0 = time.perf_counter()
    th.start()
    th.join()
    assert box == [(None, 3)] and time.perf_counter() - t0 < 2.0


@pytest.mark.parametrize("text,ans", [
    ("Thought: 1/2 of it.\nFINAL[\\frac{1}{2}]", "\\frac{1}{2}"),
    ("FINAL[[1, 2]] trailing", "[1, 2]"),
    ("first FINAL[3] then FINAL[4]", "4"),
    ("so the result is \\boxed{\\frac{25}{8}}.", "\\frac{25}{8}"),
    ("<answer>33</answer>", "33"),
    ("The answer is 42.", "42"),
    ("Answer: 3.5", "3.5"),
    ("Final answer: x = 7", "x = 7"),
    ("no answer here", None),
    ("", None),
])
def test_extract_final_answer(text: str, ans: str | None) -> None:
    assert extract_final_answer(text) == ans


def test_normalisation_helpers() -> None:
    assert parse_number("025") == 25 and parse_number("27.0") == 27 and parse_number("1,234") == 1234
    assert parse_number("\\tfrac{3}{4}") == Fraction(3, 4) and parse_number("3/0") is None
    assert parse_number("1,2") is None and parse_number("x") is None
    assert normalize_answer("6/8") == "3/4" and normalize_answer("025") == "25"
    assert clean_answer("\\boxed{\\frac{3}{4}}") == "\\frac{3}{4}"
    assert clean_answer("$\\boxed{27 \\text{ miles}}$.") == "27"


def test_arithmetic_claims() -> None:
    text = ("First 17 × 23 = 381. Then 2x + 3 = 7 and f(2) = 5 and a_1 = 3. Step 1: 3 + 4 = 7, "
            "so 5 - 8 = 3. Also 1/3 = 0.333, 2^10 = 1024 = 1000 + 24, and x + 3 = 7.")
    got = {c.text: (c.correct, c.sign_flip) for c in arithmetic_claims(text)}
    assert got == {"17 * 23 = 381": (False, False), "3 + 4 = 7": (True, False), "5 - 8 = 3": (False, True),
                   "1/3 = 0.333": (True, False), "2^10 = 1024": (True, False), "1024 = 1000 + 24": (True, False)}


# =============================================================================== loaders
def test_load_aime24_sample() -> None:
    items = load_aime24(need("math/aime24.jsonl"))
    assert len(items) == 30 and len({i.id for i in items}) == 30
    assert all(i.kind == "numeric" and i.numbers is None and i.source == "aime24" for i in items)
    by_id = {i.id: i for i in items}
    assert by_id["67"].answers == ["025"]  # leading zeros kept as written
    assert score(by_id["67"], "FINAL[25]") == 1.0
    assert all(i.meta.get("solution") for i in items)


def test_load_amc23_sample() -> None:
    items = load_amc23(need("math/amc23.jsonl"))
    assert len(items) == 40
    assert items[0].answers == ["27"] and "-1" in {a for i in items for a in i.answers}


def test_load_game24_csv_sample() -> None:
    items = load_game24_csv(need("math/game24_tot.csv"))
    assert len(items) == 1362
    assert items[0].numbers == [1, 1, 4, 6] and items[0].id == "1" and items[0].kind == "game24"
    assert all(is_solvable(i.numbers) for i in items)


def test_load_agentflow_samples() -> None:
    g = load_agentflow(need("agentflow/gameof24/data.json"))
    assert len(g) == 300 and all(i.kind == "game24" and len(i.numbers) == 4 for i in g)
    assert g[0].numbers == [1, 1, 1, 8] and g[0].answers == ["(1+1+1)×8"] and g[0].source == "gameof24"
    bad = [(i.numbers, a) for i in g for a in i.answers if not verify_expression(a, i.numbers).ok]
    assert bad == [], f"AgentFlow reference expressions rejected by the verifier: {bad[:5]}"
    a = load_agentflow(need("agentflow/aime24/data.json"))
    assert len(a) == 30 and all(i.kind == "numeric" for i in a)
    assert not any("<answer>" in i.problem for i in a)  # AgentFlow's format instruction is dropped
    assert "<answer>" in load_agentflow(DATA / "agentflow/aime24/data.json", keep_format_instructions=True)[0].problem
    jsonl = load_aime24(need("math/aime24.jsonl"))
    assert sorted(int(i.answers[0]) for i in a) == sorted(int(i.answers[0]) for i in jsonl)
    m = load_agentflow(need("agentflow/amc23/data.json"))
    assert len(m) == 40 and m[0].answers == ["27"]


def _write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


GOOD = {"id": 1, "problem": "What is 1+1?", "answer": "002"}


def test_jsonl_missing_answer_names_file_and_row(tmp_path: Path) -> None:
    rows = [dict(GOOD, id=i) for i in range(1, 7)] + [{"id": 7, "problem": "p"}]
    path = _write_jsonl(tmp_path / "aime24.jsonl", rows)
    with pytest.raises(MathDataError) as e:
        load_aime24(path)
    assert str(e.value).endswith("aime24.jsonl:7: missing 'answer'")


@pytest.mark.parametrize("rows,msg", [
    (["{not json"], ":1: invalid JSON"),
    (["[1, 2]"], ":1: expected a JSON object"),
    ([{"id": 1, "answer": "3"}], ":1: missing 'problem'"),
    ([{"problem": "p", "answer": "3"}], ":1: missing 'id'"),
    ([GOOD, {"id": 2, "problem": "p", "answer": ["3"]}], ":2: 'answer' must be a string or number, got list"),
    ([GOOD, {"id": 2, "problem": "p", "answer": None}], ":2: missing 'answer'"),
    ([GOOD, {"id": 2, "problem": "p", "answer": True}], ":2: 'answer' must be a string or number, got bool"),
    ([GOOD, {"id": 2, "problem": "p", "answer": "  "}], ":2: 'answer' is empty"),
    ([GOOD, {"id": 2, "problem": 5, "answer": "1"}], ":2: 'problem' must be a string"),
    ([GOOD, GOOD], ":2: duplicate id '1'"),
])
def test_jsonl_malformed_rows(tmp_path: Path, rows: list, msg: str) -> None:
    path = _write_jsonl(tmp_path / "bad.jsonl", rows)
    with pytest.raises(MathDataError, match=None) as e:
        load_math_jsonl(path)
    assert f"bad.jsonl{msg}" in str(e.value)


def test_jsonl_blank_lines_skipped_but_counted(tmp_path: Path) -> None:
    path = tmp_path / "amc.jsonl"
    path.write_text(json.dumps({"id": 0, "problem": "p", "answer": 27.0}) + "\n\n"
                    + json.dumps({"id": 1, "problem": "q"}) + "\n", encoding="utf-8")
    with pytest.raises(MathDataError, match=r"amc\.jsonl:3: missing 'answer'"):
        load_amc23(path)


def test_agentflow_malformed(tmp_path: Path) -> None:
    p = tmp_path / "gameof24" / "data.json"
    p.parent.mkdir()
    p.write_text(json.dumps([{"pid": "0", "question": [1, 1, 1, 8], "answer": ["(1+1+1)*8"]},
                             {"pid": "1", "answer": ["x"]}]), encoding="utf-8")
    with pytest.raises(MathDataError, match=r"data\.json:2: missing 'question'"):
        load_agentflow(p)
    p.write_text(json.dumps({"not": "a list"}), encoding="utf-8")
    with pytest.raises(MathDataError, match="expected a JSON array"):
        load_agentflow(p)
    p.write_text("[{", encoding="utf-8")
    with pytest.raises(MathDataError, match="invalid JSON at line 1"):
        load_agentflow(p)
    p.write_text(json.dumps([{"question": "What is 2+2?", "answer": 4}]), encoding="utf-8")
    with pytest.raises(MathDataError, match=r"data\.json:1: 'question' must be the list of puzzle numbers"):
        load_agentflow(p, kind="game24")


def test_agentflow_answer_shapes(tmp_path: Path) -> None:
    p = tmp_path / "mix.json"
    p.write_text(json.dumps([
        {"pid": "a", "question": "[1, 2, 3, 4]", "answer": "['(1+2+3)*4']"},  # stringified both
        {"idx": 5, "question": "Q?", "answer": "['33', '034']"},
        {"question": "Q2?", "answer": 2.5},
    ]), encoding="utf-8")
    a, b, c = load_agentflow(p)
    assert a.kind == "game24" and a.numbers == [1, 2, 3, 4] and a.answers == ["(1+2+3)*4"] and a.id == "a"
    assert b.kind == "numeric" and b.answers == ["33", "034"] and b.id == "5"
    assert c.answers == ["2.5"] and c.id == "3" and c.source == "mix"


def test_game24_csv_malformed(tmp_path: Path) -> None:
    p = tmp_path / "24.csv"
    p.write_text("Rank,Puzzle\n1,1 1 4 6\n", encoding="utf-8")
    with pytest.raises(MathDataError, match=r"24\.csv:1: no 'Puzzles' column"):
        load_game24_csv(p)
    p.write_text("Rank,Puzzles\n1,1 1 4 6\n2,1 1 x 6\n", encoding="utf-8")
    with pytest.raises(MathDataError, match=r"24\.csv:3: 'Puzzles' must be four integers"):
        load_game24_csv(p)


def test_load_math_dataset_dispatch(tmp_path: Path) -> None:
    p = _write_jsonl(tmp_path / "x.jsonl", [GOOD])
    assert load_math_dataset(p)[0].answers == ["002"]
    with pytest.raises(MathDataError, match="unknown math dataset format"):
        load_math_dataset(tmp_path / "x.parquet")


def test_generated_game24_items() -> None:
    items = game24_items()
    assert len(items) == 1362 and items[0].kind == "game24" and items[0].answers == []
    assert "[1, 1, 1, 8]" in next(i for i in items if i.numbers == [1, 1, 1, 8]).problem


# =============================================================================== task
G24 = MathItem(id="g", problem="Make 24 from the numbers [1, 1, 1, 8].", answers=[], kind="game24",
               numbers=[1, 1, 1, 8])
AIME = MathItem(id="a", problem="Find the remainder when N is divided by 1000.", answers=["025"], source="aime24")


@pytest.mark.parametrize("item,pred,expected", [
    (G24, "Thought: 3*8.\nFINAL[(1+1+1)*8]", 1.0),
    (G24, "FINAL[\\boxed{(1+1+1)\\times 8}]", 1.0),
    (G24, "(1+1+1)×8", 1.0),
    (G24, "FINAL[(1+1)*8]", 0.0),
    (G24, "FINAL[__import__('os')]", 0.0),
    (AIME, "FINAL[25]", 1.0),
    (AIME, "... so \\boxed{025}", 1.0),
    (AIME, "25", 1.0),
    (AIME, "FINAL[26]", 0.0),
    (AIME, "", 0.0),
    (AIME, None, 0.0),
])
def test_score(item: MathItem, pred: str | None, expected: float) -> None:
    assert score(item, pred) == expected


@pytest.mark.parametrize("text,expected", [
    ("24 = 2 * 3 + 4", "2 * 3 + 4"),                    # what SmolLM2-135M writes
    ("so (1+1+1)*8 = 24.", "(1+1+1)*8"),                # words around the equation dropped
    ("(8 / (3 - 8/3)) = 24", "(8 / (3 - 8/3))"),
    ("first 3*8 = 24\nthen 24 = (1+1+1) * 8", "(1+1+1) * 8"),  # the last equation wins
    ("24 = 24", None),                                  # no arithmetic: not an answer
    ("I think 8 * 3 is the way", None),                 # no equation with 24
    ("2 * 3 = 6", None),                                # equation, but not for 24
    ("", None),
])
def test_bare_game24_answer(text: str, expected: str | None) -> None:
    assert bare_game24_answer(text) == expected


def test_split_output_for_marks_how_the_answer_was_found() -> None:
    assert split_output_for(G24, "Thought: ok\nFINAL[(1+1+1)*8]") == ("ok", "(1+1+1)*8", "final")
    thought, answer, fmt = split_output_for(G24, "24 = (1+1+1)*8")
    assert (answer, fmt) == ("(1+1+1)*8", "bare") and score(G24, answer) == 1.0
    assert split_output_for(AIME, "24 = 2*12")[1:] == (None, "none")  # the fallback is 24-game only
    assert split_output_for(G24, "no idea")[1:] == (None, "none")


def test_split_output_and_messages() -> None:
    assert split_output("Thought: 3 times 8\nFINAL[24]") == ("3 times 8", "24")
    assert split_output("no final") == ("no final", None)
    msgs = build_messages(G24, skills_text="- check")
    assert msgs[0]["role"] == "system" and "FINAL[" in msgs[0]["content"] and "- check" in msgs[0]["content"]
    assert msgs[1]["content"] == G24.problem


def test_ctx_has_no_gold_and_knows_numbers() -> None:
    ctx = math_ctx(AIME, "thinking")
    assert "answers" not in ctx and "025" not in json.dumps(ctx)
    assert game24_numbers(math_ctx(G24)) == [1, 1, 1, 8]
    assert game24_numbers({"question": "Using the numbers [2, 3, 5, 12], make 24."}) == [2, 3, 5, 12]
    assert game24_numbers({"question": "Find x.", "kind": "numeric"}) is None


@pytest.fixture(scope="module")
def library():
    lib = load_library(SKILLS, "math")
    yield lib
    lib.close()


def test_environment_with_library(library) -> None:
    env = MathEnvironment(library.pfs())
    r = env.step(G24, "Thought: (1+1+1) is 3 and 3*8 = 24.\nFINAL[\\boxed{(1+1+1)\\times 8}]")
    assert r.answer == "(1+1+1)*8" and r.reward == 1.0 and not r.errors
    assert {f["skill_id"] for f in r.fired} == {"verification_missing", "final_format_error"}
    r = env.step(G24, "I think it is 16.")
    assert r.reward == 0.0 and r.parse_error and r.answer is None
    r = MathEnvironment().step(AIME, "FINAL[1025]")
    assert r.reward == 0.0 and r.fired == []


# =============================================================================== seed library
def test_library_loads(library) -> None:
    assert library.load_errors == []
    assert set(library.ids) == MATH_SKILLS
    assert library.ids[0] == "verification_missing"
    assert library.get("verification_missing").spec.priority == pytest.approx(0.90)
    assert max(s.spec.priority for s in library.skills) == pytest.approx(0.90)
    for s in library.skills:
        assert s.pf is not None and s.pf.skill_id == s.skill_id and not s.generated
        assert s.spec.domain == "math" and s.spec.name and s.spec.description and s.spec.system_summary
        assert "pre_final" in s.spec.phases and s.spec.phase_text("pre_final")
        assert s.spec.phases["pre_final"].action


def test_each_skill_md_parses_alone() -> None:
    for d in sorted(p for p in SKILLS.iterdir() if p.is_dir()):
        spec = load_skill(d)
        assert spec.name == d.name and spec.skill_id == spec.error_category == d.name.replace("-", "_")


def _fire(library, skill_id: str, question: str, thought: str, arg: str, *, kind: str = "numeric",
          numbers: list[int] | None = None, source: str = "", action: str = "FINAL"):
    pf = library.get(skill_id).pf
    item = MathItem(id="t", problem=question, answers=["0"], kind=kind, numbers=numbers, source=source)
    ctx = math_ctx(item, thought)
    if not pf.should_activate(ctx, action, arg):
        return None
    return pf.intervene(ctx, action, arg)


# (skill, question, thought, arg, kw, fragments the injected text must contain)
FIRES = [
    ("arithmetic_slip", "What is the area?", "17 × 23 = 381, so the area is 381.", "381", {},
     ["17 * 23 = 381", "391"]),
    ("arithmetic_slip", "What is the total?", "We add: 120 + 271 = 391. So the answer is 391.", "381", {},
     ["concludes 391", "381"]),
    ("arithmetic_slip", "Make 24.", "", "(1+1)*8+1", {"kind": "game24", "numbers": [1, 1, 1, 8]},
     ["evaluates to 17"]),
    ("arithmetic_slip", "Make 24.", "", "8/(1-1)+1", {"kind": "game24", "numbers": [1, 1, 1, 8]},
     ["divides by zero"]),
    ("algebraic_sign_error", "Simplify.", "-(x + 3) = -x + 3, then 5 - 8 = 3.", "2", {},
     ["-x - 3", "5 - 8 = -3"]),
    ("algebraic_sign_error", "What is the value?", "so the answer is 12.", "-12", {}, ["concludes 12", "-12"]),
    ("algebraic_sign_error", "Make 24.", "", "8/(8/3-3)", {"kind": "game24", "numbers": [3, 3, 8, 8]},
     ["-24"]),
    ("substitution_invalid", "Solve for x: $x^2 - 5x + 6 = 0$. Find x.", "so x = 4.", "4", {},
     ["x = 4", "gives 2 on the left but 0"]),
    ("substitution_invalid", "Positive real numbers $x$ and $y$ satisfy $y^3=x^2$ and $(y-x)^2=4y^2$. "
     "What is $x+y$?", "We get x = 27, y = 8 so x+y = 35.", "35", {}, ["x = 27, y = 8", "512", "729"]),
    ("substitution_invalid", "Positive real numbers $x$ and $y$ satisfy $y^3=x^2$. Find $x+y$.",
     "x = -1, y = 1, sum 0.", "0", {}, ["x = -1", "positive"]),
    ("substitution_invalid", "Make 24.", "", "(1+1)*8", {"kind": "game24", "numbers": [1, 1, 1, 8]},
     ["[1, 1, 8]", "1 used 2x"]),
    ("boundary_violation", "Find the remainder when $2^{100}$ is divided by 1000.", "...", "1376", {},
     ["1376", "0 to 999"]),
    ("boundary_violation", "How many ordered pairs $(a,b)$ satisfy it?", "...", "-3", {}, ["-3", "count"]),
    ("boundary_violation", "What is the probability that both are red?", "...", "4/3", {}, ["4/3", "between 0 and 1"]),
    ("boundary_violation", "Find $m+n$.", "...", "1204", {"source": "aime24"}, ["1204", "AIME"]),
    ("units_dimension_mismatch", "Find the number of minutes the walk takes her.", "Total: 3.4 hours.", "3.4",
     {}, ["minutes", "3.4 hours = 204 minutes"]),
    ("units_dimension_mismatch", "How many centimeters long is the rope?", "...", "2 meters", {},
     ["centimeters", "2 meters = 200 centimeters"]),
    ("case_incompleteness", "How many ordered pairs (a,b) of integers work?",
     "(1, 2,-3) -> (a,b) = (0,-7)\n(1,-3, 2) -> (a,b) = (0,-7)\n(2,-3,1) -> (a,b) = (0,-7)\n"
     "(1,-2,3) -> (a,b) = (-2,-5)", "4", {}, ["only 2 are distinct", "(0,-7) appears 3 times"]),
    ("case_incompleteness", "How many solutions?", "Case 1: ... Case 2: ... Case 4: ...", "3", {},
     ["cases 1, 2, 4", "case 3 is missing"]),
    ("case_incompleteness", "Solve $|x - 3| = 5$; give the sum of solutions.", "x - 3 = 5 so x = 8.", "8", {},
     ["absolute value", "negative"]),
    ("overgeneralization", "For n = 2024 find f(n).", "n = 1: 2, n = 2: 4, n = 3: 8. The pattern seems to be 2^n.",
     "5", {}, ["pattern seems to be 2^n", "n = 1, 2, 3", "2024"]),
    ("overgeneralization", "Find the minimum of x + 1/x.", "By AM-GM, x + 1/x >= 2.", "2", {}, ["AM-GM", "non-negative"]),
    ("overgeneralization", "Find the sum.", "It is an infinite geometric series with r = 2, sum a/(1-r) = -1.", "-1",
     {}, ["r = 2", "|r| < 1"]),
    ("overgeneralization", "How many ordered pairs (a,b)?", "By Vieta: (1,2,-3) gives (0,-7) and (1,-3,2) too.",
     "2", {}, ["(1,2,-3) and (1,-3,2)"]),
    ("proof_step_gap", "Find the largest real part of (75+117i)z + (96+144i)/z where z is a complex number with "
     "|z| = 4. Give the answer as an integer; show all the steps of your computation please.", "It is 540.",
     "540", {}, ["FINAL[540]", "3-word"]),
    ("proof_step_gap", "Find the max.", "Clearly the maximum occurs at x = 3. So 9.", "9", {},
     ["Clearly the maximum occurs at x = 3"]),
    ("simplification_incomplete", "Simplify.", "", "6/8", {}, ["dividing by 2", "3/4"]),
    ("simplification_incomplete", "Simplify.", "", "\\sqrt{12}", {}, ["2\\sqrt{3}"]),
    ("simplification_incomplete", "Compute it.", "", "2+3*4", {}, ["equals 14"]),
    ("simplification_incomplete", "The value is $\\tfrac{m}{n}$ where $m$ and $n$ are relatively prime positive "
     "integers. Find $m+n$.", "", "25/8", {}, ["m+n = 33"]),
    ("simplification_incomplete", "Express your answer as a common fraction.", "", "0.75", {}, ["3/4"]),
    ("verification_missing", "Positive integers $a$ and $b$ satisfy $a+b=10$. Find $ab$.", "a=3, b=7", "21", {},
     ["FINAL[21]", "Positive integers $a$ and $b$ satisfy $a+b=10$", "does not check"]),
    ("verification_missing", "Make 24.", "", "(1+1+1)*8", {"kind": "game24", "numbers": [1, 1, 1, 8]},
     ["Verified"]),
    ("verification_missing", "Make 24.", "", "(1+1+1)*7", {"kind": "game24", "numbers": [1, 1, 1, 8]},
     ["failed", "7 is not a puzzle number", "8 is not used"]),
]


@pytest.mark.parametrize("skill,question,thought,arg,kw,fragments", FIRES,
                         ids=[f"{f[0]}-{i}" for i, f in enumerate(FIRES)])
def test_pf_fires_with_runtime_text(library, skill, question, thought, arg, kw, fragments) -> None:
    iv = _fire(library, skill, question, thought, arg, **kw)
    assert iv is not None, f"{skill} did not fire"
    assert iv.type is InterventionType.INJECT_CONTEXT and iv.reason
    for frag in fragments:
        assert frag in iv.context_text, (frag, iv.context_text)


QUIET = [  # (skill, question, thought, arg, kw): correct work, nothing to report
    ("arithmetic_slip", "What is the area?", "17 × 23 = 391, and 1/3 = 0.333. The answer is 391.", "391", {}),
    ("arithmetic_slip", "Make 24.", "", "(1+1+1)*8", {"kind": "game24", "numbers": [1, 1, 1, 8]}),
    ("algebraic_sign_error", "Simplify.", "-(x + 3) = -x - 3 and 8 - 5 = 3, so the answer is 3.", "3", {}),
    ("substitution_invalid", "Solve for x: $x^2 - 5x + 6 = 0$. Find x.", "so x = 3.", "3", {}),
    ("substitution_invalid", "Positive real numbers $x$ and $y$ satisfy $y^3=x^2$ and $(y-x)^2=4y^2$. "
     "What is $x+y$?", "We get x = 27, y = 9 so x+y = 36.", "36", {}),
    ("substitution_invalid", "Make 24.", "", "(1+1)*8+1", {"kind": "game24", "numbers": [1, 1, 1, 8]}),
    ("boundary_violation", "Find the remainder when $2^{100}$ is divided by 1000.", "...", "376", {}),
    ("boundary_violation", "How many miles apart are they?", "...", "2.5", {}),
    ("boundary_violation", "What is the probability? It is $\\frac{m}{n}$. Find $m+n$.", "...", "13", {}),
    ("units_dimension_mismatch", "Find the number of minutes the walk takes her.", "Total: 204 minutes.", "204", {}),
    ("units_dimension_mismatch", "What is x?", "x is 3 hours.", "3", {}),
    ("case_incompleteness", "How many ordered pairs (a,b)?", "(1,2,-3) -> (0,-7)\n(1,-2,3) -> (-2,-5)", "2", {}),
    ("case_incompleteness", "Solve $|x - 3| = 5$.", "x - 3 = 5 or x - 3 = -5 (negative case).", "8", {}),
    ("case_incompleteness", "For complex $z$ with $|z|=4$ find the max.", "...", "540", {}),
    ("overgeneralization", "For n = 2024 find f(n).", "We prove by induction that f(n) = 2^n; the pattern holds.", "5", {}),
    ("overgeneralization", "For positive x find the minimum of x + 1/x.", "By AM-GM, x + 1/x >= 2.", "2", {}),
    ("proof_step_gap", "Find 2+2.", "2+2 = 4", "4", {}),
    ("simplification_incomplete", "Simplify.", "", "3/4", {}),
    ("simplification_incomplete", "Simplify.", "", "2\\sqrt{3}", {}),
    ("simplification_incomplete", "Find $m+n$ where m/n is in lowest terms.", "", "33", {}),
    ("final_format_error", "Find x.", "", "25", {}),
    ("final_format_error", "Find x.", "", "025", {}),
    ("final_format_error", "Make 24.", "", "(1+1+1)×8", {"kind": "game24", "numbers": [1, 1, 1, 8]}),
]


@pytest.mark.parametrize("skill,question,thought,arg,kw", QUIET, ids=[f"{q[0]}-{i}" for i, q in enumerate(QUIET)])
def test_pf_quiet_on_correct_work(library, skill, question, thought, arg, kw) -> None:
    assert _fire(library, skill, question, thought, arg, **kw) is None


@pytest.mark.parametrize("arg,kw,new", [
    ("\\boxed{25}", {}, "25"),
    ("$27$ miles", {}, "27"),
    ("\\boxed{27 \\text{ miles}}.", {}, "27"),
    ("The answer is 42.", {}, "42"),
    ("x = 5", {}, "5"),
    ("27.0", {}, "27"),
    ("1,234", {}, "1234"),
    ("\\boxed{(1+1+1)\\times 8}", {"kind": "game24", "numbers": [1, 1, 1, 8]}, "(1+1+1)*8"),
])
def test_final_format_error_is_the_only_modify(library, arg, kw, new) -> None:
    iv = _fire(library, "final_format_error", "Find it.", "", arg, **kw)
    assert iv is not None and iv.type is InterventionType.MODIFY_ACTION
    assert iv.new_action_type == "FINAL" and iv.new_action_arg == new


def test_pfs_only_act_on_final(library) -> None:
    ctx = math_ctx(AIME, "17 × 23 = 381")
    for pf in library.pfs():
        assert not pf.should_activate(ctx, "SEARCH", "\\boxed{1376}")


def test_verification_missing_always_fires_and_others_can_stay_quiet(library) -> None:
    item = MathItem(id="q", problem="Cities A and B are 45 miles apart. How many miles from A do they meet?",
                    answers=["27"])
    d = pre_final(item, "They close 30 miles per hour, so they meet after 45/30 = 1.5 hours; "
                        "18 * 1.5 = 27 miles from A. Check: 12 * 1.5 = 18 and 27 + 18 = 45.", "27", library.pfs())
    assert [f.skill_id for f in d.fired] == ["verification_missing"]
    assert d.action_type == "FINAL" and d.arg == "27" and not d.errors


def test_no_math_pf_is_prompt_equivalent(library) -> None:
    """App. B.5: a math PF's text is built from runtime state, so two problems give two texts."""
    for s in library.skills:
        texts, fired = set(), 0
        for q, th, a in [("Find the remainder when $N$ is divided by 7. How many ways? Simplify.", "17 × 23 = 381. "
                          "Case 1, Case 3. so the answer is 12. The pattern seems clear. Clearly.", "\\boxed{-12}"),
                         ("Find the remainder when $N$ is divided by 9. How many pairs? Simplify.", "2 × 2 = 5. "
                          "Case 2, Case 5. so the answer is 6/4. The pattern seems odd. Obviously.", "$-6/4$ hours")]:
            item = MathItem(id="x", problem=q, answers=["0"])
            ctx = math_ctx(item, th)
            if s.pf.should_activate(ctx, "FINAL", a):
                fired += 1
                texts.add(s.pf.intervene(ctx, "FINAL", a).context_text)
        assert len(texts) == fired, f"{s.skill_id} produced the same text for two different problems"


def test_library_pfs_on_real_problems_do_not_raise(library) -> None:
    items = load_aime24(need("math/aime24.jsonl"))
    for it in items:
        d = pre_final(it, it.meta["solution"], it.answers[0], library.pfs())
        assert not d.errors, d.errors
        assert "verification_missing" in [f.skill_id for f in d.fired]
        assert "arithmetic_slip" not in [f.skill_id for f in d.fired], it.id  # the gold solution has no slips


def test_a_sympy_timeout_is_counted_and_logged_not_silent(caplog) -> None:
    from hasp.domains.math import answers

    before = answers.SYMPY_TIMEOUTS[0]
    with caplog.at_level("WARNING", logger="hasp.domains.math.answers"):
        verdict = answers.answers_equivalent("x^2+2x+1", "(x+1)^2", timeout=1e-6)
    assert verdict is False  # no verdict in time reads "not equivalent" ...
    assert answers.SYMPY_TIMEOUTS[0] == before + 1  # ... and is counted
    assert "no verdict within" in caplog.text
