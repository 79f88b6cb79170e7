"""The results file's main table: every agent on every benchmark tier, with n, 95 % intervals and the
extractor's ceiling beside each.

Why: a gain measured on the generator's own templates may be the fit of one answer extractor to those
templates. One table puts side by side the generated benchmark v1 (one-hop), benchmark v2 on templates
training used and on held-out ones, and the real samples (HotpotQA, 2Wiki, MuSiQue, BM25 over their own
paragraphs); for each column the row "extractor | gold support" is what the vocabulary extractor answers
when handed the gold support, so a score near it says how much of it the extractor could have written.

Each ``--eval LABEL=DIR`` is a ``hasp eval`` output folder (its ``metrics.json``); its variants become
rows ``LABEL/variant``. A dataset column is a dataset name of those files, given as ``--column
TITLE=DATASET`` (``DATASET:seen`` / ``DATASET:unseen`` for one side of a v2 dataset).

    python bench/main_table.py --eval untrained=OUT_A --eval trained=OUT_B \\
        --column "v1 one-hop=generated-v1" --column "v2 seen=generated-v2:seen" ... --ran "..."
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hasp.domains.search.generator import load_template_seen  # noqa: E402
from hasp.eval.ceiling import CEILING_KEY, VIA_REWRITE_KEY, ceiling_of, ceiling_text  # noqa: E402
from hasp.eval.paired import cell_file, em_by_qid, paired_gain  # noqa: E402
from hasp.stats import wilson  # noqa: E402
from results import Report  # noqa: E402 - bench/ is the script directory

REPORT = Report("Main table: agents across benchmark tiers")
GROUPS = ("seen", "unseen")


def pair(spec: str) -> tuple[str, str]:
    label, _, value = spec.partition("=")
    if not value:
        raise argparse.ArgumentTypeError(f"{spec}: expected LABEL=VALUE")
    return label, value


def cell_text(summary: dict[str, Any], group: str | None) -> str:
    """``EM [95 % CI] n`` of a cell (one template side of it with ``group``), F1 on the whole cell."""
    if group is None:
        n = int(summary.get("n_scored", summary.get("n", 0)) or 0)
        k = round(float(summary.get("em") or 0.0) * n)
        r = wilson(k, n)
        via = summary.get(VIA_REWRITE_KEY)
        extra = f", {via['k']}/{via['n']} via rewrite" if isinstance(via, dict) and via.get("n") else ""
        return f"{r.p:.3f} [{r.lo:.2f}, {r.hi:.2f}] n={n}, F1 {float(summary.get('f1') or 0):.3f}{extra}"
    g = (summary.get("em_by_template") or {}).get(group)
    if not g:
        return "-"
    n = int(g["n"])
    r = wilson(round(float(g["mean"]) * n), n)
    return f"{r.p:.3f} [{r.lo:.2f}, {r.hi:.2f}] n={n}"


def gain_cell(folders: dict[str, list[Path]], after: str, before: str, ds: str, group: str | None,
              seen: dict[str, bool] | None) -> str:
    """Paired EM difference ``after - before`` (each ``LABEL/variant``) on the questions of ``ds`` both
    scored, on one template side with ``group``; ``-`` when a side is missing."""
    sides = []
    for spec in (after, before):
        label, _, variant = spec.partition("/")
        found = [cell_file(d / ds, variant) for d in folders.get(label, [])]
        ems = next((em_by_qid(f) for f in found if f.is_file()), {})
        sides.append(ems)
    if not sides[0] or not sides[1] or (group is not None and not seen):
        return "-"
    g = paired_gain(sides[1], sides[0], template_of=seen)
    if group is not None:
        g = g["by_template"].get(group)
        if not g:
            return "-"
    return f"{g['mean']:+.3f} [{g['ci95'][0]:+.2f}, {g['ci95'][1]:+.2f}] n={g['n']}"


def ceiling_cell(by_variant: dict[str, Any], group: str | None) -> str:
    c = ceiling_of(by_variant)
    if c is None:
        return "-"
    if group is not None:
        c = (c.get("by_template") or {}).get(group) or {}
    return f"{ceiling_text(c)} n={c.get('n', 0)}" if c.get("n") else "-"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--eval", type=pair, action="append", required=True,
                    help="LABEL=hasp eval --out folder; a label given twice merges its folders' cells")
    ap.add_argument("--column", type=pair, action="append", required=True,
                    help="TITLE=DATASET or TITLE=DATASET:seen|unseen, in column order")
    ap.add_argument("--gain", type=pair, action="append", default=[],
                    help="AFTER=BEFORE, each LABEL/variant: a row of paired EM differences, question by question")
    ap.add_argument("--split", type=pair, action="append", default=[],
                    help="DATASET=split file (benchmark v2's test.jsonl): its questions' seen flags for the "
                         "seen/unseen columns of the gain rows")
    ap.add_argument("--ran", action="append", default=[], help="how the evaluations were made (printed)")
    ap.add_argument("--section", default=None, help="the results section to write (default: the main table's)")
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args(argv)
    if a.section:
        REPORT.section = a.section
    metrics: dict[str, dict[str, Any]] = {}
    folders: dict[str, list[Path]] = {}
    for label, d in a.eval:  # one label given twice: its folders' cells together (a cell run on its own later)
        folders.setdefault(label, []).append(Path(d))
        for ds, cells in json.loads((Path(d) / "metrics.json").read_text(encoding="utf-8")).items():
            if not isinstance(cells, dict):
                continue
            have = metrics.setdefault(label, {}).setdefault(ds, {})
            have.update({v: c for v, c in cells.items() if v not in have or (isinstance(c, dict) and "em" in c)})
    columns = []
    for title, spec in a.column:
        ds, _, group = spec.partition(":")
        if group and group not in GROUPS:
            ap.error(f"--column {title}={spec}: the side is seen or unseen")
        columns.append((title, ds, group or None))
    for r in a.ran:
        REPORT.line(f"- ran: {r}")
    REPORT.line("")
    REPORT.line("| agent | " + " | ".join(t for t, _, _ in columns) + " |")
    REPORT.line("|---" * (len(columns) + 1) + "|")
    variants = list(dict.fromkeys((label, v) for label, m in metrics.items() for ds in m.values()
                                  if isinstance(ds, dict) for v in ds if isinstance(ds[v], dict) and "em" in ds[v]))
    for label, v in variants:
        cells = []
        for _, ds, group in columns:
            s = (metrics[label].get(ds) or {}).get(v)
            cells.append(cell_text(s, group) if isinstance(s, dict) else "-")
        REPORT.line(f"| {label}/{v} | " + " | ".join(cells) + " |")
    seen_of = {ds: load_template_seen(f) for ds, f in a.split}
    for after, before in a.gain:
        cells = [gain_cell(folders, after, before, ds, group, seen_of.get(ds)) for _, ds, group in columns]
        REPORT.line(f"| gain {after} − {before} (paired) | " + " | ".join(cells) + " |")
    oracle = []
    for _, ds, group in columns:
        by = next((m[ds] for m in metrics.values() if isinstance(m.get(ds), dict) and ceiling_of(m[ds])), None)
        oracle.append(ceiling_cell(by, group) if by else "-")
    REPORT.line("| extractor on gold support (ceiling) | " + " | ".join(oracle) + " |")
    REPORT.line("")
    REPORT.line(f"Cells: EM with its Wilson 95 % interval and n (failed episodes left out), F1, and for PF agents how "
                f"many correct answers a vocabulary rewrite wrote. The last row is `{CEILING_KEY}`: the vocabulary "
                "extractor given each question's gold support documents. A gain row: EM after minus before on the "
                "questions both scored, with a paired bootstrap 95 % interval.")
    if not a.no_write:
        REPORT.write()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
