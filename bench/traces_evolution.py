"""Evolution from logged traces with the gold answers withheld, against the same evolution with them.

Why: a deployed agent's logs carry no gold answers; Phase B then finds failures with the label-free
signals alone (``hasp.evolve.trace_signals``). This measures what that costs on the same traces: the
PF agent's ``hasp eval`` episodes on the benchmark-v2 train split are the logged traces, and two runs of
``hasp evolve run --from-traces`` (``--gold`` and ``--no-gold``) evolve from them with the same params,
data and gates. Reported per arm: the failures Phase B used and which signal found them, the signals'
precision against gold, proposals, reviews, val-gate passes, admissions, and test EM of the PF agent
before and after with paired intervals on the same test questions (per hop count and per seen /
held-out template), plus the two arms' final agents against each other. Every step is the CLI a user
runs. Greedy decoding: one run is one sample, the intervals are over questions, not seeds.

    HASP_BENCH_NOTE='what else ran' python bench/traces_evolution.py --out /work/runs/traces_evo [--questions 100] [--no-write]
        [--arms gold no_gold no_gold_judge] [--holdout 0.3]

The ``no_gold_judge`` arm evolves without gold and gates on the judge instead (``evolve.traces.holdout``:
a share of the traces' questions held out of the epoch, answered with and without each candidate, the
judge reading every answer; ``hasp.evolve.judge_gate``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hasp.eval.paired import cell_file, em_by_qid, paired_gain  # noqa: E402
from results import Report  # noqa: E402 - bench/ is the script directory

SECTION = "Evolution from logged traces, with and without gold answers"
#: arm -> the gold flag of `hasp evolve run --from-traces`; no_gold_judge also gets the judge gate
ARMS = {"gold": "--gold", "no_gold": "--no-gold", "no_gold_judge": "--no-gold"}
REPORT = Report(SECTION)
HASP = [sys.executable, "-m", "hasp.cli"]


def _run(cmd: list[str], log: Path) -> float:
    t0 = time.monotonic()
    with log.open("w") as f:
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env={**os.environ, "HASP_LLM_THREADS": "2"})
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}); see {log}")
    return time.monotonic() - t0


def _json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def _via(v: object) -> str:
    """How many correct answers a vocabulary rewrite wrote (the runner's count, a number or {k, n})."""
    if isinstance(v, dict):
        return f"{v.get('k', v.get('correct'))} of {v.get('n', v.get('of'))}"
    return str(v)


def _gain(g: dict) -> str:
    return f"{g['mean']:+.3f} [{g['ci95'][0]:+.2f}, {g['ci95'][1]:+.2f}] n={g['n']}"


def _groups(g: dict) -> str:
    parts = [f"{k}-hop {_gain(v)}" for k, v in g.get("by_hops", {}).items()]
    parts += [f"{k} {_gain(v)}" for k, v in g.get("by_template", {}).items()]
    return "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--questions", type=int, default=100, help="benchmark-v2 questions (35 %% train, 15 %% val, 50 %% test)")
    ap.add_argument("--seed", type=int, default=None, help="data.seed: another generated benchmark (default: params.yaml's)")
    ap.add_argument("--filtering", default=None, help="evolve --filtering for both arms (default: params.yaml's, "
                    "full: Phase D, the review and the val gate)")
    ap.add_argument("--report-only", action="store_true", help="report on the runs already in --out")
    ap.add_argument("--over-seeds", type=Path, nargs="+", default=None, metavar="DIR",
                    help="report the finished runs of these folders (one per data seed) together, paired per "
                    "question over all of them (--out is then only where nothing is written)")
    ap.add_argument("--arms", nargs="+", choices=tuple(ARMS), default=["gold", "no_gold"],
                    help="no_gold_judge: no gold, and the judge gate on --holdout of the traces' questions")
    ap.add_argument("--holdout", type=float, default=0.3, help="evolve.traces.holdout of the no_gold_judge arm")
    ap.add_argument("--no-final-eval", action="store_true", help="stop each arm after its epoch (gates and "
                    "admissions only, no test EM)")
    ap.add_argument("--label", default=None, help="appended to the section name (a run of the same arms "
                    "under other code, so both sections stay)")
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args(argv)
    if a.over_seeds:
        REPORT.section = f"{SECTION}, filtering {a.filtering or 'full'}, over data seeds"
        _over_seeds(a.over_seeds)
        if not a.no_write:
            REPORT.write()
        return 0
    if a.filtering:
        REPORT.section = f"{SECTION}, filtering {a.filtering}"
    if a.seed is not None:
        REPORT.section += f", data seed {a.seed}"
    out = a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    p = yaml.safe_load((ROOT / "params.yaml").read_text())
    demo = p.get("demo", {})
    for key, value in demo.items():  # the demo's scale and roles: a model reviews every proposal
        if key.split(".")[0] in ("agent", "evolve", "teacher"):
            sec, k = key.split(".", 1)
            p[sec][k] = value
    p["data"].update(version=2, n_questions=a.questions)
    if a.seed is not None:
        p["data"]["seed"] = a.seed
    p["evolve"].update(max_candidates=2)
    p["train"]["enabled"] = False
    from hasp.llm.server import free_port

    # ports of their own: a test suite or a user's server on the default ports is left alone
    p["llm"]["port"], p["teacher"]["port"] = free_port(), free_port()
    params = out / "params.yaml"
    arms = {arm: ARMS[arm] for arm in a.arms}
    if "no_gold_judge" in arms:
        REPORT.section += f", judge gate on {a.holdout:.0%} held out"
    if a.label:
        REPORT.section += f", {a.label}"
    wall: dict[str, float] = {}
    if a.report_only:
        p = yaml.safe_load(params.read_text())
    else:
        params.write_text(yaml.safe_dump(p))
        judged = {**p, "evolve": {**p["evolve"], "traces": {**p["evolve"]["traces"], "holdout": a.holdout}}}
        (out / "params_no_gold_judge.yaml").write_text(yaml.safe_dump(judged))
        _runs(out, params, arms, a.filtering, wall, final_eval=not a.no_final_eval)
    _report(out, params, p, arms, a.filtering, wall)
    if not a.no_write:
        REPORT.write()
    return 0


