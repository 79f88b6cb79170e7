"""The rich Console every command prints its tables through.

Why one: rich sizes a table to the console, and a console that is not a terminal (a pipe, a log
file, a test) defaults to 80 columns, so columns were cut to "answer…". A terminal keeps its own
width; anything else gets a width no table reaches, so every column prints whole.
"""

from __future__ import annotations

from typing import Any

#: the width of non-terminal output: wider than any table the commands print
PIPE_WIDTH = 1000


def console() -> Any:
    """A ``rich.console.Console`` on stdout: the terminal's width, or ``PIPE_WIDTH`` when piped."""
    from rich.console import Console

    term = Console(soft_wrap=False)
    return term if term.is_terminal else Console(width=PIPE_WIDTH, soft_wrap=False)
