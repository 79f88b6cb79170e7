"""The small JSON files ``dvc plots show`` draws (the ``plots:`` section of ``dvc.yaml``).

DVC plots a list of flat rows and checks its fields on the first row, so each file is one list
whose rows all carry the same keys (None where a number is unknown). They are written from the
files the run already left (training summary, epoch summaries, evaluation metrics), so the DVC
``track`` stage and the Prefect flows write the same ones.

- ``train_steps.json``  one row per logged optimizer step: loss, learning rate, grad norm, ...
- ``epochs.json``       one row per epoch: train / val EM, proposals through each gate, admitted, library size
- ``test.json``         one row per evaluated arm: test EM and F1 with n, and the epoch it belongs to
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from hasp import artifacts as art
from hasp.atomic import write_json
from hasp.provenance import without_provenance
from hasp.track.epoch_report import epoch_metrics

#: training curves kept per step (TRL's log keys); a key no row has is left out
TRAIN_KEYS = ("loss", "learning_rate", "grad_norm", "mean_token_accuracy", "entropy")
#: per-epoch numbers, in the order the table shows them
EPOCH_KEYS = ("train_em", "val_em_before", "val_em", "proposed", "exec_pass", "review_pass", "val_pass",
              "admitted", "library_size")


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def train_rows(train_metrics: Path) -> list[dict[str, Any]]:
    """Per-step rows of a training summary (``train_metrics.json``); [] when training was skipped."""
    hist = [h for h in ((_load(train_metrics) or {}).get("history") or []) if isinstance(h, dict) and "loss" in h]
    keys = [k for k in TRAIN_KEYS if any(k in h for h in hist)]
    return [{"step": int(h.get("step", i + 1)), **{k: h.get(k) for k in keys}} for i, h in enumerate(hist)]


def epoch_numbers(out_root: Path) -> list[int]:
    return sorted(int(m.group(1)) for d in out_root.glob("epoch_*")
                  if d.is_dir() and (m := re.fullmatch(r"epoch_(\d+)", d.name)))


def epoch_rows(out_root: Path) -> list[dict[str, Any]]:
    rows = []
    for i in epoch_numbers(out_root):
        m: dict[str, Any] = dict(epoch_metrics(out_root, i))
        base = _load(out_root / f"epoch_{i}" / art.summary_file("val_baseline")) or {}
        m["val_em_before"] = base.get("em")
        rows.append({"epoch": i, **{k: round(v, 4) if isinstance(v := m.get(k), float) else v for k in EPOCH_KEYS}})
    return rows


def test_rows(eval_metrics: Path, epoch: int) -> list[dict[str, Any]]:
    """``{dataset: {label: summary}}`` as rows (arm = label, or dataset/label over several datasets)."""
    cells = without_provenance(_load(eval_metrics) or {})
    many = len(cells) > 1
    return [{"epoch": epoch, "arm": f"{ds}/{label}" if many else label, "em": s.get("em"), "f1": s.get("f1"),
             "n": s.get("n")}
            for ds, by_label in cells.items() for label, s in by_label.items() if isinstance(s, dict) and "em" in s]


def write_plot_data(out_root: Path, *, eval_metrics: Path | None = None, eval_epoch: int = 0,
                    plots_dir: Path | None = None) -> dict[str, int]:
    """Write the three files under ``plots_dir`` (default ``<out_root>/plots``); returns rows per file."""
    plots_dir = plots_dir or out_root / "plots"
    files = {"train_steps.json": train_rows(out_root / "train" / "train_metrics.json"),
             "epochs.json": epoch_rows(out_root),
             "test.json": test_rows(eval_metrics, eval_epoch) if eval_metrics is not None else []}
    for name, rows in files.items():
        write_json(rows, plots_dir / name)
    return {name: len(rows) for name, rows in files.items()}
