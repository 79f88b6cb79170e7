"""The code task: one step. The policy sees the problem and emits code; that code is the
FINAL action's argument; the PFs of ``hasp/skills/code`` look at it; the sandbox grades it.

* ``render_messages(item)`` – chat messages for the policy.
* ``extract_code(text)`` – the program inside a completion (```python fences, raw code,
  or a HumanEval-style indented body).
* ``CODE_GRAMMAR`` – the reply format the prompt asks for (one ```python block) as GBNF, for
  engines that constrain decoding.
* ``build_program(item, code)`` – the complete program that is tested (HumanEval-style
  items keep their prompt as a prefix, so imports and helper functions stay defined).
* ``score(item, completion)`` – extract, build, run the tests: a ``TestResult``.
* ``final_context(item)`` – the step context a code PF receives with ``FINAL``.
* ``code_view(text)`` / ``format_findings`` – the static-analysis view the seed PFs share.
"""

from __future__ import annotations

import ast
import re
import textwrap
import warnings
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from hasp.domains.code.datasets import CodeItem
from hasp.domains.code.grade import run_tests
from hasp.llm import gbnf
from hasp.prompts import prompt, render
from hasp.sandbox.program import TestResult

SYSTEM_PROMPT = prompt("hasp.domains.code", "task", "system")

