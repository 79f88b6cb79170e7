"""What hindsight rows teach once they are fitted to ``train.max_length``: rows, and how many still show
the episode's question and the gold answer the row's target gives.

Why: a hindsight row's target is FINAL[gold]. It teaches reading only while the fitted prompt still holds
the observation that carried the gold; a row that lost it (or lost the question, keeping only the
few-shot demo's) teaches the policy to make an answer up. This counts both on real sampled
trajectories, for each ``--states`` mode and each ``--max-length``, with the tokenizer of the model.

    python bench/hindsight_rows.py --rollout outputs/experiment/E2_cpu/phase_0/train/round_0/rollout.jsonl \\
        [--rollout ...] [--max-length 512 768 1024] [--model FOLDER]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hasp.atomic import read_jsonl
from hasp.records import Trajectory
from hasp.train.hindsight import answer_seen, hindsight_rows
from hasp.train.sft import episode_head, n_tokens, fit_messages
from results import Report  # noqa: E402 - bench/ is the script directory


def _gold(row: dict) -> str:
    return row["messages"][-1]["content"].rsplit("FINAL[", 1)[1][:-1]


def measure(rows: list[dict], tok, max_length: int) -> dict[str, int]:
    """Rows that fit, keep the episode's question, and keep the gold answer in their prompt."""
    out = {"rows": len(rows), "fit": 0, "question": 0, "gold": 0, "tokens": 0}
    for r in rows:
        msgs = r["messages"]
        question = msgs[episode_head(msgs)[1] - 1]
        fitted, _ = fit_messages(tok, msgs, max_length)
        if fitted is None:
            continue
        out["fit"] += 1
        out["question"] += question in fitted
        out["gold"] += answer_seen(" ".join(m["content"] for m in fitted[:-1]), [_gold(r)]) is not None
        out["tokens"] += n_tokens(tok, fitted)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rollout", action="append", required=True, help="rollout.jsonl of an RS/OPD round")
    ap.add_argument("--max-length", type=int, nargs="+", default=[512, 768, 1024])
    ap.add_argument("--model", default=None, help="tokenizer folder (default: the embedded model)")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    from transformers import AutoTokenizer

    from hasp.train.run import resolve_model

    tok = AutoTokenizer.from_pretrained(str(resolve_model(args.model)))
    report = Report("Hindsight rows fitted to the training length")
    for path in args.rollout:
        try:
            trajs = [Trajectory.from_dict(d) for d in read_jsonl(Path(path))]
        except (OSError, ValueError, KeyError, TypeError) as e:
            print(f"error: {path}: {e}", file=sys.stderr)
            return 2
        report.line(f"{path}: {len(trajs)} trajectories")
        report.line("| states | max_length | rows | fit | question kept | gold kept | mean tokens |")
        report.line("|---|---|---|---|---|---|---|")
        for states in ("first", "after"):
            rows, _ = hindsight_rows(trajs, weight=1.0, states=states)
            for n in args.max_length:
                m = measure(rows, tok, n)
                mean = m["tokens"] / m["fit"] if m["fit"] else 0.0
                report.line(f"| {states} | {n} | {m['rows']} | {m['fit']} | {m['question']} | {m['gold']} | "
                            f"{mean:.0f} |")
    if not args.no_write:
        report.write()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