def _runs(out: Path, params: Path, arms: dict[str, str], filtering: str | None, wall: dict[str, float],
          final_eval: bool = True) -> None:
    """The user's commands: the data, the logged traces (the PF agent on the train split), two evolutions."""
    if (out / "traces" / "metrics.json").exists():  # a folder of an earlier run: its data and traces are reused
        REPORT.line(f"data and traces reused from {out} (an earlier run's)")
    else:
        _data_and_traces(out, params, wall)
    for arm, flag in arms.items():
        if (out / arm / ("eval_evolution/metrics.json" if final_eval else "epoch_0/summary_admit.json")).exists():
            REPORT.line(f"{arm}: reused from {out / arm}")
            continue
        arm_params = out / f"params_{arm}.yaml" if (out / f"params_{arm}.yaml").exists() else params
        wall[arm] = _run(HASP + ["evolve", "run", "--from-traces", str(out / "traces"), flag, "--params", str(arm_params),
                                 "--out", str(out / arm), "--final-eval" if final_eval else "--no-final-eval",
                                 *(["--filtering", filtering] if filtering else [])], out / f"{arm}.log")


def _data_and_traces(out: Path, params: Path, wall: dict[str, float]) -> None:
    wall["data"] = _run(HASP + ["data", "prepare", "--out", str(out / "data"), "--params", str(params)], out / "data.log")
    wall["traces"] = _run(HASP + ["eval", "--variants", "pf", "--split", "train", "--data", str(out / "data"),
                                  "--out", str(out / "traces"), "--params", str(params), "--no-progress"],
                          out / "traces.log")


def _test_groups(out: Path) -> tuple[dict[str, int], dict[str, bool], int]:
    """(hops, template seen, n) of the test questions of the run in ``out``."""
    from hasp.config import load_params
    from hasp.eval.datasets import load_eval_dataset, parse_dataset_spec

    ds = load_eval_dataset(parse_dataset_spec("generated"), load_params(out / "params.yaml"), split="test",
                           data_dir=out / "data")
    return ({str(q.id): int(getattr(q, "hops", 0) or 0) for q in ds.questions}, dict(ds.template_seen),
            len(ds.questions))