_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.S | re.I)
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+.\-]*)[^\n]*\n(.*?)(?:\n[ \t]*```|\Z)", re.S)
_PY_LANGS = {"", "python", "py", "python3", "py3", "pycon", "ipython"}
_CODE_START = re.compile(r"^(?:def |async def |class |import |from \S+ import |@\w)", re.M)

#: the whole reply is one ```python block (what the system prompt asks for): the code holds no
#: triple backquote, so the block ``extract_code`` finds is this one; a reply cut by the token budget
#: is an unterminated block, which ``extract_code`` also reads
CODE_GRAMMAR = gbnf.rules({
    "root": f'{gbnf.literal("```python" + chr(10))} code {gbnf.literal(chr(10) + "```")}',
    "code": '([^`] | "`" [^`] | "``" [^`])*',
})


def render_messages(item: CodeItem, skills_text: str = "") -> list[dict[str, str]]:
    """System + user message for one problem; ``skills_text`` is the skills' prompt block."""
    system = SYSTEM_PROMPT
    if skills_text.strip():
        system += f"\n\n{prompt('hasp.domains.code', 'task', 'skills_header')}\n{skills_text.strip()}"
    if item.prefix:
        user = render("hasp.domains.code", "task", "complete", prompt=item.prompt.rstrip())
    else:
        user = render("hasp.domains.code", "task", "write", prompt=item.prompt.strip(), entry_point=item.entry_point)
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


# ---------------------------------------------------------------------------- extraction

def _parse(src: str) -> ast.Module:
    with warnings.catch_warnings():  # model code with "\d" in plain strings etc.
        warnings.simplefilter("ignore")
        return ast.parse(src)


def _parses(src: str) -> bool:
    try:
        _parse(src)
        return True
    except (SyntaxError, ValueError):
        return False


def _defines(src: str, name: str) -> bool:
    pattern = rf"^[ \t]*(?:async[ \t]+)?def[ \t]+{re.escape(name)}[ \t]*\("
    return bool(name) and re.search(pattern, src, re.M) is not None


def _trim_to_parse(src: str, max_trims: int = 60) -> str:
    """Drop trailing lines (prose after the code) until the rest parses."""
    lines = src.rstrip().split("\n")
    for _ in range(min(max_trims, len(lines))):
        cand = "\n".join(lines)
        if _parses(cand) or _parses(textwrap.dedent(cand)):
            return cand
        lines.pop()
        while lines and not lines[-1].strip():
            lines.pop()
        if not lines:
            break
    return src.rstrip()


def extract_code(text: str | None, entry_point: str | None = None) -> str:
    """The code in a model completion.

    Fenced blocks win (python-tagged or untagged; an unterminated last fence counts):
    the last block defining ``entry_point``, else the longest block with a ``def``/``class``,
    else the first block. Without fences: the text itself if it parses (also as an indented
    function body), else from the first line that starts code, trimmed of trailing prose;
    "" when nothing in the text looks like code."""
    if not text:
        return ""
    text = _THINK.sub("", text.replace("\r\n", "\n"))
    blocks = [m.group(2) for m in _FENCE.finditer(text) if m.group(1).lower() in _PY_LANGS]
    blocks = [b for b in blocks if b.strip()]
    if blocks:
        if entry_point:
            hits = [b for b in blocks if _defines(b, entry_point)]
            if hits:
                return hits[-1].strip("\n")
        with_defs = [b for b in blocks if re.search(r"^\s*(?:async\s+)?(?:def|class)\s", b, re.M)]
        return max(with_defs or blocks[:1], key=len).strip("\n")
    if "```" in text:  # only non-python fences (e.g. ```text): drop the fence lines
        text = re.sub(r"^[ \t]*```.*$", "", text, flags=re.M)
    stripped = text.strip("\n")
    if _parses(stripped) or (stripped[:1].isspace() and _parses(textwrap.dedent(stripped))):
        return stripped.rstrip()
    m = _CODE_START.search(text)
    if m:
        return _trim_to_parse(text[m.start():])
    if stripped[:1].isspace():
        return _trim_to_parse(stripped)
    return ""  # prose without anything that parses or looks like code


def build_program(item: CodeItem, code: str) -> str:
    """The program to test. Items with a code prefix (HumanEval) keep it, so a full function
    redefines the prompt's stub after the prompt's imports/helpers, and a bare body completes it."""
    code = code.rstrip() + "\n"
    if not item.prefix:
        return code
    prefix = item.prefix.rstrip("\n") + "\n"
    first = next((ln for ln in code.split("\n") if ln.strip()), "")
    indented = first[:1].isspace()
    if not first:
        return prefix
    if _defines(code, item.entry_point):  # a full function: it replaces the prompt's stub
        return prefix + "\n\n" + (textwrap.dedent(code) if indented else code)
    if indented:  # an indented body continues the prompt's function
        return prefix + code
    return prefix + textwrap.indent(code, "    ")  # an unindented body


def score(item: CodeItem, completion: str, *, timeout_s: float = 10.0, memory_mb: int = 512,
          **kw: Any) -> TestResult:
    """Grade one completion: extract the code, build the program, run the item's tests."""
    code = extract_code(completion, item.entry_point)
    if not code.strip():
        return TestResult(False, "error", "no code found in the completion", 0.0)
    return run_tests(build_program(item, code), item, timeout_s=timeout_s, memory_mb=memory_mb, **kw)


def final_context(item: CodeItem, thought: str = "") -> dict[str, Any]:
    """Step context for the single FINAL step (App. C.5 names, plus the code-specific keys)."""
    return {"question": item.prompt, "step_count": 0, "has_read": False, "search_count": 0,
            "read_count": 0, "empty_results": 0, "contradictory_sources": False, "max_steps": 1,
            "action_history": [], "last_search_results_text": "", "all_read_contents": "",
            "thought": thought, "entry_point": item.entry_point, "task_id": item.task_id,
            "domain": "code"}


# ---------------------------------------------------------------------------- static analysis view

@dataclass(frozen=True)
class CodeView:
    """Emitted code, parsed once: PFs only read it."""

    code: str
    tree: ast.Module | None
    error: str = ""          # the SyntaxError when ``tree`` is None
    error_line: int = 0

    @property
    def lines(self) -> list[str]:
        return self.code.split("\n")

    def line(self, n: int) -> str:
        ls = self.lines
        return ls[n - 1].strip() if 1 <= n <= len(ls) else ""

    def functions(self) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
        if self.tree is None:
            return []
        return [n for n in ast.walk(self.tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]

    def function(self, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        return next((f for f in self.functions() if f.name == name), None)


@lru_cache(maxsize=256)
def code_view(text: str) -> CodeView:
    """Parse a FINAL argument (raw completion or code) into a ``CodeView`` (cached)."""
    raw = text or ""
    first = next((ln for ln in raw.split("\n") if ln.strip()), "")
    looks_like_code = bool(_CODE_START.match(first)) or first[:1].isspace() or _parses(raw)
    # Raw code is analysed as written (a syntax error must stay visible); fenced or
    # prose-wrapped completions are reduced to their code first.
    code = raw if looks_like_code and "```" not in raw and "<think>" not in raw else (extract_code(raw) or raw)
    try:
        tree = _parse(code)
    except (SyntaxError, ValueError) as e:
        dedented = textwrap.dedent(code)
        try:
            return CodeView(dedented, _parse(dedented))
        except (SyntaxError, ValueError):
            pass
        return CodeView(code, None, f"{type(e).__name__}: {getattr(e, 'msg', e)}", getattr(e, "lineno", 0) or 0)
    return CodeView(code, tree)


_DEF_IN_PROMPT = re.compile(r"^\s*def\s+([A-Za-z_]\w*)\s*\(", re.M)
_CALL_IN_TEST = re.compile(r"assert\s+(?:not\s+)?\(?\s*(?:[\w.]+\()?\s*([A-Za-z_]\w*)\s*\(")


def entry_point_of(ctx: dict[str, Any], view: CodeView | None = None) -> str:
    """The function the tests will call: ``ctx['entry_point']``, else the last ``def`` in the
    question (HumanEval prompts), else the call in a shown ``assert`` (MBPP), else ""."""
    ep = ctx.get("entry_point")
    if isinstance(ep, str) and ep:
        return ep
    q = str(ctx.get("question", ""))
    defs = _DEF_IN_PROMPT.findall(q)
    if defs:
        return defs[-1]
    m = _CALL_IN_TEST.search(q)
    if m and m.group(1) not in ("isinstance", "set", "abs", "round", "len", "sorted", "math"):
        return m.group(1)
    return ""


def param_names(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    a = fn.args
    return [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs) if x.arg not in ("self", "cls")]


def format_findings(tag: str, findings: list[tuple[int, str]], view: CodeView, advice: str,
                    limit: int = 4) -> str:
    """``[TAG] line N: `src` -> why`` for up to ``limit`` findings, then the advice."""
    seen: set[tuple[int, str]] = set()
    out = [f"[{tag}]"]
    for lineno, why in findings:
        if (lineno, why) in seen:
            continue
        seen.add((lineno, why))
        if len(seen) > limit:
            out.append(f"... and {len(set(findings)) - limit} more.")
            break
        src = view.line(lineno)
        out.append(f"line {lineno}: `{src[:120]}` -> {why}" if src else f"{why}")
    out.append(advice)
    return "\n".join(out)


_GUARD_EXCEPTIONS = {"IndexError", "ValueError", "KeyError", "ZeroDivisionError", "LookupError",
                     "Exception", "BaseException", "StopIteration", "TypeError"}


def guards_empty(scope: ast.AST, name: str) -> bool:
    """Whether ``scope`` looks at ``name`` in a condition (``if not xs``, ``len(xs) < 2``,
    ``xs and xs[0]``, ``assert xs``) or catches the errors an empty value raises."""
    for node in ast.walk(scope):
        tests: list[ast.AST] = []
        if isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Assert)):
            tests.append(node.test)
        elif isinstance(node, ast.BoolOp):
            tests.extend(node.values[:-1])
        elif isinstance(node, ast.comprehension):
            tests.extend(node.ifs)
        elif isinstance(node, ast.Try):
            for h in node.handlers:
                types = h.type.elts if isinstance(h.type, ast.Tuple) else [h.type]
                if h.type is None or any(isinstance(t, ast.Name) and t.id in _GUARD_EXCEPTIONS for t in types):
                    return True
        for t in tests:
            if any(isinstance(s, ast.Name) and s.id == name for s in ast.walk(t)):
                return True
    return False
