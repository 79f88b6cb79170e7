"""``hasp show RUN|DIR``: the samples of an evaluation in the terminal, one block per episode.

Why: an evaluation writes every step, audit record and PF fire, and a user who wants to know why an
answer is wrong should not have to write a script over the jsonl. A block shows the question, the
gold answers, each step's action (and the rewrite a PF made of it, with its reason), the context
PFs added, the answer and its score. ``--outcome`` keeps right, wrong or failed episodes, ``--skill``
those in which that skill fired. Every text comes from a model or a skill and is printed as text:
control characters are replaced and nothing is read as markup.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from hasp.console import safe


def plain(text: Any, limit: int = 400) -> str:
    """One line of untrusted text, terminal-safe (``hasp.console.safe``), at most ``limit`` characters."""
    return safe(text, one_line=True, limit=limit)


def _folder(target: str) -> Path:
    """The evaluation folder of a path, or of an MLflow run id (its ``out`` param)."""
    path = Path(target)
    if path.exists():
        return path
    if re.fullmatch(r"[0-9a-f]{32}", target):
        import mlflow

        from hasp.track.mlflow_run import tracking_uri

        mlflow.set_tracking_uri(tracking_uri())
        try:
            run = mlflow.get_run(target)
        except Exception as e:  # noqa: BLE001 - one line, whatever the store says
            raise ValueError(f"MLflow run {target}: {e}") from None
        out = run.data.params.get("out")
        if not out or not Path(out).exists():
            raise ValueError(f"MLflow run {target} names no output folder on this machine (param out={out!r})")
        return Path(out)
    raise ValueError(f"{target}: not an evaluation folder, a trajectories .jsonl or an MLflow run id")


def _files(folder: Path, dataset: str | None, variant: str | None) -> list[Path]:
    if folder.is_file():
        return [folder]
    def cells(pattern: str) -> list[Path]:
        return sorted(p for p in folder.glob(pattern) if not p.name.endswith(".episodes.jsonl")
                      and not p.name.startswith("."))

    files = cells("*/*.jsonl") or cells("*.jsonl")  # an evaluation folder, or one dataset's folder of it
    return [p for p in files if (dataset is None or p.parent.name == dataset)
            and (variant is None or p.stem == variant)]


def _outcome(t: Any) -> str:
    return "error" if t.terminated == "error" else "right" if t.em >= 1.0 else "wrong"


def _block(t: Any, label: str, con: Any, steps: bool) -> None:
    from rich.text import Text

    mark = {"right": "✓", "wrong": "✗", "error": "!"}[_outcome(t)]
    con.print(Text(f"{mark} {label} {plain(t.qid, 80)}  EM {t.em:.2f}  F1 {t.f1:.2f}  {t.terminated}", style="bold"))
    con.print(Text(f"  question: {plain(t.question)}"))
    con.print(Text(f"  gold:     {plain(' | '.join(t.answers))}"))
    h = t.harness
    if h is not None and h.selected_pfs:
        con.print(Text(f"  PFs live: {plain(', '.join(h.selected_pfs), 300)} ({h.pf_selection_source})"))
    for s in t.steps if steps else ():
        a = s.audit
        if s.parse_error:
            con.print(Text(f"  {s.index}. (no action: {plain(s.parse_error, 160)}) {plain(s.raw_output, 160)}"))
            continue
        if a is None:
            continue
        line = f"  {s.index}. {plain(a.a_orig.render(), 200)}"
        if a.was_modified:
            line += f"  → {plain(a.a_final.render(), 200)}"
        con.print(Text(line))
        for f in a.fired:
            state = "" if f.get("applied", True) else " (not applied)"
            con.print(Text(f"       PF {plain(f.get('skill_id', '?'), 60)} {plain(f.get('type', ''), 20)}{state}: "
                           f"{plain(f.get('reason', ''), 200)}"))
        for c in a.context:
            con.print(Text(f"       + context: {plain(c, 200)}"))
        if s.observation and a.a_final.type != "FINAL":
            con.print(Text(f"       = {plain(s.observation, 200)}"))
    for e in t.pf_errors:
        con.print(Text(f"  error: {plain(e, 300)}"))
    con.print(Text(f"  answer:   {plain(t.prediction or '(none)')}"))
    con.print()


def show_command(
    target: Annotated[str, typer.Argument(help="An evaluation folder (hasp eval --out), one trajectories .jsonl, "
                                               "or the MLflow parent run id that hasp eval printed.")],
    outcome: Annotated[str, typer.Option(help="all | right | wrong | error")] = "all",
    skill: Annotated[Optional[str], typer.Option(help="Only episodes in which this skill id fired.")] = None,
    dataset: Annotated[Optional[str], typer.Option(help="Only this dataset (a folder name of the output).")] = None,
    variant: Annotated[Optional[str], typer.Option(help="Only this variant (arm label).")] = None,
    limit: Annotated[int, typer.Option(help="Show at most N episodes (0 = all).")] = 20,
    steps: Annotated[bool, typer.Option("--steps/--no-steps", help="Show every step.")] = True,
) -> None:
    """Per-sample view of an evaluation: question, steps, PF fires with reasons, answer, score."""
    from hasp.agent.rollout import read_trajectories
    from hasp.console import console

    if outcome not in ("all", "right", "wrong", "error"):
        typer.echo(f"error: --outcome {outcome!r}: choose all, right, wrong or error", err=True)
        raise typer.Exit(2)
    try:
        files = _files(_folder(target), dataset, variant)
    except ValueError as e:
        typer.echo(f"error: {safe(e)}", err=True)
        raise typer.Exit(2) from None
    if not files:
        typer.echo(f"error: no trajectories under {target} (dataset={dataset}, variant={variant})", err=True)
        raise typer.Exit(2)
    con, shown, total = console(), 0, 0
    for f in files:
        try:
            trajs = read_trajectories(f)
        except (OSError, ValueError) as e:
            typer.echo(f"warning: {e}", err=True)
            continue
        label = f"{f.parent.name}/{f.stem}" if f.parent.name else f.stem
        for t in trajs:
            if outcome != "all" and _outcome(t) != outcome:
                continue
            if skill is not None and skill not in t.fired_skills():
                continue
            total += 1
            if limit and shown >= limit:
                continue
            _block(t, label, con, steps)
            shown += 1
    typer.echo(f"{shown} of {total} matching episodes shown" + (f" (--limit {limit})" if shown < total else ""))
