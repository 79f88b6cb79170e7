"""How the action parser's rules change what recorded trajectories would have counted as answers.

    .venv/bin/python bench/answer_extraction.py RUN [RUN ...] [--old-rev REV] [--examples 5]

Why: ``answered`` and EM are only as truthful as the parser that decides what a reply is. This
re-parses every recorded step of real trajectories (each ``StepRecord`` keeps its ``raw_output``)
with an older parser and with the current one, without running a model. RUN is a trajectories
jsonl or a directory searched for them (rollouts, val-gate runs, evaluation cells; other jsonl
files are skipped). ``--old-rev`` is a git revision whose ``hasp/agent/parser.py`` is the old rule;
by default the version before the file's last change.

Printed, per run and in total: steps; FINALs under the old and the new parser; old FINALs that
become parse failures; other steps whose action changes; trajectories answered as recorded and
after the re-parse (an answer is lost when the step that gave it parses differently, an estimate:
the model would have had another turn); the same for trajectories with EM 1 (each loss is
listed); why the new parser refused the old FINALs; and example raw outputs that change.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import types
from collections import Counter
from pathlib import Path
from typing import Any

from hasp.agent.parser import parse_action
from hasp.records import Trajectory
from hasp.textutil import truncate
from results import Report  # noqa: E402 - bench/ is the script directory

REPORT = Report("Answer extraction: stricter action parser on recorded trajectories")
ROOT = Path(__file__).resolve().parents[1]
PARSER = "hasp/agent/parser.py"
ANSWERED = ("final", "budget_final")


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout


def old_parser(rev: str | None) -> tuple[Any, str]:
    """``parse_action`` of ``hasp/agent/parser.py`` at ``rev`` (default: before its last change)."""
    if rev is None:
        rev = _git("log", "-n", "1", "--format=%H", "HEAD", "--", PARSER).strip() + "^"
    commit = _git("rev-parse", "--short", rev).strip()
    mod = types.ModuleType("old_parser")
    sys.modules[mod.__name__] = mod  # dataclasses look their module up there
    exec(compile(_git("show", f"{commit}:{PARSER}"), f"{commit}:{PARSER}", "exec"), mod.__dict__)  # noqa: S102
    return mod.parse_action, commit


def trajectory_files(paths: list[Path]) -> list[tuple[str, Path]]:
    """(run, file) for the jsonl files under ``paths`` whose first record is a trajectory; the run is
    the name of the argument the file was found under."""
    out = []
    for p in paths:
        for f in sorted(p.rglob("*.jsonl")) if p.is_dir() else [p]:
            with open(f, encoding="utf-8") as fh:
                first = fh.readline()
            try:
                rec = json.loads(first)
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict) and "steps" in rec and "qid" in rec:
                out.append((p.name, f))
    return out


def _key(r: Any) -> tuple[str, str]:
    """(type, arg) of a parse by either parser (the old one has its own classes), ("error", "") on failure."""
    return (r.type, r.arg) if hasattr(r, "type") else ("error", "")


def _answering_step(t: Trajectory) -> int | None:
    """Index of the step whose FINAL ended the episode (the last one), if it was answered."""
    return len(t.steps) - 1 if t.terminated in ANSWERED and t.steps else None


def _reason_kind(reason: str) -> str:
    """A refusal's reason without its particulars (the action written, a word count)."""
    return re.sub(r"\d+", "N", re.sub(r"^\w+\[[^\]]*\]\s*", "", reason.split(":")[0]))


class Tally:
    def __init__(self) -> None:
        self.c: Counter[str] = Counter()

    def add(self, **kw: int) -> None:
        self.c.update(kw)


