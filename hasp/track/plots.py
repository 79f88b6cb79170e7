"""Figures for MLflow artifacts, drawn with matplotlib's object API on the Agg canvas (no pyplot,
no global backend switch, so importing this never changes a user's interactive backend)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any


def pf_trigger_plot(metrics: Mapping[str, Mapping[str, Mapping[str, Any]]], path: Path) -> Path:
    """Bar chart of applied PF fires per skill, one bar per variant, one panel per dataset.

    ``metrics`` is ``{dataset: {variant: summary}}`` with ``summary["pf_fires"] = {skill: n}``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    datasets = list(metrics)
    fig = Figure(figsize=(max(6.0, 1.2 * _max_skills(metrics) + 3), 3.2 * max(1, len(datasets))),
                 layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(max(1, len(datasets)), 1, squeeze=False)[:, 0]
    for ax, ds in zip(axes, datasets or [""]):
        by_variant = metrics.get(ds, {})
        skills = sorted({s for m in by_variant.values() for s in (m.get("pf_fires") or {})})
        variants = list(by_variant)
        if not skills:
            ax.text(0.5, 0.5, "no PF fired", ha="center", va="center", transform=ax.transAxes)
            ax.set_xticks([])
        width = 0.8 / max(1, len(variants))
        for j, v in enumerate(variants):
            fires = by_variant[v].get("pf_fires") or {}
            xs = [i + (j - (len(variants) - 1) / 2) * width for i in range(len(skills))]
            ax.bar(xs, [fires.get(s, 0) for s in skills], width=width, label=v)
        if skills:
            ax.set_xticks(range(len(skills)), skills, rotation=30, ha="right", fontsize=8)
            ax.legend(fontsize=8)
        ax.set_title(f"PF fires per skill — {ds}", fontsize=10)
        ax.set_ylabel("fires")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def _max_skills(metrics: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> int:
    return max((len({s for m in bv.values() for s in (m.get("pf_fires") or {})}) for bv in metrics.values()),
               default=0)
