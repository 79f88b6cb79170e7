"""The rich Console every command prints its tables through.

Why one: rich sizes a table to the console, and a console that is not a terminal (a pipe, a log
file, a test) defaults to 80 columns, so columns were cut to "answer…". A terminal keeps its own
width; anything else gets a width no table reaches, so every column prints whole.
"""

from __future__ import annotations

import re
from typing import Any

#: the width of non-terminal output: wider than any table the commands print
PIPE_WIDTH = 1000


def console() -> Any:
    """A ``rich.console.Console`` on stdout: the terminal's width, or ``PIPE_WIDTH`` when piped."""
    from rich.console import Console

    term = Console(soft_wrap=False)
    return term if term.is_terminal else Console(width=PIPE_WIDTH, soft_wrap=False)


#: characters a terminal acts on instead of showing: C0/C1 controls (ESC starts erase-line, cursor
#: moves, window titles, conceal), DEL, and the bidirectional and zero-width marks that reorder or
#: hide text; tab and line feed stay (multi-line blocks keep their shape unless ``one_line``)
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")


def _shown(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def safe(text: object, *, one_line: bool = False, limit: int | None = None) -> str:
    """``text`` from a skill folder, a model or the sandbox as a terminal shows it verbatim: every
    character that would act on the terminal written as its escape (``\\x1b``, ``\\u202e``). It is
    still *text*: print it with ``markup=False`` or inside ``rich.text.Text`` (or ``rich.markup.escape``
    it for a table cell), so brackets are not read as style. ``one_line`` shows line breaks as ``⏎``;
    ``limit`` cuts to that many characters with ``…``."""
    s = str(text)
    if one_line:
        s = s.replace("\r\n", "\n").replace("\n", " ⏎ ").replace("\t", " ")
    s = _UNSAFE.sub(_shown, s)
    return s if limit is None or len(s) <= limit else s[: max(0, limit - 1)] + "…"
