"""``hasp skills publish | log | rollback``: released versions of a served library (``hasp.evolve.release``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from hasp.console import console, safe

LibArg = Annotated[Path, typer.Argument(help="The served library folder (what your agent loads with --library).")]


def _fail(msg: str) -> None:
    typer.echo(f"error: {safe(msg, one_line=True)}", err=True)
    raise typer.Exit(2)


def register(app: typer.Typer) -> None:
    app.command("publish")(publish)
    app.command("log")(log)
    app.command("rollback")(rollback)


def publish(library: LibArg,
            source: Annotated[Path, typer.Option("--from", help="The library to release, e.g. an epoch's "
                                                 "outputs/epoch_<i>/library.")],
            evidence: Annotated[Optional[Path], typer.Option(
                "--evidence", help="A JSON object recorded in the changelog entry (what justified it).")] = None,
            ) -> None:
    """Release --from as the next version of LIBRARY (its current content becomes v1 on the first release)."""
    from hasp.evolve.release import ReleaseError, lock
    from hasp.evolve.release import publish as do_publish

    ev = {}
    if evidence is not None:
        try:
            ev = json.loads(evidence.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            _fail(f"{evidence}: {e}")
        if not isinstance(ev, dict):
            _fail(f"{evidence}: must hold a JSON object")
    try:
        with lock(library, "hasp skills publish"):
            e = do_publish(library, source, {"source": str(source), **ev})
    except ReleaseError as err:
        _fail(str(err))
    typer.echo(f"{library}: v{e.version} live (from v{e.previous}); added {e.added or '-'}, changed "
               f"{e.changed or '-'}, removed {e.removed or '-'}")


def log(library: LibArg,
        as_json: Annotated[bool, typer.Option("--json", help="Print the entries as JSON lines.")] = False) -> None:
    """The release changelog of LIBRARY, oldest first, and the live version."""
    from rich.table import Table

    from hasp.evolve.release import ReleaseError, changelog, live_version

    try:
        entries, live = changelog(library), live_version(library)
    except ReleaseError as err:
        _fail(str(err))
    if as_json:
        from dataclasses import asdict

        for e in entries:
            typer.echo(json.dumps(asdict(e), sort_keys=True))
        return
    t = Table(title=f"{library}: releases (live: {f'v{live}' if live else 'never released'})")
    for col in ("version", "action", "created", "from", "added", "changed", "removed", "evidence"):
        t.add_column(col)
    for e in entries:
        t.add_row(f"v{e.version}", e.action, e.created, f"v{e.previous}" if e.previous else "-",
                  _ids(e.added), _ids(e.changed), _ids(e.removed),
                  safe(json.dumps(e.evidence, sort_keys=True)[:300], one_line=True))
    console().print(t)


def _ids(ids: list[str], shown: int = 4) -> str:
    """A table cell for skill ids: the first few and how many more (`--json` has them all)."""
    more = f" +{len(ids) - shown}" if len(ids) > shown else ""
    return safe(", ".join(ids[:shown]), one_line=True) + more if ids else "-"


def rollback(library: LibArg,
             to: Annotated[Optional[int], typer.Option("--to", help="Release to restore (default: the one "
                                                       "the live version was made from).")] = None) -> None:
    """Make an earlier release of LIBRARY live again (recorded in the changelog)."""
    from hasp.evolve.release import ReleaseError, lock
    from hasp.evolve.release import rollback as do_rollback

    try:
        with lock(library, "hasp skills rollback"):
            e = do_rollback(library, to)
    except ReleaseError as err:
        _fail(str(err))
    typer.echo(f"{library}: v{e.version} live again (was v{e.previous})")