def _over_seeds(dirs: list[Path]) -> None:
    """Every run folder's arms, and the gains paired per (seed, question) over all of them."""
    cells: dict[str, dict[str, dict[str, float]]] = {}
    per_seed: dict[str, list[float]] = {}
    hops_all: dict[str, int] = {}
    seen_all: dict[str, bool] = {}
    for d in dirs:
        p = yaml.safe_load((d / "params.yaml").read_text())
        seed = p["data"]["seed"]
        hops, seen, n = _test_groups(d)
        hops_all.update({f"{seed}:{q}": h for q, h in hops.items()})
        seen_all.update({f"{seed}:{q}": s for q, s in seen.items()})
        parts = []
        for arm in ("gold", "no_gold"):
            ep, ev = d / arm / "epoch_0", d / arm / "eval_evolution"
            ad, va, vb = (_json(ep / f"summary_{x}.json") for x in ("admit", "val_after", "val_baseline"))
            for label in ("pf_before", "pf"):
                cells.setdefault(f"{arm}/{label}", {}).update(
                    {f"{seed}:{q}": v for q, v in em_by_qid(cell_file(ev, label)).items()})
            after, before = em_by_qid(cell_file(ev, "pf")), em_by_qid(cell_file(ev, "pf_before"))
            gain = _gain(paired_gain(before, after)) if before and after else "-"
            per_seed.setdefault(arm, []).append(sum(after.values()) / max(1, len(after))
                                                - sum(before.values()) / max(1, len(before)))
            parts.append(f"{arm}: admitted {ad.get('admitted')}, val EM {vb.get('em', 0):.3f} -> {va.get('em', 0):.3f}, "
                         f"test pf {sum(before.values()):.0f}/{len(before)} -> {sum(after.values()):.0f}/{len(after)}, "
                         f"paired {gain}")
        ceiling = (_json(d / "gold" / "eval_evolution" / "metrics.json").get("generated", {}).get("pf") or {}).get(
            "extractor_ceiling") or {}
        REPORT.line(f"data seed {seed} ({d}): test n={n}; " + "; ".join(parts)
                    + f"; extractor ceiling {ceiling.get('em_k')}/{ceiling.get('n')}")
    for arm in ("gold", "no_gold"):
        before, after = cells.get(f"{arm}/pf_before", {}), cells.get(f"{arm}/pf", {})
        if before and after:
            g = paired_gain(before, after, hops_all, seen_all)
            REPORT.line(f"{arm}: pf after - before, paired over seeds x questions: {_gain(g)}; {_groups(g)}")
            gains = per_seed.get(arm, [])
            if len(gains) > 1:
                REPORT.line(f"  per seed: {', '.join(f'{x:+.3f}' for x in gains)} (mean {sum(gains) / len(gains):+.3f}); "
                            "the interval above is over questions pooled across seeds, so it does not hold how "
                            "much the gain depends on which skills a seed's student proposed")
    if cells.get("gold/pf") and cells.get("no_gold/pf"):
        g = paired_gain(cells["gold/pf"], cells["no_gold/pf"], hops_all, seen_all)
        REPORT.line(f"no-gold after - gold after, paired over seeds x questions: {_gain(g)}; {_groups(g)}")


