"""A GBNF grammar without recursive rules, as one Python regular expression, so a test can ask
whether a text is a sentence of the grammar without a model.

Only what the project's grammars use: string literals, character classes (GBNF's escapes are
Python's), rule references (inlined), grouping, ``|``, ``?``, ``*``, ``+`` and ``{m,n}``. A grammar
that refers to a rule recursively is refused, since a regular expression cannot say it. The real
check that llama.cpp reads the same grammar is in the model tests.
"""

from __future__ import annotations

import re
from functools import lru_cache

_TOKEN = re.compile(r'''\s*(?:
    (?P<lit>"(?:\\.|[^"\\])*")
  | (?P<cls>\[(?:\\.|[^\]\\])*\])
  | (?P<name>[A-Za-z][A-Za-z0-9-]*)
  | (?P<op>[()|?*+])
  | (?P<rep>\{\d+(?:,\d*)?\})
)''', re.X)
_LITERAL_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"', "[": "[", "]": "]"}


def _literal(token: str) -> str:
    body, out, i = token[1:-1], [], 0
    while i < len(body):
        if body[i] == "\\":
            nxt = body[i + 1]
            if nxt == "x":
                out.append(chr(int(body[i + 2:i + 4], 16)))
                i += 4
                continue
            out.append(_LITERAL_ESCAPES[nxt])
            i += 2
            continue
        out.append(body[i])
        i += 1
    return re.escape("".join(out))


def _rules(grammar: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in grammar.splitlines():
        if line.strip():
            name, _, body = line.partition("::=")
            out[name.strip()] = body.strip()
    return out


def to_regex(grammar: str) -> str:
    """The grammar's ``root`` as a regular expression (to be used with ``re.fullmatch``)."""
    rules = _rules(grammar)

    def expand(name: str, stack: tuple[str, ...]) -> str:
        if name in stack:
            raise ValueError(f"rule {name} is recursive: {' -> '.join((*stack, name))}")
        body, pos, parts = rules[name], 0, []
        while pos < len(body):
            m = _TOKEN.match(body, pos)
            if m is None or m.end() == pos:
                if body[pos:].strip():
                    raise ValueError(f"rule {name}: cannot read {body[pos:]!r}")
                break
            pos = m.end()
            if m["lit"]:
                parts.append(_literal(m["lit"]))
            elif m["cls"]:
                parts.append(m["cls"])
            elif m["name"]:
                parts.append(f"(?:{expand(m['name'], (*stack, name))})")
            elif m["op"] == "(":
                parts.append("(?:")
            else:
                parts.append(m["op"] or m["rep"])
        return "".join(parts)

    return expand("root", ())


@lru_cache(maxsize=None)
def compiled(grammar: str) -> re.Pattern[str]:
    return re.compile(to_regex(grammar), re.S)


def accepts(grammar: str, text: str) -> bool:
    """Is ``text`` a whole sentence of ``grammar``?"""
    return compiled(grammar).fullmatch(text) is not None
