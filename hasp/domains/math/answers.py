"""Math answers: pull the final answer out of model text, normalise it, decide equivalence.

Equivalence is tried cheapest-first and never raises:

1. string equality after :func:`normalize_answer` (``\\boxed{}``, ``$``, ``\\text{}``, unit words,
   ``x =`` prefixes, spacing, trailing period removed);
2. exact rational comparison when both sides are plain numbers (``"025" == 25``,
   ``"27.0" == 27``, ``"1,234" == 1234``, ``"\\frac{3}{4}" == "0.75"``) — no float tolerance;
3. element-wise comparison of tuples / lists (order kept) and ``\\{…\\}`` sets (order ignored);
4. sympy on a small LaTeX→sympy translation (``\\sqrt``, ``\\pi``, ``^``, implicit products),
   with input-size guards and a wall-clock timeout. Any sympy failure means "not equivalent by
   sympy", and the answer falls back to the string comparison of step 1.

This module also holds :func:`arithmetic_claims`, the checker the math PFs use to find wrong
"a op b = c" statements in a model's reasoning.
"""

from __future__ import annotations

import logging
import re
import signal
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import TypeVar

from hasp.domains.math.game24 import evaluate_arithmetic
from hasp.textutil import balanced

__all__ = [
    "ArithmeticClaim", "answers_equivalent", "arithmetic_claims", "clean_answer", "extract_final_answer",
    "format_number", "is_equivalent_any", "normalize_answer", "parse_number", "strip_boxed",
]

SYMPY_TIMEOUT_S = 2.0
_MAX_SYMPY_CHARS = 120

# ----------------------------------------------------------------------------- extraction


def _last_command(text: str, command: str) -> str | None:
    """Argument of the last ``\\command{…}`` (balanced braces), or None."""
    found = None
    for m in re.finditer(re.escape(command) + r"\s*\{", text):
        got = balanced(text, m.end() - 1, "{", "}")
        if got is not None:
            found = got[0]
    return found


def strip_boxed(text: str) -> str:
    """``\\boxed{x}`` / ``\\fbox{x}`` → ``x`` (the last box wins); other text unchanged."""
    for cmd in ("\\boxed", "\\fbox"):
        inner = _last_command(text, cmd)
        if inner is not None:
            return inner.strip()
    m = re.search(r"\\boxed\s+(\S+)", text)  # "\boxed 5"
    return m.group(1) if m else text


_FINAL = re.compile(r"FINAL(?:[ _]ANSWER)?\s*\[", re.I)
_ANSWER_TAG = re.compile(r"<answer>\s*(.*?)\s*</answer>", re.I | re.S)
_ANSWER_IS = re.compile(
    r"(?:final answer|the answer|answer)\s*(?:is|:|=)\s*:?\s*(.+?)\s*(?:$|\n|\.(?!\d)|;)", re.I)


def extract_final_answer(text: str | None) -> str | None:
    """The answer a model committed to, or None.

    Looks for, in this order: the last ``FINAL[…]`` (brackets balanced, so
    ``FINAL[\\frac{1}{2}]`` or ``FINAL[[1, 2]]`` survive), the last ``<answer>…</answer>`` (the
    AgentFlow prompt's format), the last ``\\boxed{…}``, then "the answer is X" / "Answer: X".
    The returned text is stripped but otherwise raw; :func:`normalize_answer` cleans it.
    """
    text = text or ""
    found = None
    for m in _FINAL.finditer(text):
        got = balanced(text, m.end() - 1, "[", "]")
        if got is not None:
            found = got[0]
        else:  # unbalanced: take the rest of the line
            rest = text[m.end():].split("\n", 1)[0]
            found = rest.rsplit("]", 1)[0] if "]" in rest else rest
    if found is not None and found.strip():
        return found.strip()
    tags = _ANSWER_TAG.findall(text)
    if tags and tags[-1].strip():
        return tags[-1].strip()
    boxed = _last_command(text, "\\boxed")
    if boxed is not None and boxed.strip():
        return boxed.strip()
    hits = _ANSWER_IS.findall(text)
    if hits:
        return hits[-1].strip().strip("*").strip()
    return None


# ----------------------------------------------------------------------------- normalisation

