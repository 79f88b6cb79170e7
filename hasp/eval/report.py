"""The dataset × variant comparison table, as rows for the terminal (rich), CSV and Markdown.

Below each search dataset's cells an oracle row ``extractor | gold support`` gives the vocabulary
answer extractor's EM [95 % CI] and n on the questions' gold support (``hasp.eval.ceiling``), and
each PF cell shows how many of its correct answers a vocabulary rewrite wrote (k/n correct).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hasp.eval.ceiling import CEILING_KEY, VIA_REWRITE_KEY, ceiling_of, ceiling_text, oracle_label

#: (column, summary key, format) — one place so the CLI table, CSV and Markdown agree
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("n", "n", "d"), ("scored", "n_scored", "d"), ("failed", "n_failed", "d"), ("EM", "em", ".3f"),
    ("F1", "f1", ".3f"), ("EM by hops [95% CI]", "em_by_hops", "hops"),
    ("EM seen/unseen templates [95% CI]", "em_by_template", "groups"), ("judge", "judge_acc", ".3f"),
    ("judge err", "judge_errors", "d"), ("answered", "answered_rate", ".2f"), ("parse err", "parse_error_rate", ".2f"),
    ("steps", "mean_steps", ".2f"), ("correct via vocab rewrite", VIA_REWRITE_KEY, "k/n"),
    ("PF fires", "pf_fires_total", "d"), ("action share", "pf_action_share", ".2f"),
    ("context share", "pf_context_share", ".2f"), ("prompt tok", "prompt_tokens", "d"),
    ("compl tok", "completion_tokens", "d"), ("teacher tok", "teacher_tokens", "d"),
    ("wall s", "wall_s", ".1f"),
)


def _fmt(value: Any, spec: str) -> str:
    if value is None:
        return "–"
    if spec == "hops":  # {"1": {"mean", "n", "ci95"}, ...} -> "1h .250 [.00,.50] n8; 2h ..."
        return "; ".join(f"{h}h {m['mean']:.3f} [{m['ci95'][0]:.2f},{m['ci95'][1]:.2f}] n{m['n']}"
                         for h, m in value.items()) or "–"
    if spec == "groups":  # {"seen": {"mean", "n", "ci95"}, ...} -> "seen .250 [.00,.50] n8; unseen ..."
        return "; ".join(f"{g} {m['mean']:.3f} [{m['ci95'][0]:.2f},{m['ci95'][1]:.2f}] n{m['n']}"
                         for g, m in value.items()) or "–"
    if spec == "k/n":  # {"k", "n", "share"} -> "3/7"
        return f"{int(value['k'])}/{int(value['n'])}"
    if spec == "ci":  # the oracle row's EM: "0.400 [0.23, 0.59]"
        return ceiling_text(value)
    return format(int(value), "d") if spec == "d" else format(float(value), spec)


def _oracle_row(ds: str, ceiling: Mapping[str, Any]) -> list[str]:
    """The extractor's row: n, EM [95 % CI] and F1 on gold support; nothing else applies to it."""
    shown = {"n": _fmt(ceiling.get("n"), "d"), "em": _fmt(ceiling, "ci"),
             "f1": _fmt(ceiling.get("f1"), ".3f") if ceiling.get("n") else "–",
             "em_by_template": "; ".join(f"{g} {ceiling_text(c)} n{c['n']}"
                                         for g, c in (ceiling.get("by_template") or {}).items()) or "–"}
    return [ds, oracle_label(ceiling), *(shown.get(key, "–") for _, key, _ in COLUMNS)]


def table_rows(metrics: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> list[list[str]]:
    """``[dataset, variant, *formatted columns]`` per cell, then the dataset's oracle row when its
    cells carry an extractor ceiling; a metric a cell lacks shows as "–"."""
    rows = []
    for ds, by_variant in metrics.items():
        for v, m in by_variant.items():
            rows.append([ds, v, *(_fmt(m.get(key), spec) for _, key, spec in COLUMNS)])
        ceiling = ceiling_of(by_variant)
        if ceiling is not None:
            rows.append(_oracle_row(ds, ceiling))
    return rows


def header() -> list[str]:
    return ["dataset", "variant", *(c for c, _, _ in COLUMNS)]


def write_csv(metrics: Mapping[str, Mapping[str, Mapping[str, Any]]], path: Path) -> Path:
    """Raw (unformatted) values, for pandas / spreadsheets."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["dataset", "variant", *(key for _, key, _ in COLUMNS), CEILING_KEY])
        for ds, by_variant in metrics.items():
            for v, m in by_variant.items():
                w.writerow([ds, v, *_raw(m), ""])
            ceiling = ceiling_of(by_variant)
            if ceiling is not None:  # the oracle row keeps its whole ceiling (interval, no-support count)
                oracle = {"n": ceiling.get("n"), "em": ceiling.get("em"), "f1": ceiling.get("f1")}
                w.writerow([ds, oracle_label(ceiling), *_raw(oracle), json.dumps(ceiling)])
    return path


def _raw(m: Mapping[str, Any]) -> list[Any]:
    """A summary's CSV cells: numbers as they are, dicts as JSON, missing as empty."""
    return ["" if m.get(key) is None else json.dumps(m[key]) if isinstance(m.get(key), dict) else m.get(key)
            for _, key, _ in COLUMNS]


def to_markdown(metrics: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> str:
    head = header()
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in table_rows(metrics)]
    return "\n".join(lines) + "\n"
