"""The vocabulary answer extractor's ceiling per benchmark: what it answers when handed the gold support.

Why: the declared PFs that move the embedded model answer with a hand-written extractor
(``answer_span``); a score means little without what that extractor alone reaches on the same
questions given their gold supporting documents. Every ``hasp eval`` table carries this line for its
own questions; this script puts it for the standard sets side by side (the generated benchmark's test
split of v1 and v2 — seen and unseen templates apart — and the real-data samples), with n and 95 %
intervals.

    python bench/extractor_ceiling.py [--dataset generated] [--dataset hotpotqa:PATH ...] [--v2]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hasp.atomic import read_jsonl  # noqa: E402
from hasp.config import load_params  # noqa: E402
from hasp.eval.ceiling import extractor_ceiling, retriever_lookup  # noqa: E402
from hasp.eval.datasets import load_eval_dataset, parse_dataset_spec  # noqa: E402
from results import Report  # noqa: E402 - bench/ is the script directory

REPORT = Report("Extractor ceiling on gold support")
SHARED = ROOT.parent / "shared" / "data"
REAL = [f"hotpotqa:{SHARED / 'hotpotqa' / 'hotpot_dev_distractor_sample_a.jsonl'}",
        f"hotpotqa:{SHARED / 'hotpotqa' / 'hotpot_dev_distractor_sample_b.jsonl'}",
        f"2wiki:{SHARED / '2wiki' / '2wiki_dev_sample.jsonl'}",
        f"musique:{SHARED / 'musique' / 'musique_ans_dev_sample.jsonl'}"]


def _line(label: str, c: dict) -> str:
    lo, hi = c["em_ci95"]
    return (f"{label:<34} n {c['n']:>4}  EM {c['em_k']:>3}/{c['n']:<4} {c['em']:.3f} [{lo:.2f}, {hi:.2f}]  "
            f"F1 {c['f1']:.3f}  no support {c['no_support']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", action="append", default=None, help="dataset specs (default: generated and the "
                    "real-data samples under ../shared/data)")
    ap.add_argument("--params", type=Path, default=ROOT / "params.yaml")
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args(argv)
    p = load_params(a.params)
    specs = a.dataset or ["generated", *(s for s in REAL if Path(s.split(":", 1)[1]).exists())]
    with tempfile.TemporaryDirectory() as tmp:
        for version in (1, 2):
            pv = p.model_copy(update={"data": p.data.model_copy(update={"version": version})})
            for raw in specs:
                if raw != "generated" and version == 2:
                    continue  # the real sets have no generator version
                ds = load_eval_dataset(parse_dataset_spec(raw), pv, split="test",
                                       data_dir=Path(tmp) / f"v{version}")
                name = f"generated v{version}" if raw == "generated" else ds.name
                lookup = retriever_lookup(ds.retriever)
                REPORT.line(_line(name, extractor_ceiling(ds.questions, lookup)))
                if raw == "generated" and version == 2:
                    rows = read_jsonl(Path(tmp) / "v2" / "test.jsonl")  # the rows say which template is unseen
                    seen_of = {str(r["id"]): bool(r["seen"]) for r in rows}
                    for seen in (True, False):
                        qs = [q for q in ds.questions if seen_of[str(q.id)] == seen]
                        REPORT.line(_line(f"generated v2, {'seen' if seen else 'unseen'} templates",
                                          extractor_ceiling(qs, lookup)))
    if not a.no_write:
        REPORT.write()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