#: unit words dropped from an answer after a number ("27 miles" → "27")
UNIT_WORDS = (
    "square units", "square feet", "square meters", "square inches", "square centimeters",
    "sq units", "units", "unit", "miles", "mile", "mph", "km", "kilometers", "kilometer", "meters",
    "meter", "cm", "centimeters", "mm", "inches", "inch", "feet", "foot", "ft", "yards", "yard",
    "minutes", "minute", "min", "hours", "hour", "hrs", "hr", "seconds", "second", "sec",
    "days", "day", "weeks", "week", "years", "year", "degrees", "degree", "deg", "dollars", "dollar",
    "cents", "cent", "points", "ways", "people", "students",
)
_UNITS_RX = re.compile(r"^(.*?\d\}?)\s*(?:\\(?:text|mbox|mathrm)\{\s*)?(?:"
                       + "|".join(re.escape(u) for u in sorted(UNIT_WORDS, key=len, reverse=True))
                       + r")\.?\}?\s*$", re.I)


def _unwrap_commands(s: str) -> str:
    """Drop ``\\text{…}``, ``\\mathrm{…}``, ``\\mbox{…}`` wrappers but keep their content."""
    for _ in range(5):
        new = re.sub(r"\\(?:text|textbf|mathrm|mathbf|mbox|operatorname)\s*\{([^{}]*)\}", r"\1", s)
        if new == s:
            break
        s = new
    return s


def clean_answer(text: str | None) -> str:
    """Presentation-only cleanup of one answer, keeping its mathematical content and spelling.

    Removes ``\\boxed{}``, ``$``/``\\(\\)``, ``<answer>`` tags, a leading "The answer is" /
    ``x =`` , unit words after a number, ``^\\circ``/``°``, ``\\%``, a trailing period, and spacing
    commands. ``"\\boxed{25 \\text{ miles}}."`` → ``"25"``; ``"\\frac{3}{4}"`` stays as it is.
    """
    s = (text or "").strip()
    s = re.sub(r"</?answer>", "", s, flags=re.I).strip()
    s = re.sub(r"^(?:the\s+)?(?:final\s+)?answer\s*(?:is|:)\s*", "", s, flags=re.I)
    s = strip_boxed(s)
    s = s.replace("\\(", "").replace("\\)", "").replace("\\[", "").replace("\\]", "")
    s = s.replace("\\$", "").replace("$", "").strip()  # currency signs and math delimiters
    s = re.sub(r"\\[,;!: ]|\\quad|\\qquad|~", " ", s)
    s = s.replace("\\left", "").replace("\\right", "").replace("\\displaystyle", "")
    s = re.sub(r"\^\s*\{?\\circ\}?|°|\\degree", "", s)
    s = s.replace("\\%", "").replace("%", "")
    s = re.sub(r"\\[dt]frac", r"\\frac", s)
    m = _UNITS_RX.match(s)
    if m:
        s = m.group(1)
    s = _unwrap_commands(s).strip()
    s = re.sub(r"^[a-zA-Z]\s*=\s*(?=[^=]+$)", "", s)  # "x = 5" -> "5"
    s = re.sub(r"\s*\.$", "", s).strip()
    s = re.sub(r"\s+", " ", s)
    return s


def normalize_answer(text: str | None) -> str:
    """Canonical comparison key: :func:`clean_answer`, then spacing and case removed and a plain
    number written canonically (``"025"`` → ``"25"``, ``"27.0"`` → ``"27"``, ``"6/8"`` → ``"3/4"``)."""
    s = clean_answer(text)
    n = parse_number(s)
    if n is not None:
        return format_number(n)
    return re.sub(r"\s+", "", s).lower()


