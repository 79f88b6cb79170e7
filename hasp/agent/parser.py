"""Turn a small model's free text into one action; only an explicit action counts.

A 135M-parameter policy writes "Action: Search[x]", "SEARCH: x", "search(x)",
"Final Answer: x" or nothing usable at all. Spelling is tolerated (case, spaces, aliases,
other bracket kinds, a labelled ``FINAL: x`` line, a closing bracket missing at the very end of
a short reply) because it keeps what the model meant. What the model did not commit to is
refused, so ``answered`` counts only answers: prose that mentions an answer ("the answer is
somewhere in the documents"), a prompt placeholder copied back (``FINAL[answer]``) and an
unclosed argument that runs on (a sentence cut by the token budget). A refusal is a
``ParseFailure`` that the loop records and shows to the model; the parser never raises.

``action_grammar`` is the same format as a GBNF grammar, for engines that constrain decoding
(``llm.constrained``): built from this module's action names, placeholders and bounds, so every reply
it admits parses to the action on its ``Action:`` line.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from hasp.action_format import ACTION_NAME, ACTIONS, PLACEHOLDERS, action_format
from hasp.action_format import ActionFormat as _Format
from hasp.action_format import action_key as _key
from hasp.llm import gbnf
from hasp.textutil import balanced

#: longest argument (words) accepted when its closing bracket is missing at the end of the reply;
#: a longer one is a sentence cut by the token budget, not an argument the model finished
MAX_UNCLOSED_WORDS = 10
_CLOSE = {"[": "]", "(": ")", "{": "}", "<": ">"}
_STATED = re.compile(r"\bthe (?:final )?answer is\b", re.I)

__all__ = ["ACTIONS", "ACTION_NAME", "PLACEHOLDERS", "ParseFailure", "ParsedAction", "action_format",
           "action_grammar", "parse_action"]


@dataclass
class ParsedAction:
    type: str
    arg: str
    thought: str


@dataclass
class ParseFailure:
    reason: str
    thought: str


@dataclass
class _Found:
    """One place in the reply that looks like an action: its argument, or why it is not one."""

    pos: int
    kind: str
    arg: str = ""
    refused: str = ""


def _clean(arg: str) -> str:
    return re.sub(r"\s+", " ", arg.strip().strip("\"'` ").strip())[:500]


def _checked(fmt: _Format, pos: int, name: str, raw_arg: str) -> _Found:
    kind, arg = fmt.names.get(_key(name)), _clean(raw_arg)
    if kind is None:
        return _Found(pos, "?", refused=f"{_clean(name)!r} is not an action of this agent")
    if not arg:
        return _Found(pos, kind, refused=f"{kind} has an empty argument")
    if arg.lower() in PLACEHOLDERS:
        return _Found(pos, kind, refused=f"{kind}[{arg}] repeats the prompt's placeholder")
    return _Found(pos, kind, arg)


def _bracketed(fmt: _Format, text: str) -> list[_Found]:
    """Every NAME[...] in order. Brackets are *balanced*, so FINAL[(1+1+1)*8] keeps its parentheses;
    an unclosed one is an argument only when it is short and ends the reply."""
    found = []
    for m in fmt.open.finditer(text):
        opener = m.group(2)
        closed = balanced(text, m.end() - 1, opener, _CLOSE[opener])
        if closed is not None:
            found.append(_checked(fmt, m.start(), m.group(1), closed[0]))
            continue
        rest = text[m.end():].strip()
        kind = fmt.names.get(_key(m.group(1)), "?")
        if "\n" in rest:
            found.append(_Found(m.start(), kind, refused=f"{kind}{opener} is not closed before the next line"))
        elif len(rest.split()) > MAX_UNCLOSED_WORDS:
            found.append(_Found(m.start(), kind, refused=f"{kind}{opener} is not closed and runs on for "
                                                          f"{len(rest.split())} words"))
        else:
            found.append(_checked(fmt, m.start(), m.group(1), rest))
    return found


def parse_action(text: str, actions: tuple[str, ...] = ACTIONS) -> ParsedAction | ParseFailure:
    """Return the first well-formed action of ``actions`` in ``text``; else why there is none.
    ``actions`` is the search agent's set by default, or a task's tools plus FINAL."""
    fmt = action_format(tuple(actions))
    text = text or ""  # arguments stay as written; names are looked up NFKC-normalised (``_key``)
    m_t = fmt.thought.search(text)
    thought = (m_t.group(1) if m_t else text.split("\n", 1)[0]).strip()[:1000]
    found = _bracketed(fmt, text) + [_checked(fmt, m.start(), m.group(1), m.group(2)) for m in fmt.colon.finditer(text)]
    found.sort(key=lambda f: f.pos)
    actions_found = [f for f in found if not f.refused]
    if actions_found:
        return ParsedAction(actions_found[0].kind, actions_found[0].arg, thought)
    if found:
        return ParseFailure(found[0].refused, thought)
    if _STATED.search(text):
        return ParseFailure("an answer stated in prose is not an action: " + fmt.no_action, thought)
    return ParseFailure(fmt.no_action, thought)


# ----------------------------------------------------------------------------- the format as a grammar

#: longest thought line the action grammar admits (characters)
MAX_THOUGHT_CHARS = 120
#: tokens of a reply budget kept for what follows the thought: the labels, the action name and ten
#: tokens of argument. A token holds at least one character, so a thought of (budget - this) characters
#: always leaves the action line room to start, and an argument the budget cuts has at most ten words,
#: which the parser still takes (``MAX_UNCLOSED_WORDS``)
ACTION_LINE_TOKENS = 20
#: longest argument the action grammar admits (characters)
MAX_ARG_CHARS = 80
#: characters a thought line may not hold: a line break ends it, and without brackets or colons no
#: part of it reads as an action (``NAME[...]``, ``Action: NAME: ...``) ahead of the real one
_THOUGHT_BANNED = "\n[](){}<>:"
#: characters an argument may not hold: brackets (the first ``]`` closes it), line breaks and
#: quotes other than an apostrophe, which the parser would strip; a space or an apostrophe only
#: between two other characters, so the argument is what the parser reads, unstripped
_ARG_BANNED = "[]\n\r\t\"`"
_ARG_SEPARATORS = " '"


@lru_cache(maxsize=None)
def action_grammar(actions: Sequence[str] = ACTIONS, max_tokens: int | None = None) -> str:
    """GBNF for one reply: an optional ``Thought: ...`` line, then ``Action: NAME[argument]`` for a
    NAME of ``actions``; the argument is not one of the prompt's ``PLACEHOLDERS`` (in any case).
    ``actions=("FINAL",)`` is the answer-only turn's grammar (its argument does not start with
    ``answer``). The thought has at most
    ``MAX_THOUGHT_CHARS`` characters, and with a reply budget ``max_tokens`` at most
    ``max_tokens - ACTION_LINE_TOKENS``, so the budget cannot cut a reply before its action."""
    actions = tuple(actions)
    # the same action set, checked by the same format, as the parser and the text filter use: the
    # grammar admits only the canonical ``NAME[argument]`` spelling of each, which the parser reads
    action_format(actions)
    thought_chars = MAX_THOUGHT_CHARS if max_tokens is None else \
        min(MAX_THOUGHT_CHARS, max(0, max_tokens - ACTION_LINE_TOKENS))
    # the answer-only turn's argument may not start with the placeholder word at all: barred from
    # ``FINAL[answer]``, the model writes ``answer: ...`` or ``answer_...`` instead
    arg = gbnf.any_word_but(PLACEHOLDERS, banned=_ARG_BANNED, separators=_ARG_SEPARATORS, prefix="arg",
                            rest="arg-rest", no_start=("answer",) if actions == ("FINAL",) else ())
    word_char = gbnf.char_class(set(_ARG_BANNED) | set(_ARG_SEPARATORS), negated=True)
    sep = gbnf.char_class(_ARG_SEPARATORS)
    thought = {"thought": f'{gbnf.literal("Thought: ")} {gbnf.char_class(_THOUGHT_BANNED, negated=True)}'
                          f'{{0,{thought_chars}}} {gbnf.literal(chr(10))}'} if thought_chars else {}
    return gbnf.rules({
        "root": f'{"thought? " if thought else ""}{gbnf.literal("Action: ")} action',
        **thought,
        "action": " | ".join(f'{gbnf.literal(a + "[")} arg {gbnf.literal("]")}' for a in actions),
        **arg,
        "arg-rest": f"({sep}? {word_char}){{0,{MAX_ARG_CHARS - 1}}}",
    })