def measure(files: list[tuple[str, Path]], old: Any, report: Report, n_examples: int) -> None:
    by_run: dict[str, Tally] = {}
    refusals: Counter[str] = Counter()
    examples: dict[str, tuple[str, str, str]] = {}
    em_losses: list[str] = []
    for run, f in files:
        tally = by_run.setdefault(run, Tally())
        for t in (Trajectory.from_dict(json.loads(line)) for line in open(f, encoding="utf-8") if line.strip()):
            changed_steps, lost = 0, False
            for i, s in enumerate(t.steps):
                o, n = old(s.raw_output), parse_action(s.raw_output)
                ko, kn = _key(o), _key(n)
                tally.add(steps=1, final_old=ko[0] == "FINAL", final_new=kn[0] == "FINAL",
                          error_old=ko[0] == "error", error_new=kn[0] == "error")
                if ko == kn:
                    continue
                changed_steps += 1
                if ko[0] == "FINAL" and kn[0] == "error":
                    tally.add(final_to_error=1)
                    refusals[_reason_kind(n.reason)] += 1
                else:
                    tally.add(other_changes=1)
                if i == _answering_step(t):
                    lost = True
                examples.setdefault(s.raw_output, (f"{ko[0]}[{ko[1]}]" if ko[0] != "error" else "parse failure",
                                                   f"{kn[0]}[{kn[1]}]" if kn[0] != "error" else
                                                   f"parse failure ({n.reason})", f"{run}/{f.name} {t.qid} step {i}"))
            answered = t.terminated in ANSWERED
            tally.add(trajectories=1, answered_old=answered, answered_new=answered and not lost,
                      em1=t.em == 1.0, em1_lost=t.em == 1.0 and lost,
                      em1_touched=t.em == 1.0 and changed_steps > 0, touched=changed_steps > 0)
            if t.em == 1.0 and lost:
                em_losses.append(f"{run}/{f.name} {t.qid}: {truncate(t.steps[-1].raw_output, 160)}")
    total = Tally()
    for tl in by_run.values():
        total.c.update(tl.c)
    cols = [("steps", "steps"), ("FINAL old", "final_old"), ("FINAL new", "final_new"),
            ("FINAL→err", "final_to_error"), ("other chg", "other_changes"), ("parse err old", "error_old"),
            ("parse err new", "error_new"), ("trajs", "trajectories"), ("answered old", "answered_old"),
            ("answered new", "answered_new"), ("EM1", "em1"), ("EM1 lost", "em1_lost"),
            ("EM1 touched", "em1_touched")]
    width = max(len(r) for r in [*by_run, "total"])
    report.line(f"{'run':{width}s} " + " ".join(f"{h:>{len(h)}s}" for h, _ in cols))
    for name, tl in [*sorted(by_run.items()), ("total", total)]:
        report.line(f"{name:{width}s} " + " ".join(f"{tl.c[k]:>{len(h)}d}" for h, k in cols))
    c, n = total.c, max(1, total.c["trajectories"])
    report.line(f"answered rate {c['answered_old'] / n:.3f} -> {c['answered_new'] / n:.3f} (n={c['trajectories']}); "
                f"EM {c['em1'] / n:.3f} -> {(c['em1'] - c['em1_lost']) / n:.3f}; trajectories with a changed step: "
                f"{c['touched']} (EM 1: {c['em1_touched']})")
    report.line("old FINALs refused, by reason: " + (", ".join(f"{r} ×{k}" for r, k in refusals.most_common()) or "none"))
    for line in em_losses:
        report.line(f"EM-1 answer lost: {line}")
    report.line(f"{len(examples)} distinct raw outputs parse differently; {min(n_examples, len(examples))} of them:")
    for raw, (o, nw, where) in list(examples.items())[:n_examples]:
        report.line(f"  {where}\n    raw: {json.dumps(truncate(raw, 200))}\n    old: {truncate(o, 80)}\n"
                    f"    new: {truncate(nw, 120)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="trajectory jsonl files or directories holding them")
    ap.add_argument("--old-rev", help="git revision of the old parser (default: before its last change)")
    ap.add_argument("--examples", type=int, default=5)
    args = ap.parse_args()
    files = trajectory_files(args.runs)
    if not files:
        print(f"error: no trajectory jsonl under {', '.join(map(str, args.runs))}", file=sys.stderr)
        raise SystemExit(2)
    old, commit = old_parser(args.old_rev)
    REPORT.line(f"old parser: {PARSER} at {commit}; new: the working tree; {len(files)} trajectory files")
    measure(files, old, REPORT, args.examples)
    REPORT.write()


if __name__ == "__main__":
    main()