_INT = r"[+-]?\d+"
_NUM = re.compile(r"^[+-]?(?:\d+(?:\.\d*)?|\.\d+)$")
_GROUPED = re.compile(r"^[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
_FRAC_SLASH = re.compile(rf"^({_INT})\s*/\s*({_INT})$")
_FRAC_TEX = re.compile(r"^([+-]?)\\frac\s*\{\s*([+-]?\d+)\s*\}\s*\{\s*([+-]?\d+)\s*\}$")
_FRAC_TEX_SHORT = re.compile(r"^([+-]?)\\frac(\d)(\d)$")  # \frac34


def parse_number(text: str | None) -> Fraction | None:
    """A plain number as an exact Fraction, else None (never raises).

    Accepts integers with leading zeros or sign, decimals, thousands-grouped numbers
    (``1,234``), ``a/b`` and ``\\frac{a}{b}`` (also ``\\dfrac``/``\\tfrac``, ``\\frac34``).
    Not accepted: expressions, scientific notation, lists (``1,2``), zero denominators.
    """
    s = (text or "").strip().replace("−", "-").replace(" ", "")
    s = re.sub(r"\\[dt]frac", r"\\frac", s)
    if not s or len(s) > 60:
        return None
    try:
        if _GROUPED.match(s):
            s = s.replace(",", "")
        if _NUM.match(s):
            return Fraction(s)
        m = _FRAC_SLASH.match(s)
        if m:
            return Fraction(int(m.group(1)), int(m.group(2)))
        m = _FRAC_TEX.match(s) or _FRAC_TEX_SHORT.match(s)
        if m:
            v = Fraction(int(m.group(2)), int(m.group(3)))
            return -v if m.group(1) == "-" else v
    except (ValueError, ZeroDivisionError):
        return None
    return None


def format_number(v: Fraction) -> str:
    """``Fraction(27)`` → ``"27"``, ``Fraction(3, 4)`` → ``"3/4"``."""
    return str(v.numerator) if v.denominator == 1 else f"{v.numerator}/{v.denominator}"


# ----------------------------------------------------------------------------- sympy

log = logging.getLogger(__name__)

T = TypeVar("T")


def _with_timeout(fn: Callable[[], T], seconds: float) -> T | None:
    """Run ``fn`` with a wall-clock limit; None on timeout or on any exception.

    In the main thread a POSIX interval timer interrupts the computation. Elsewhere the call
    runs in a daemon thread that is abandoned on timeout (sympy cannot be cancelled from
    outside; the input-size guards make that rare).
    """
    use_signal = (threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")
                  and signal.getitimer(signal.ITIMER_REAL)[0] == 0)  # never clobber a caller's timer
    if use_signal:
        fired = []

        def _alarm(signum, frame):  # noqa: ANN001
            fired.append(True)  # sympy may catch the error and go on: the flag says the budget ran out
            raise TimeoutError

        old = signal.signal(signal.SIGALRM, _alarm)
        try:
            signal.setitimer(signal.ITIMER_REAL, seconds)
            out = fn()
        except Exception:  # noqa: BLE001 - sympy raises many kinds; all mean "cannot decide"
            out = None
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
        if fired:
            _timed_out(seconds)
            return None
        return out
    box: list[T] = []

    def run() -> None:
        try:
            box.append(fn())
        except Exception:  # noqa: BLE001
            pass

    t = threading.Thread(target=run, daemon=True, name="hasp-sympy")
    t.start()
    t.join(seconds)
    if t.is_alive():
        _timed_out(seconds)
    return box[0] if box else None


#: sympy checks that gave no verdict within their wall-clock budget (read "not equivalent"), this process
SYMPY_TIMEOUTS = [0]


def _timed_out(seconds: float) -> None:
    """A timeout is not a verdict: it is counted and logged, since on a loaded machine it can turn an
    equivalent answer into a miss (raise ``timeout`` of :func:`answers_equivalent` if this shows up)."""
    SYMPY_TIMEOUTS[0] += 1
    log.warning("math grading: sympy gave no verdict within %.1f s (%d so far in this process); the answer "
                "counts as not equivalent", seconds, SYMPY_TIMEOUTS[0])


_TEX_TO_SYMPY = [
    (re.compile(r"\\frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}"), r"((\1)/(\2))"),
    (re.compile(r"\\sqrt\s*\[([^\]]*)\]\s*\{([^{}]*)\}"), r"((\2)**(1/(\1)))"),
    (re.compile(r"\\sqrt\s*\{([^{}]*)\}"), r"sqrt(\1)"),
    (re.compile(r"\\sqrt\s*(\d+)"), r"sqrt(\1)"),
]
_SYMPY_OK = re.compile(r"^[0-9a-zA-Z+\-*/().,^ ]*$")


def _to_sympy_text(s: str) -> str | None:
    """LaTeX-lite → sympy syntax, or None if the text uses anything we do not translate."""
    s = s.replace("\\cdot", "*").replace("\\times", "*").replace("\\pi", "pi").replace("π", "pi")
    s = s.replace("√", "sqrt").replace("−", "-").replace("\\infty", "oo")
    for _ in range(6):
        before = s
        for rx, rep in _TEX_TO_SYMPY:
            s = rx.sub(rep, s)
        if s == before:
            break
    s = s.replace("{", "(").replace("}", ")")
    s = re.sub(r"\\ln\b", "log", s)
    s = re.sub(r"\\(sin|cos|tan|log|exp)\b", r"\1", s)
    if "\\" in s or not _SYMPY_OK.match(s) or s.count("**") + s.count("^") > 3:
        return None
    # Guard against huge powers like 10^10^10 before sympy tries to evaluate them.
    if re.search(r"\^\s*\(?\s*\d{4,}", s) or re.search(r"\^[^+\-*/]*\^", s):
        return None
    return s


def _sympy_equal(a: str, b: str) -> bool:
    import sympy
    from sympy.parsing.sympy_parser import (
        convert_xor,
        implicit_multiplication_application,
        parse_expr,
        standard_transformations,
    )

    tr = standard_transformations + (implicit_multiplication_application, convert_xor)
    ea = parse_expr(a, transformations=tr, evaluate=True)
    eb = parse_expr(b, transformations=tr, evaluate=True)
    diff = sympy.simplify(ea - eb)
    if diff == 0:
        return True
    if not diff.free_symbols:
        val = complex(sympy.N(diff, 30))
        return abs(val) < 1e-12
    return False


def _sympy_equivalent(a: str, b: str, timeout: float) -> bool:
    if len(a) > _MAX_SYMPY_CHARS or len(b) > _MAX_SYMPY_CHARS:
        return False
    ta, tb = _to_sympy_text(a), _to_sympy_text(b)
    if ta is None or tb is None or not ta.strip() or not tb.strip():
        return False
    return bool(_with_timeout(lambda: _sympy_equal(ta, tb), timeout))


# ----------------------------------------------------------------------------- equivalence


def _split_top(s: str) -> list[str] | None:
    """Split ``(a, b)`` / ``[a, b]`` / ``\\{a, b\\}`` / ``a, b`` at top-level commas; None if no list."""
    depth, parts, cur = 0, [], ""
    for c in s:
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if c == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += c
    parts.append(cur)
    return [p.strip() for p in parts] if len(parts) > 1 else None


def _as_list(s: str) -> tuple[list[str], bool] | None:
    """(elements, ordered) for a list-like answer, else None."""
    unordered = s.startswith("\\{") and s.endswith("\\}")
    body = s[2:-2] if unordered else s
    if not unordered and len(body) >= 2 and body[0] + body[-1] in ("()", "[]"):
        inner = body[1:-1]
        if balanced(body, 0, body[0], body[-1]) == (inner, len(body) - 1):
            body = inner
    if _GROUPED.match(body.replace(" ", "")):
        return None
    parts = _split_top(body)
    return (parts, not unordered) if parts else None


def answers_equivalent(pred: str | None, gold: str | int | float | None, *,
                       timeout: float = SYMPY_TIMEOUT_S, use_sympy: bool = True) -> bool:
    """True if ``pred`` and ``gold`` denote the same answer. Never raises."""
    if pred is None or gold is None:
        return False
    try:
        return _equivalent(str(pred), _gold_text(gold), timeout, use_sympy, depth=0)
    except Exception:  # noqa: BLE001 - a scorer must never crash a run
        return normalize_answer(str(pred)) == normalize_answer(_gold_text(gold))


def _gold_text(gold: str | int | float) -> str:
    if isinstance(gold, float) and gold.is_integer():
        return str(int(gold))
    return str(gold)


def _equivalent(pred: str, gold: str, timeout: float, use_sympy: bool, depth: int) -> bool:
    cp, cg = clean_answer(pred), clean_answer(gold)
    if not cp or not cg:
        return False
    if normalize_answer(cp) == normalize_answer(cg):
        return True
    np_, ng = parse_number(cp), parse_number(cg)
    if np_ is not None and ng is not None:
        return np_ == ng
    if depth == 0:
        lp, lg = _as_list(cp), _as_list(cg)
        if lp and lg and len(lp[0]) == len(lg[0]):
            if lp[1] and lg[1]:
                return all(_equivalent(a, b, timeout, use_sympy, 1) for a, b in zip(lp[0], lg[0]))
            rest = list(lg[0])
            for a in lp[0]:
                hit = next((i for i, b in enumerate(rest) if _equivalent(a, b, timeout, use_sympy, 1)), None)
                if hit is None:
                    return False
                rest.pop(hit)
            return True
        if lp or lg:
            return False
    if use_sympy:
        return _sympy_equivalent(cp, cg, timeout)
    return False


def is_equivalent_any(pred: str | None, golds: Iterable[str | int | float], **kw: object) -> bool:
    """True if ``pred`` is equivalent to any of ``golds``."""
    return any(answers_equivalent(pred, g, **kw) for g in golds)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- reasoning checks


@dataclass(frozen=True)
class ArithmeticClaim:
    """One "lhs = rhs" statement with only numbers on both sides, and its exact truth."""

    text: str
    lhs: str
    rhs: str
    lhs_value: Fraction
    rhs_value: Fraction
    correct: bool

    @property
    def sign_flip(self) -> bool:
        """Wrong only by sign (``5 - 8 = 3``)."""
        return not self.correct and self.lhs_value == -self.rhs_value


_CLAIM_CHARS = r"[0-9 +\-*/^().=]"
_CLAIM_RUN = re.compile(rf"{_CLAIM_CHARS}*={_CLAIM_CHARS}*")
_NEIGHBOUR_BAD = re.compile(r"[A-Za-z_\\{}|!^']")


def _prep_reasoning(text: str) -> str:
    s = text.replace("−", "-").replace("–", "-").replace("×", "*").replace("·", "*").replace("÷", "/")
    s = s.replace("\\times", "*").replace("\\cdot", "*").replace("\\div", "/")
    s = s.replace("$", " ")
    s = re.sub(r"(?<=\d),(?=\d{3}\b)", "", s)  # thousands separators
    s = re.sub(r"\.(?!\d)|(?<!\d)\.", " ; ", s)  # a period that is not a decimal point ends a run
    return s


def _decimal_places(rhs: str) -> int | None:
    m = re.fullmatch(r"\s*[+-]?\d*\.(\d+)\s*", rhs)
    return len(m.group(1)) if m else None


def arithmetic_claims(text: str | None, *, limit: int = 50) -> list[ArithmeticClaim]:
    """Every pure-number equation in ``text`` ("17 × 23 = 391", "2^10 = 1024 = 1000 + 24").

    Only runs of digits, operators, parentheses and ``=`` whose neighbours are not letters are
    read, so "2x + 3 = 7" or "f(2) = 5" are never mistaken for arithmetic. A chain
    ``a = b = c`` gives one claim per adjacent evaluable pair. A decimal right-hand side counts
    as correct if it is within one unit of its last written digit ("1/3 = 0.333").
    """
    s = _prep_reasoning(text or "")
    out: list[ArithmeticClaim] = []
    for m in _CLAIM_RUN.finditer(s):
        run = m.group(0)
        start = m.start() + (len(run) - len(run.lstrip()))
        end = m.end() - (len(run) - len(run.rstrip()))
        run = s[start:end]
        if not run:
            continue
        before = s[start - 1] if start > 0 else " "
        after = s[end] if end < len(s) else " "
        prev_word = s[:start].rstrip()[-1:] or " "
        if _NEIGHBOUR_BAD.match(before) or _NEIGHBOUR_BAD.match(after):
            continue  # glued to a name: "x2 = 4", "f(2) = 5", "3 = 3x"
        if run[0] in "+-*/^=" and (prev_word.isalnum() or prev_word in ")]}"):
            continue  # continues an expression that has a variable: "2x + 3 = 7"
        if run[-1] in "+-*/^=(" :
            continue  # the right-hand side goes on with a variable: "7 = 2 + x"
        parts = run.split("=")
        vals: list[Fraction | None] = []
        for p in parts:
            p2 = p.strip()
            if not p2 or not re.search(r"\d", p2) or re.match(r"^[*/^+)]", p2) or re.search(r"[*/^+\-(]$", p2):
                vals.append(None)
                continue
            try:
                vals.append(evaluate_arithmetic(p2, extended=True))
            except ValueError:
                vals.append(None)
        for i in range(len(parts) - 1):
            a, b = vals[i], vals[i + 1]
            lhs, rhs = parts[i].strip(), parts[i + 1].strip()
            if a is None or b is None:
                continue
            if not re.search(r"\d\s*[-+*/^]\s*[-\d(]|\)\s*[-+*/^]|\)\s*\(", lhs + " = " + rhs):
                continue  # "5 = 5": no operation, nothing claimed
            ok = a == b
            places = _decimal_places(rhs)
            if not ok and places is not None:
                ok = abs(a - b) <= Fraction(1, 10 ** places)
            out.append(ArithmeticClaim(f"{lhs} = {rhs}", lhs, rhs, a, b, ok))
            if len(out) >= limit:
                return out
    return out
