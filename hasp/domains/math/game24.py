"""Game of 24: exact solver, generator of every solvable puzzle, and a safe expression verifier.

Rules implemented here (the standard ones, also AgentFlow's): combine the four numbers with the
binary operators ``+ - * /`` and parentheses, using each number exactly once, to reach 24.
Arithmetic is exact (``fractions.Fraction``), so ``8 / (3 - 8/3)`` counts as 24.

Decisions a caller should know about:

* **No unary operators.** ``-3``, ``-(1-5)`` and ``+3`` are rejected: a puzzle number can only
  be combined with another by a binary operator, and a sign flip is not one of the four
  operations. (It would not enlarge the solvable set anyway: ``-(a-b)`` is ``b-a``.)
* **Only integer literals.** ``1.0`` or ``1e1`` are rejected, so "used numbers" is unambiguous.
* **Accepted spellings.** ``×``, ``·``, ``∗``, ``\\times``, ``\\cdot`` for ``*``; ``÷``, ``\\div`` for
  ``/``; ``−``/``–`` for ``-``; ``[ ]``/``{ }`` and ``\\left( \\right)`` as parentheses; one
  trailing ``= 24`` is tolerated.
* **Never ``eval``.** Text is parsed with :mod:`ast` and only number, binary-operator and
  expression nodes are walked; anything else (names, calls, attributes, ``**``, ``//``, ``%``)
  is rejected with the node type in the reason.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from itertools import combinations, combinations_with_replacement

__all__ = [
    "MAX_EXPRESSION_CHARS", "TARGET", "Verdict", "all_tuples", "evaluate_arithmetic", "is_solvable",
    "normalize_expression", "numbers_from_text", "solvable_tuples", "solve", "verify_expression",
]

TARGET = 24
#: longer input is rejected before parsing (a 4-number expression needs ~20 characters)
MAX_EXPRESSION_CHARS = 200

_BIN_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}


# --------------------------------------------------------------------------- verifier
@dataclass(frozen=True)
class Verdict:
    """Result of checking one expression against one puzzle.

    ``ok`` is the only field a scorer needs. ``code`` says which check failed first
    (``ok | empty | syntax | unsupported | numbers | zero_division | value``); ``value`` is the
    exact value when the expression could be evaluated (even if the numbers were wrong) and
    ``used`` the integer literals in the order they appear, so a PF can say *what* is wrong.
    """

    ok: bool
    reason: str
    value: Fraction | None = None
    code: str = "ok"
    used: tuple[int, ...] = field(default=())


class _Reject(ValueError):
    def __init__(self, code: str, reason: str) -> None:
        super().__init__(reason)
        self.code, self.reason = code, reason


_FRAC = re.compile(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")
_LATEX_SUBS = [
    (re.compile(r"\\left|\\right|\\!|\\,|\\;|\\ "), ""),
    (re.compile(r"\\times|\\cdot|[×·∗✕⋅]"), "*"),
    (re.compile(r"\\div|[÷∶]"), "/"),
    (re.compile(r"[−–—]"), "-"),
    (re.compile(r"[\[{]"), "("),
    (re.compile(r"[\]}]"), ")"),
]


def normalize_expression(expr: str) -> str:
    """Map the usual typographic / LaTeX spellings onto ``+ - * / ( )`` and drop ``= 24``."""
    s = (expr or "").strip().strip("$").strip()
    for _ in range(8):  # \frac{a}{b} -> ((a)/(b)), innermost first
        s, n = _FRAC.subn(r"((\1)/(\2))", s)
        if not n:
            break
    for rx, rep in _LATEX_SUBS:
        s = rx.sub(rep, s)
    s = re.sub(r"\s*=\s*24\s*\.?\s*$", "", s)
    return s.strip()


def _walk(node: ast.AST, used: list[int], extended: bool) -> Fraction:
    """Exact value of an arithmetic AST; raises ``_Reject`` on anything else."""
    if isinstance(node, ast.Expression):
        return _walk(node.body, used, extended)
    if isinstance(node, ast.Constant):
        v = node.value
        if isinstance(v, bool) or not isinstance(v, int):
            raise _Reject("unsupported", f"only integer literals are allowed, got {v!r}")
        used.append(v)
        return Fraction(v)
    if isinstance(node, ast.UnaryOp):
        if extended and isinstance(node.op, (ast.USub, ast.UAdd)):
            inner = _walk(node.operand, used, extended)
            return -inner if isinstance(node.op, ast.USub) else inner
        raise _Reject("unsupported", "unary operators (e.g. a leading minus) are not allowed")
    if isinstance(node, ast.BinOp):
        if extended and isinstance(node.op, ast.Pow):
            base = _walk(node.left, used, extended)
            exp = _walk(node.right, used, extended)
            if exp.denominator != 1 or abs(exp) > 64 or (abs(base.numerator) > 10**6 and exp > 4):
                raise _Reject("unsupported", "exponent too large or not an integer")
            if base == 0 and exp < 0:
                raise _Reject("zero_division", "division by zero")
            return base ** int(exp)
        op = _BIN_OPS.get(type(node.op))
        if op is None:
            raise _Reject("unsupported", f"operator {type(node.op).__name__} is not allowed (only + - * /)")
        a = _walk(node.left, used, extended)
        b = _walk(node.right, used, extended)
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        if b == 0:
            raise _Reject("zero_division", "division by zero")
        return a / b
    raise _Reject("unsupported", f"{type(node).__name__} is not allowed; only numbers, + - * / and parentheses")


def _parse(text: str) -> ast.Expression:
    if not text:
        raise _Reject("empty", "empty expression")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise _Reject("syntax", f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        return ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        msg = getattr(e, "msg", None) or str(e) or type(e).__name__
        raise _Reject("syntax", f"not a valid arithmetic expression ({msg})") from None


def evaluate_arithmetic(expr: str, *, extended: bool = False) -> Fraction:
    """Exact value of a pure arithmetic expression (integers, ``+ - * /``, parentheses).

    ``extended=True`` (for checking arithmetic claims in free text) also admits decimals (read
    exactly: ``0.1`` is 1/10), ``^``/``**`` with small integer exponents and unary signs.
    Raises ``ValueError`` (with a reason) on anything else, including division by zero.
    """
    text = normalize_expression(expr)
    if extended:
        text = text.replace("^", "**")
        text = re.sub(r"(?<![\d.])(\d+)\.(\d+)(?![\d.])",
                      lambda m: f"({int(m.group(1) + m.group(2))}/{10 ** len(m.group(2))})", text)
    try:
        return _walk(_parse(text), [], extended)
    except _Reject as e:
        raise ValueError(e.reason) from None


def _fmt(v: Fraction) -> str:
    return str(v.numerator) if v.denominator == 1 else f"{v.numerator}/{v.denominator}"


def _multiset_diff(used: Sequence[int], want: Sequence[int]) -> str:
    u, w = Counter(used), Counter(want)
    parts = []
    for n in sorted(set(u) | set(w)):
        if u[n] == w[n]:
            continue
        if not w[n]:
            parts.append(f"{n} is not a puzzle number")
        elif not u[n]:
            parts.append(f"{n} is not used" + (f" ({w[n]}x in the puzzle)" if w[n] > 1 else ""))
        else:
            parts.append(f"{n} used {u[n]}x but the puzzle has it {w[n]}x")
    return "; ".join(parts)


def _literals(tree: ast.Expression) -> list[int]:
    """Integer literals in source order, after checking every node is plain arithmetic."""
    allowed_ops = tuple(_BIN_OPS)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Expression, ast.BinOp, ast.Constant, *allowed_ops)):
            if isinstance(node, ast.BinOp) and not isinstance(node.op, allowed_ops):
                raise _Reject("unsupported", f"operator {type(node.op).__name__} is not allowed (only + - * /)")
            if isinstance(node, ast.Constant) and (isinstance(node.value, bool) or not isinstance(node.value, int)):
                raise _Reject("unsupported", f"only integer literals are allowed, got {node.value!r}")
            continue
        if isinstance(node, ast.UnaryOp):
            raise _Reject("unsupported", "unary operators (e.g. a leading minus) are not allowed")
        if isinstance(node, ast.operator):
            continue  # the BinOp check above already names a disallowed operator
        raise _Reject("unsupported", f"{type(node).__name__} is not allowed; only numbers, + - * / and parentheses")
    lits = [n for n in ast.walk(tree) if isinstance(n, ast.Constant)]
    return [n.value for n in sorted(lits, key=lambda n: (n.lineno, n.col_offset))]


def verify_expression(expr: str, nums: Iterable[int], target: int = TARGET) -> Verdict:
    """Check that ``expr`` uses exactly the multiset ``nums`` and equals ``target`` exactly.

    Never evaluates Python: the text is parsed with ``ast`` and only arithmetic nodes are walked.
    Checks in order: parses → only allowed syntax → numbers used == puzzle numbers → no division
    by zero → value == target. ``value`` and ``used`` are filled as far as the checks got.
    """
    want = sorted(int(n) for n in nums)
    text = normalize_expression(expr)
    try:
        tree = _parse(text)
        used = _literals(tree)
    except _Reject as e:
        return Verdict(False, e.reason, None, e.code, ())
    try:
        value: Fraction | None = _walk(tree, [], extended=False)
        zero_div = None
    except _Reject as e:  # only division by zero can still fail: the syntax is already checked
        value, zero_div = None, e
    if sorted(used) != want:
        return Verdict(False, f"numbers used {sorted(used)} != puzzle numbers {want}: {_multiset_diff(used, want)}",
                       value, "numbers", tuple(used))
    if zero_div is not None:
        return Verdict(False, zero_div.reason, None, "zero_division", tuple(used))
    assert value is not None
    if value != target:
        return Verdict(False, f"value is {_fmt(value)}, not {target}", value, "value", tuple(used))
    return Verdict(True, "ok", value, "ok", tuple(used))


# --------------------------------------------------------------------------- solver
# Precedence-aware rendering: (expression, top-level operator or "" for a bare number).
_Expr = tuple[str, str]


def _wrap(e: _Expr, need: bool) -> str:
    return f"({e[0]})" if need else e[0]


def _combine(a: _Expr, op: str, b: _Expr) -> _Expr:
    low = ("+", "-")
    if op == "+":
        s = f"{a[0]}+{b[0]}"
    elif op == "-":
        s = f"{a[0]}-{_wrap(b, b[1] in low)}"
    elif op == "*":
        s = f"{_wrap(a, a[1] in low)}*{_wrap(b, b[1] in low)}"
    else:
        s = f"{_wrap(a, a[1] in low)}/{_wrap(b, b[1] != '')}"
    return s, op


def _ops(a: Fraction, ea: _Expr, b: Fraction, eb: _Expr) -> Iterable[tuple[Fraction, _Expr]]:
    yield a + b, _combine(ea, "+", eb)
    yield a - b, _combine(ea, "-", eb)
    yield b - a, _combine(eb, "-", ea)
    yield a * b, _combine(ea, "*", eb)
    if b:
        yield a / b, _combine(ea, "/", eb)
    if a:
        yield b / a, _combine(eb, "/", ea)


def _splits(ms: tuple[int, ...]) -> Iterable[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Each unordered split of a sorted multiset into two non-empty sub-multisets, once."""
    n = len(ms)
    seen = set()
    idx = range(n)
    for k in range(1, n // 2 + 1):
        for left_idx in combinations(idx, k):
            left = tuple(ms[i] for i in left_idx)
            right = tuple(ms[i] for i in idx if i not in left_idx)
            key = (left, right) if (k, left) <= (n - k, right) else (right, left)
            if key not in seen:
                seen.add(key)
                yield key


@lru_cache(maxsize=1 << 16)
def _values(ms: tuple[int, ...]) -> dict[Fraction, _Expr]:
    """Every value reachable from the sorted multiset ``ms``, with one expression for each.

    Complete because any expression tree's root splits its leaves into two multisets and a
    subtree's value set depends only on its leaf multiset.
    """
    if len(ms) == 1:
        return {Fraction(ms[0]): (str(ms[0]), "")}
    out: dict[Fraction, _Expr] = {}
    for left, right in _splits(ms):
        vr = _values(right)
        for a, ea in _values(left).items():
            for b, eb in vr.items():
                for v, e in _ops(a, ea, b, eb):
                    out.setdefault(v, e)
    return out


def _key(nums: Iterable[int]) -> tuple[int, ...]:
    ms = tuple(sorted(int(n) for n in nums))
    if not ms:
        raise ValueError("need at least one number")
    return ms


def _needed(a: Fraction, t: Fraction) -> Iterable[tuple[Fraction, str, bool]]:
    """For a fixed left value ``a``: (b, op, b_first) such that combining gives ``t``."""
    yield t - a, "+", False          # a + b
    yield a - t, "-", False          # a - b
    yield a + t, "-", True           # b - a
    if a:
        yield t / a, "*", False      # a * b
        yield a * t, "/", True       # b / a
        if t:
            yield a / t, "/", False  # a / b  (b = a/t is non-zero here)


@lru_cache(maxsize=1 << 14)
def _find(ms: tuple[int, ...], target: Fraction) -> _Expr | None:
    """One expression for ``target`` from the multiset ``ms``, or None.

    The root split is searched by inverse lookup in the sub-multisets' value tables, so only
    the (small) tables of at most ``len(ms) - 1`` numbers are ever materialised.
    """
    if len(ms) == 1:
        return (str(ms[0]), "") if ms[0] == target else None
    for left, right in _splits(ms):
        vl, vr = _values(left), _values(right)
        for a, ea in vl.items():
            for b, op, b_first in _needed(a, target):
                eb = vr.get(b)
                if eb is not None:
                    return _combine(eb, op, ea) if b_first else _combine(ea, op, eb)
    return None


def solve(nums: Iterable[int], target: int = TARGET) -> str | None:
    """One expression that makes ``target`` from ``nums`` (each used once), or None."""
    e = _find(_key(nums), Fraction(target))
    return e[0] if e else None


def is_solvable(nums: Iterable[int], target: int = TARGET) -> bool:
    return _find(_key(nums), Fraction(target)) is not None


def all_tuples(lo: int = 1, hi: int = 13, k: int = 4) -> list[tuple[int, ...]]:
    """Every sorted k-multiset of integers in [lo, hi] (1820 for the standard 1–13, k=4)."""
    return list(combinations_with_replacement(range(lo, hi + 1), k))


@lru_cache(maxsize=8)
def solvable_tuples(lo: int = 1, hi: int = 13, target: int = TARGET, k: int = 4) -> tuple[tuple[int, ...], ...]:
    """Every sorted k-multiset of [lo, hi] that can make ``target``, in lexicographic order."""
    t = Fraction(target)
    return tuple(ms for ms in all_tuples(lo, hi, k) if _find(ms, t) is not None)


_LIST = re.compile(r"[\[(]\s*(\d+(?:\s*,\s*\d+){3})\s*[\])]")
_PLAIN = re.compile(r"\bnumbers?\b[^0-9\n]{0,20}?(\d+)[\s,]+(\d+)[\s,]+(\d+)[\s,]+(?:and\s+)?(\d+)\b", re.I)


def numbers_from_text(text: str) -> list[int] | None:
    """The four puzzle numbers in a 24-game prompt ("[1, 1, 4, 6]" or "numbers 1 1 4 6"), else None."""
    text = text or ""
    m = _LIST.search(text)
    if m:
        return [int(x) for x in re.findall(r"\d+", m.group(1))]
    m = _PLAIN.search(text)
    if m:
        return [int(x) for x in m.groups()]
    return None
