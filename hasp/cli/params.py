"""The CLI's one way to read a params file: a bad file is one error line and exit code 2."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import typer


def params_or_exit(path: Path | str, overrides: Mapping[str, Any] | None = None) -> Any:
    """``load_params`` for a command: a ``ParamsError`` (missing file, not a mapping, unknown key,
    bad value) is printed as one line naming the file and ends the command with exit code 2."""
    from hasp.config import ParamsError, load_params

    try:
        return load_params(path, dict(overrides) if overrides else None)
    except ParamsError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
