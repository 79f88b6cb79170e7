"""One trained checkpoint evaluated on two engines: does a checkpoint mean the same thing on both?

Why: a checkpoint trained with PEFT is served on llama.cpp as a GGUF LoRA on the quantised base
(``hasp/llm/gguf_lora.py``) and on ``transformers serve`` as a merged HF folder. The per-step
agreement of the two is measured by ``bench/lora_agreement.py``; what a user reports is EM, so this
pairs the two engines' evaluations of the same checkpoint, library and test questions, question by
question (the other side − the first, 95 % bootstrap interval), next to each side's parse-error rate
and steps. Both sides are ``hasp eval --out`` folders of one arm each:

    hasp eval --params p-llamacpp.yaml --variants pf --model-dir M --library L --data D --out A
    hasp eval --params p-transformers.yaml --variants pf --model-dir M --library L --data D --out B
    python bench/checkpoint_engines.py --first A --second B --label-first "llama.cpp" --label-second "transformers"
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hasp.eval.paired import cell_file, em_by_qid  # noqa: E402
from hasp.stats import paired_difference  # noqa: E402
from results import Report  # noqa: E402 - bench/ is the script directory

REPORT = Report("One checkpoint on two engines")


def cell_summary(eval_dir: Path, arm: str) -> dict:
    """The arm's row of ``metrics.json`` (``{dataset: {arm: row}}``; empty when there is none)."""
    path = Path(eval_dir) / "metrics.json"
    data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    return next((cells[arm] for cells in data.values() if isinstance(cells, dict) and arm in cells), {})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--first", type=Path, required=True, help="hasp eval --out folder on the first engine")
    ap.add_argument("--second", type=Path, required=True, help="hasp eval --out folder on the second engine")
    ap.add_argument("--arm", default="pf", help="the evaluated arm (its trajectory file is <arm>.jsonl)")
    ap.add_argument("--arm-second", default=None, help="the second side's arm when it is named otherwise "
                    "(a grid run's trained_pf against an eval's pf)")
    ap.add_argument("--section", default=REPORT.section, help="the results section to write (the same pairing "
                    "serves a code change on one engine)")
    ap.add_argument("--label-first", default="first")
    ap.add_argument("--label-second", default="second")
    ap.add_argument("--ran", action="append", default=[], help="how each side was made (printed), repeatable")
    ap.add_argument("--no-write", action="store_true", help="print only; leave bench/RESULTS.md as it is")
    a = ap.parse_args(argv)
    arm2 = a.arm_second or a.arm
    REPORT.section = a.section
    first, second = em_by_qid(cell_file(a.first, a.arm)), em_by_qid(cell_file(a.second, arm2))
    common = sorted(set(first) & set(second))
    if not common:
        print(f"no question scored on both sides ({cell_file(a.first, a.arm)}, {cell_file(a.second, arm2)})",
              file=sys.stderr)
        return 2
    for r in a.ran:
        REPORT.line(f"ran: {r}")
    for label, folder, arm in ((a.label_first, a.first, a.arm), (a.label_second, a.second, arm2)):
        row = cell_summary(folder, arm)
        hits = sum(first[q] if folder == a.first else second[q] for q in common)
        extra = ", ".join(f"{k} {row[k]:.3f}" for k in ("parse_error_rate", "mean_steps") if k in row)
        REPORT.line(f"{label:<28} EM {hits:.0f}/{len(common)}" + (f"  ({extra})" if extra else "") + f"  [{folder}]")
    d = paired_difference([first[q] for q in common], [second[q] for q in common])
    REPORT.line(f"paired {a.label_second} - {a.label_first}: {d}")
    same = sum(first[q] == second[q] for q in common)
    REPORT.line(f"questions with the same EM on both sides: {same}/{len(common)}")
    if not a.no_write:
        REPORT.write()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
