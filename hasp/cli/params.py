"""The CLI's one way to read a params file: a bad file is one error line and exit code 2."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from hasp.console import safe

ParamsOpt = Annotated[Optional[Path], typer.Option(
    "--params", help="Params file to read (default: ./params.yaml when there is one, else the built-in defaults).")]
_told: set[str] = set()


def params_path(path: Path | str | None) -> Path | None:
    """``hasp.config.params_file`` for a command: running on the built-in defaults (no ``--params``, no
    ``./params.yaml``) is said once, on stderr, so piped JSON stays clean."""
    from hasp.config import defaults_notice, params_file

    found = params_file(path)
    if found is None and str(Path.cwd()) not in _told:
        _told.add(str(Path.cwd()))
        typer.echo(defaults_notice(), err=True)
    return found


def params_or_exit(path: Path | str | None, overrides: Mapping[str, Any] | None = None) -> Any:
    """``load_params`` for a command: a ``ParamsError`` (missing file, not a mapping, unknown key,
    bad value) is printed as one line naming the file and ends the command with exit code 2.
    ``path`` None reads ``./params.yaml``, or the built-in defaults where there is none."""
    from hasp.config import ParamsError, load_params

    try:
        return load_params(params_path(path), dict(overrides) if overrides else None)
    except ParamsError as e:
        typer.echo(f"error: {safe(e)}", err=True)
        raise typer.Exit(2) from None