def _report(out: Path, params: Path, p: dict, arms: dict[str, str], filtering: str | None,
            wall: dict[str, float]) -> None:
    from hasp.config import load_params
    from hasp.eval.datasets import load_eval_dataset, parse_dataset_spec

    ds = load_eval_dataset(parse_dataset_spec("generated"), load_params(params), split="test", data_dir=out / "data")
    hops = {str(q.id): int(getattr(q, "hops", 0) or 0) for q in ds.questions}
    seen = dict(ds.template_seen)
    REPORT.line(f"benchmark v2, {p['data']['n_questions']} questions (seed {p['data']['seed']}); traces: the PF agent's hasp eval "
                f"episodes on the train split; embedded {p['llm']['embedded']} policy, teacher "
                f"{p['teacher'].get('embedded')} reviewing (demo roles), greedy; test n={len(ds.questions)}")
    REPORT.line(f"filtering: {filtering or p['evolve']['filtering']} (both arms)")
    if wall:
        REPORT.line("wall s: " + ", ".join(f"{k} {v:.0f}" for k, v in wall.items()))
    finals, admitted = {}, {}
    for arm in arms:
        ep = out / arm / "epoch_0"
        an, pr, rv = _json(ep / "summary_analyse.json"), _json(ep / "summary_propose.json"), _json(ep / "summary_review.json")
        gt, ad = _json(ep / "summary_gate.json"), _json(ep / "summary_admit.json")
        tr = _json(ep / "traces_summary.json").get("traces", {})
        admitted[arm] = ad.get("admitted")
        REPORT.line(f"{arm}: traces read {tr.get('n_read')} (bad {tr.get('n_bad')}, with gold {tr.get('n_with_gold')}); "
                    f"failures {an.get('failed')} by {an.get('failure_source')}; proposals {pr.get('proposed')} for "
                    f"{pr.get('asked')} clusters; review accepted {rv.get('review_accept')} of {rv.get('reviewed')}"
                    f"{'' if (filtering or p['evolve']['filtering']) in ('teacher', 'full') else ' (not a gate here)'}; "
                    + (f"val gate passed {gt.get('val_pass')} of {gt.get('val_runs')}" if gt.get("val_runs") else
                       "no val gate") + f"; admitted {ad.get('admitted')}")
        jg = gt.get("judge")
        if jg:
            held = _json(ep / "summary_rollout.json").get("heldout") or {}
            REPORT.line(f"  judge gate: {jg.get('held_out')} held-out questions ({held.get('trajectories')} traces "
                        f"left out of Phases B-H); library alone {jg.get('supported_before')} of "
                        f"{jg.get('judged_before')} judged answers supported; {jg.get('runs')} candidates checked, "
                        f"{len(jg.get('refused') or {})} refused")
            jb = jg.get("judge_before") or {}
            if jb:
                REPORT.line(f"  the judge on the library alone's answers: {jb.get('asked')} asked, "
                            f"{jb.get('unsupported')} unsupported, {jb.get('errors')} unusable"
                            + (f" (first: {jb['first_error'][:90]})" if jb.get("first_error") else ""))
            for sid, c in sorted((jg.get("checks") or {}).items()):
                d = c.get("delta") or {}
                ci = d.get("ci95") or [0, 0]
                paired = (f"paired {d.get('mean', 0):+.3f} [{ci[0]:+.2f}, {ci[1]:+.2f}]" if c.get("n")
                          else "no question judged in both runs")
                REPORT.line(f"    {sid}: supported after {c.get('supported_after')} of n={c.get('n')}, {paired}, "
                            f"unjudged {c.get('unjudged')}"
                            + (f", error {c['error'][:80]}" if c.get("error") else "")
                            + (" - refused" if sid in (jg.get("refused") or {}) else ""))
        per = (an.get("signals") or {}).get("per_signal") or {}
        fired = {k: v for k, v in per.items() if v.get("flagged")}
        labelled = (an.get("signals") or {}).get("n_labelled") or 0
        if fired and labelled and (an.get("signals") or {}).get("gold_failures") == labelled:
            REPORT.line(f"  every labelled trace failed (EM 0 on {labelled} of {labelled}): a precision of 1.00 "
                        "says nothing here, recall does")
        if fired:
            REPORT.line("  label-free signals against gold (EM 0), flagged / precision / recall: " + "; ".join(
                f"{k} {v['flagged']} / {v['precision']:.2f} / {v['recall']:.2f}" for k, v in sorted(fired.items())))
        ev = out / arm / "eval_evolution"
        before, after, react = (em_by_qid(cell_file(ev, x)) for x in ("pf_before", "pf", "react"))
        finals[arm] = after
        metrics = _json(ev / "metrics.json").get("generated", {})
        for name, label, cell in (("react", "react", react), ("pf before", "pf_before", before), ("pf after", "pf", after)):
            if cell:
                via = (metrics.get(label) or {}).get("correct_via_vocabulary_rewrite")
                REPORT.line(f"  test EM {name}: {sum(cell.values()):.0f}/{len(cell)}"
                            + (f" ({_via(via)} written by a vocabulary rewrite)" if via else ""))
        ceiling = (metrics.get("pf") or {}).get("extractor_ceiling") or {}
        if ceiling:
            groups = "; ".join(f"{g} {c['em_k']}/{c['n']}" for g, c in (ceiling.get("by_template") or {}).items())
            REPORT.line(f"  extractor ceiling ({ceiling.get('source')} on each question's gold support): "
                        f"{ceiling.get('em_k')}/{ceiling.get('n')}" + (f" ({groups})" if groups else ""))
        if before and after:
            g = paired_gain(before, after, hops, seen)
            REPORT.line(f"  pf after - before (paired): {_gain(g)}; {_groups(g)}")
    if finals.get("gold") and finals.get("no_gold"):
        g = paired_gain(finals["gold"], finals["no_gold"], hops, seen)
        REPORT.line(f"no-gold after - gold after (paired): {_gain(g)}; {_groups(g)}")
        if not any(admitted.values()):
            REPORT.line("  both arms admitted nothing and end with the same library: this difference is the engine's "
                        "(greedy replies on 4 llama.cpp slots depend on what decodes beside them), not evolution's")


    if finals.get("no_gold") and finals.get("no_gold_judge"):
        g = paired_gain(finals["no_gold"], finals["no_gold_judge"], hops, seen)
        REPORT.line(f"no-gold with the judge gate after - no-gold after (paired): {_gain(g)}; {_groups(g)}")


if __name__ == "__main__":
    raise SystemExit(main())
