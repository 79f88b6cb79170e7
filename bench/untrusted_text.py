"""What the untrusted-text rules change on real data: the environment-text filter and the scoring rule.

Why: the agent now sees the environment's own text (questions, search results, pages) through the
same filter as PF texts, and an episode whose own run raised is scored as a wrong answer instead of
being left out. Neither may silently move a reported number, so this script counts, on the data
the results were measured on:

* observation hygiene: how many corpus documents and questions of benchmark v2 (the grid's data
  params: ``bench/grid_v2/params-s42.yaml``) and of the real-data samples the filter changes. A search
  observation is made of these texts only (titles, snippets, pages), so with none changed every
  prompt, and so every greedy episode and its EM, is the one measured before the filter.
* the counting rule: how many archived grid episodes (``bench/grid_runs``) ended
  ``terminated="error"``, how many of those the new rule would score (their error is not the endpoint's,
  the sandbox's, the machine's or the task's), and the EM of every cell that has one, before and after.

    python bench/untrusted_text.py [--grid-runs bench/grid_runs] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hasp.agent.react import environment_text  # noqa: E402
from hasp.config import load_params  # noqa: E402
from results import Report  # noqa: E402 - bench/ is the script directory

REPORT = Report("Untrusted text: observation hygiene and the scoring of crashed episodes")
SHARED = ROOT.parent / "shared" / "data"
REAL = {"HotpotQA": f"hotpotqa:{SHARED / 'hotpotqa' / 'hotpot_dev_distractor_sample_a.jsonl'}",
        "2Wiki": f"2wiki:{SHARED / '2wiki' / '2wiki_dev_sample.jsonl'}",
        "MuSiQue": f"musique:{SHARED / 'musique' / 'musique_ans_dev_sample.jsonl'}"}
#: error types of an archived record that stay infrastructure under the new rule (``hasp.episode.spec.infrastructure``)
INFRA = ("LLM", "Sandbox", "OSError", "TimeoutError", "ConnectionError", "MemoryError", "TaskError", "API",
         "PermissionError", "FileNotFoundError", "BrokenPipeError")


def _changed(texts: list[str]) -> tuple[int, list[str]]:
    changed = [t for t in texts if environment_text(t) != t]
    return len(changed), changed[:2]


def hygiene(params_file: Path) -> None:
    from hasp.domains.search.datasets import load_dataset
    from hasp.domains.search.prepare import prepare_data
    from hasp.domains.search.task import SearchTask

    with tempfile.TemporaryDirectory() as d:
        prepare_data(load_params(params_file), Path(d))
        task = SearchTask.load(Path(d))
        docs = [str(x.get("contents", "")) for x in task.retriever.docs]
        questions = [q.question for split in ("train", "val", "test") for q in task.questions(split)]
    rows = [("benchmark v2 (grid data params)", docs, questions)]
    for name, spec in REAL.items():
        kind, _, path = spec.partition(":")
        ds = load_dataset(path, kind)
        rows.append((name, [str(x.get("contents", "")) for x in ds.corpus], [q.question for q in ds.questions]))
    REPORT.line("observation hygiene: texts the environment filter changes (documents are what search results and "
                "pages are made of)")
    for name, ds_docs, qs in rows:
        nd, ex_d = _changed(ds_docs)
        nq, ex_q = _changed(qs)
        REPORT.line(f"  {name:<34} documents {nd:>4} of {len(ds_docs):<5} questions {nq:>3} of {len(qs)}")
        for ex in ex_d + ex_q:
            REPORT.line(f"      e.g. {ex[:100]!r} -> {environment_text(ex)[:100]!r}")


def counting(grid_runs: Path) -> None:
    from hasp.stats import rate

    errors: Counter[str] = Counter()
    n_eps = n_err = n_now_scored = 0
    moved = []
    for f in sorted(grid_runs.rglob("*.jsonl")):
        if f.name.endswith(".episodes.jsonl"):
            continue
        rows = [json.loads(x) for x in f.read_text().splitlines() if x.strip()]
        rows = [r for r in rows if isinstance(r, dict) and "terminated" in r]
        if not rows:
            continue
        n_eps += len(rows)
        bad = [r for r in rows if r["terminated"] == "error"]
        n_err += len(bad)
        crash = []
        for r in bad:
            last = (r.get("pf_errors") or ["?"])[-1]
            kind = last.split(":", 1)[0]
            errors[kind] += 1
            if not kind.startswith(INFRA):
                crash.append(r)
        n_now_scored += len(crash)
        if crash:
            kept = [float(r.get("em", 0.0)) for r in rows if r["terminated"] != "error"]
            after = kept + [0.0] * len(crash)
            moved.append((f.relative_to(grid_runs), rate(kept), rate(after)))
    REPORT.line(f"scoring rule on the archived grid trajectories ({grid_runs.relative_to(ROOT)}): {n_eps} episodes, "
                f"{n_err} ended terminated=error, {n_now_scored} of them would now be scored as wrong answers")
    REPORT.line("  errors by type: " + (", ".join(f"{k} {v}" for k, v in errors.most_common()) or "none"))
    for path, before, after in moved:
        REPORT.line(f"  {path}: EM {before.p:.3f} (n={before.n}) -> {after.p:.3f} (n={after.n})")
    if not moved:
        REPORT.line("  no cell's EM changes: no archived episode ended in an error the new rule scores")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--params", type=Path, default=ROOT / "bench" / "grid_v2" / "params-s42.yaml")
    ap.add_argument("--grid-runs", type=Path, default=ROOT / "bench" / "grid_runs")
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args(argv)
    hygiene(a.params)
    counting(a.grid_runs.resolve())
    if not a.no_write:
        REPORT.write()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
