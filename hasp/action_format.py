"""The one spelling of the agent's actions: the names, their aliases and the patterns that find them.

Why a module of its own, in the core layer: the action parser (``hasp.agent.parser``) and the text
filter that every PF text and every observation passes (``hasp.pf.intervention.shown_text``) must
agree on what reads as an action. Both take their patterns from ``action_format``, so a text the
filter lets through holds nothing the parser would take for an action of the same set. Names are
looked up NFKC-normalised and case-folded (``action_key``): a Unicode look-alike is that action or
no action, never a third type.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

ACTIONS = ("SEARCH", "READ", "FINAL")
_ALIASES = {"ANSWER": "FINAL", "FINISH": "FINAL", "FINAL ANSWER": "FINAL", "FINAL_ANSWER": "FINAL",
            "LOOKUP": "SEARCH", "QUERY": "SEARCH", "OPEN": "READ"}
#: what an action name may be (a task's own tools included): upper-case word characters
ACTION_NAME = re.compile(r"[A-Z][A-Z0-9_]{0,31}")
#: the metavariables the prompts write inside brackets (``FINAL[answer]``, ``READ[doc id]``): a text
#: that repeats one has copied the instruction, it has not acted
PLACEHOLDERS = frozenset({"answer", "query", "doc id", "doc_id", "...", "…"})
_CLOSERS = {"[": "]", "(": ")", "{": "}", "<": ">"}


def action_key(name: str) -> str:
    """The spelling key of an action name: NFKC-normalised, case-folded, ``_`` and spaces as one space."""
    return re.sub(r"[ _]+", " ", unicodedata.normalize("NFKC", name).casefold()).strip()


@dataclass(frozen=True)
class ActionFormat:
    """The patterns of one action set: the search agent's (``ACTIONS``, with its aliases) or a
    task's own tools plus FINAL (with the answer aliases only)."""

    names: dict[str, str]  # spelling key -> action type
    open: re.Pattern[str]  # NAME followed by an opening bracket, anywhere
    colon: re.Pattern[str]  # NAME: argument, at a line start or after "Action:"
    thought: re.Pattern[str]
    no_action: str


@lru_cache(maxsize=64)
def action_format(actions: tuple[str, ...] = ACTIONS) -> ActionFormat:
    """The patterns for ``actions`` (each an ``ACTION_NAME``)."""
    bad = [a for a in actions if not ACTION_NAME.fullmatch(a)]
    if bad or not actions:
        raise ValueError(f"action names must be upper-case words ({ACTION_NAME.pattern}); got {list(actions) or 'none'}")
    names = {action_key(a): a for a in actions} | {action_key(k): v for k, v in _ALIASES.items() if v in actions}
    spelled = sorted({re.escape(k).replace(r"\ ", "[ _]") for k in names}, key=len, reverse=True)
    alt = "(" + "|".join(spelled) + ")"
    heads = "|".join(re.escape(a) for a in actions)
    listed = ", ".join(f"{a}[...]" for a in actions[:-1]) + (" or " if len(actions) > 1 else "") + f"{actions[-1]}[...]"
    return ActionFormat(
        names=names,
        open=re.compile(alt + r"\s*([\[\(\{<])", re.I),
        colon=re.compile(r"(?:^|\n|Action\s*:\s*)" + alt + r"\s*[:=\-]\s*(.+?)\s*(?:\n|$)", re.I),
        thought=re.compile(r"Thought\s*:\s*(.*?)(?=\n\s*(?:Action|" + heads + r")\b|\Z)", re.I | re.S),
        no_action=f"no {listed} action found")


def names_an_action(line: str, fmt: ActionFormat) -> bool:
    """Whether the parser of ``fmt`` would find an action in ``line``: a name with a bracketed or
    ``NAME: argument`` argument that is not one of the prompts' ``PLACEHOLDERS`` (an instruction such
    as ``FINAL[...]`` names the format, it is not an action)."""
    for m in fmt.open.finditer(line):
        rest = line[m.end():]
        close = rest.find(_CLOSERS[m.group(2)])
        arg = (rest[:close] if close >= 0 else rest).strip().strip("\"'` ").lower()
        if arg and arg not in PLACEHOLDERS:
            return True
    m = fmt.colon.search("\n" + line)
    return bool(m and m.group(2).strip().strip("\"'` ").lower() not in PLACEHOLDERS)
