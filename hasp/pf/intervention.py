"""The value a Program Function returns: what to do with the proposed action, and
``shown_text``, the one filter every PF text passes before a model can read it."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any

from hasp.action_format import ACTIONS, ActionFormat, action_format, names_an_action

#: longest ``reason`` a PF's fire or vote keeps (the declared-PF schema's cap as well)
MAX_REASON_CHARS = 200
#: longest message of a PF's exception kept in an error record
MAX_ERROR_CHARS = 2000

# anything outside printable ASCII, tab and newline: looked at one character at a time
_ODD = re.compile(r"[^\x20-\x7e\n\t]")
_ASCII_CONTROLS = bytes([*range(9), *range(11, 32), 127])  # all but tab and newline; a C-speed first look
_LINE_BREAKS = frozenset("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")
# a line that reads like a turn of the agent's own format: a label the prompts use, or an
# action written the way the agent writes one (``FINAL[...]``), after any quoting or markup
_DECOR = r"[\s>*#|`_~.-]*"
_TURN_LINE = re.compile(rf"{_DECOR}(?:(?:next\s+thought\s+and\s+action|thought|action|observation|question)\s*:"
                        rf"|(?:search|read|final)\s*\[)", re.I)
#: a turn-like line anywhere in a text (``_TURN_LINE`` at the start of any line)
_TURN_ANY = re.compile(r"(?:^|\n)" + _TURN_LINE.pattern, re.I)
_LABEL_COLON = re.compile(r"^(\W*\w+(?:\s+\w+)*?)\s*:")


def _odd_char(m: re.Match) -> str:
    ch = m.group()
    if ch in _LINE_BREAKS:
        return "\n"
    if ch == "\t":
        return "\t"
    return "" if unicodedata.category(ch)[0] == "C" else ch  # control, format (bidi), surrogate, private, unassigned


_BRACKETS = str.maketrans({"[": "\u2039", "(": "\u2039", "{": "\u2039", "<": "\u2039",
                           "]": "\u203a", ")": "\u203a", "}": "\u203a", ">": "\u203a"})
_ACTION_LABEL = re.compile(r"Action\s*:", re.I)


def _neutral(line: str, fmt: ActionFormat) -> str:
    """A turn-like line quoted, and any action the parser of ``fmt`` would read in it defused:
    its brackets shown as ``‹ ›`` and ``Action:`` as ``Action -``, so the line no longer parses."""
    quoted = bool(_TURN_LINE.match(line))
    if quoted:
        line = _LABEL_COLON.sub(r"\1 -", line.strip(), count=1)
    if names_an_action(line, fmt):
        line = _ACTION_LABEL.sub("Action -", line).translate(_BRACKETS)
        quoted = quoted or bool(fmt.colon.search("\n" + line))  # NAME: argument at the start of the line
    return "(quoted) " + line if quoted else line


def shown_text(text: object, cap: int, *, one_line: bool = False, actions: tuple[str, ...] = ACTIONS) -> str:
    """``text`` as a PF may put it before a model: at most ``cap`` characters; control, bidi and
    other invisible format characters removed (ESC, BEL, RLO, zero-width, tag characters); line
    breaks of every kind as ``\\n`` (a space when ``one_line``: action arguments, reasons); a
    line that imitates the agent's turn format (``Thought:``, ``Observation:``, ``Next Thought and
    Action:``) quoted, and any action of ``actions`` the agent's parser would read in a line
    (``FINAL[...]``, ``Answer(...)``, ``Action: lookup: ...``; ``hasp.action_format``) defused, so no
    line of the result parses as one. Plain printable text comes back unchanged."""
    if type(text) is not str:
        text = "" if text is None else str(text)
    text = text[: cap * 2]  # enough for the removed characters; the cap is applied at the end
    if not text.isascii() or len(text.encode().translate(None, _ASCII_CONTROLS)) != len(text):
        text = _ODD.sub(_odd_char, text.replace("\r\n", "\n"))
    if ":" in text or "[" in text or "(" in text or "{" in text or "<" in text or "=" in text or "-" in text:
        fmt = action_format(actions)
        # one scan of the whole text first (most texts hold no action name at all); per line only then
        if _TURN_ANY.search(text) or fmt.open.search(text) or fmt.colon.search("\n" + text):
            lines = text.split("\n")
            if any(_TURN_LINE.match(line) or names_an_action(line, fmt) for line in lines):
                text = "\n".join(_neutral(x, fmt) for x in lines)
    if one_line and ("\n" in text or "\t" in text):
        text = text.replace("\n", " ").replace("\t", " ")
    return text[:cap]


def error_text(exc: BaseException) -> str:
    """A PF's exception message for an error record (records feed the failure summaries a model reads)."""
    try:
        return shown_text(exc, MAX_ERROR_CHARS, one_line=True)
    except Exception:  # noqa: BLE001 - a hostile __str__
        return "<unprintable>"


class InterventionType(str, Enum):
    """How a PF changes the step (paper App. B.1)."""

    MODIFY_ACTION = "MODIFY_ACTION"
    INJECT_CONTEXT = "INJECT_CONTEXT"
    NOOP = "NOOP"


@dataclass(slots=True, init=False)
class Intervention:
    """A PF's decision. Only these keyword arguments are part of the contract,
    because generated PFs are written against exactly this interface; ``source`` is set by
    declared PFs only (``hasp.pf.declared``): the vocabulary source that produced a rewrite's
    argument, so a record can tell an answer the extractor wrote from one the policy wrote."""

    type: InterventionType
    new_action_type: str | None
    new_action_arg: str | None
    context_text: str
    reason: str
    skill_id: str
    source: str

    # written out rather than generated + __post_init__: one Python frame per fire, which is
    # most of a PF's cost on the step it fires (bench/harness_overhead.py)
    def __init__(self, type: InterventionType | str = InterventionType.NOOP, new_action_type: str | None = None,
                 new_action_arg: str | None = None, context_text: str = "", reason: str = "",
                 skill_id: str = "", source: str = "") -> None:
        if type.__class__ is not InterventionType:  # a plain string from generated code or a dict
            type = InterventionType(type)
        if type is InterventionType.MODIFY_ACTION and not new_action_type:
            raise ValueError("MODIFY_ACTION needs new_action_type")
        self.type = type
        self.new_action_type = new_action_type
        self.new_action_arg = new_action_arg
        self.context_text = context_text
        self.reason = reason
        self.skill_id = skill_id
        self.source = source

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["type"] = self.type.value
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Intervention":
        keys = {"type", "new_action_type", "new_action_arg", "context_text", "reason", "skill_id", "source"}
        return cls(**{k: v for k, v in d.items() if k in keys})
