"""The ``hasp evolve <phase>`` stages under ``evolve.budget``, one process per stage as ``dvc repro`` runs them.

The flow keeps one ledger for an epoch; here each stage is its own process, so the ledger is rebuilt from
the summaries the earlier stages wrote (``hasp.evolve.budget.ledger_of``): the same limits stop the same
epoch, whichever orchestration runs it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from hasp import artifacts as art


def save_summary(epoch_dir: Path, phase: str, summary: dict[str, Any]) -> None:
    from hasp.atomic import write_json

    write_json(summary, epoch_dir / art.summary_file(phase))
    typer.echo(json.dumps({phase: summary}, default=str)[:2000])


def budgeted(epoch_dir: Path, phase: str, p: Any, run: Any) -> None:
    """Run one stage: a stage that starts with the budget reached prints the stop line and exits 1 (so
    ``dvc repro`` stops there); ``run(meter, ledger)`` gets the meter its clients report into and the
    ledger so far (Phase C guards its proposals with it); its summary carries its ``spend`` and
    ``summary_budget.json`` the epoch's so far."""
    from hasp.atomic import write_json
    from hasp.evolve.budget import PHASE_LABELS, Meter, ledger_of, metered_phase, stop_line

    ledger = ledger_of(epoch_dir, p.evolve.budget, phase)
    hit = ledger.reached()
    if hit is not None:
        last = list(ledger.phases)[-1]
        line = stop_line(hit, f"after phase {PHASE_LABELS.get(last, last)}")
        write_json({**ledger.to_dict(), "stopped": line, "stopped_after": last}, epoch_dir / art.summary_file(art.BUDGET))
        typer.echo(f"error: {line}", err=True)
        raise typer.Exit(1)
    meter = Meter()
    s = metered_phase(meter, lambda: run(meter, ledger), p.evolve.budget)
    ledger.add(phase, s)
    write_json({**ledger.to_dict(), "stopped": s.get("budget_stop")}, epoch_dir / art.summary_file(art.BUDGET))
    save_summary(epoch_dir, phase, s)
