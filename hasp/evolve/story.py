"""What one evolution epoch did, told from its files: the failures found, what the student proposed
(as it wrote it), each candidate's Phase D / review / val-gate numbers and the admission decision,
then the PF agent's test EM before and after — each rate with its n and 95 % interval.

Why a module: ``hasp demo`` shows a new user this loop, and the same text belongs in a closing
report; reading it off the epoch folder (not the flow's return value) also works for a cached or
resumed run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hasp import artifacts as art
from hasp.eval.paired import em_by_qid
from hasp.stats import paired_difference, wilson
from hasp.textutil import truncate


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _rate(em: float | None, n: int) -> str:
    if em is None or not n:
        return "n/a"
    r = wilson(round(em * n), n)
    return f"{r.p:.3f} [{r.lo:.2f}, {r.hi:.2f}]"


def epoch_story(epoch_dir: Path, eval_metrics: dict[str, Any] | None = None, eval_dir: Path | None = None
                ) -> list[str]:
    """Lines telling what happened in ``epoch_dir`` (missing files are skipped, never an error)."""
    lines: list[str] = []
    roll = em_by_qid(epoch_dir / art.ROLLOUT)
    clusters = _load(epoch_dir / art.CLUSTERS) or []
    failures = _load(epoch_dir / art.FAILURES) or []
    lines.append(f"Failures found: {len(failures)} failure patterns"
                 + (f" in {sum(1 for v in roll.values() if not v)} failed of {len(roll)} episodes" if roll else "")
                 + f"; {len(clusters)} cluster(s) to repair")
    for c in clusters[:5]:
        lines.append(f"  - {c.get('category')}: {c.get('support')} episode(s) — "
                     f"{truncate(str((c.get('representative') or {}).get('abstraction', '')), 100)}")
    cands = _load(epoch_dir / art.CANDIDATES) or []
    val = {r.get("skill_id"): r for r in (_load(epoch_dir / art.VALIDATION) or [])}
    rev = {r.get("skill_id"): r for r in (_load(epoch_dir / art.REVIEWS) or [])}
    gate = {r.get("skill_id"): r for r in (_load(epoch_dir / art.GATE) or [])}
    adm = {r.get("skill_id"): r for r in (_load(epoch_dir / art.ADMISSION) or [])}
    anchors = {r.get("skill_id"): r for r in (_load(epoch_dir / art.ANCHORS) or [])}
    base_em = em_by_qid(epoch_dir / art.VAL_BASELINE)
    lines.append(f"Proposals: {len(cands)}")
    for c in cands:
        sid = c.get("skill_id")
        fmt = c.get("proposal_format", "code")
        lines.append(f"  * {sid} ({fmt}) for {c.get('cluster_category')}")
        reply = str(c.get("raw_reply") or "").strip()
        lines += [f"      | {truncate(x, 110)}" for x in reply.splitlines()[:8]] or ["      | (empty reply)"]
        if c.get("parse_error"):
            lines.append(f"      refused at parse: {truncate(c['parse_error'], 140)}")
        if c.get("declaration"):
            lines.append(f"      declared: {truncate(json.dumps(c['declaration']), 160)}")
        if sid in val:
            v = val[sid]
            lines.append(f"      Phase D: Q_exec {float(v.get('q_exec', 0)):.2f} ({'passed' if v.get('passed') else 'failed'})")
        if sid in rev:
            r = rev[sid]
            lines.append(f"      review: {r.get('decision')} Q_skill {float(r.get('q_skill', 0)):.3f} "
                         f"({r.get('reviewer')}; trigger hit rate {r.get('trigger_hit_rate')})")
            if r.get("fallback_reason"):  # a teacher was asked but its verdict was not a review, or it was down
                lines.append(f"      {truncate(r['fallback_reason'], 200)}")
        if sid in gate:
            g = gate[sid]
            n = int(g.get("n") or 0)
            line = (f"      val gate: EM {_rate(g.get('base_em'), n)} -> {_rate(g.get('em_val'), n)} (n={n}), "
                    f"dEM {g.get('delta_em')}")
            after = em_by_qid(next((epoch_dir / art.VAL_RUNS).glob(f"val*{sid}.jsonl"), Path("-")))
            common = sorted(set(base_em) & set(after))
            if common:
                line += f", paired {paired_difference([base_em[q] for q in common], [after[q] for q in common])}"
            lines.append(line + (f" — {g['error']}" if g.get("error") else ""))
        if sid in anchors:
            a = anchors[sid]
            d = a.get("delta") or {}
            lines.append(f"      anchors: {a.get('passes_before')} -> {a.get('passes_after')} of {a.get('n')} pass, "
                         f"paired {float(d.get('mean') or 0):+.3f} {d.get('ci95')}"
                         + (f"; broken: {', '.join(a['broken'][:10])}" if a.get("broken") else "")
                         + (f" — {a['error']}" if a.get("error") else ""))
        if sid in adm:
            a = adm[sid]
            verdict = f"admitted (version {a.get('version')}; {a.get('reason', '')})" if a.get("admitted") else \
                f"rejected: {truncate('; '.join(a.get('reasons') or [str(a.get('reason', ''))]), 160)}"
            lines.append(f"      decision: {verdict}")
    lines += _spend_lines(_load(epoch_dir / art.summary_file(art.BUDGET)) or {})
    if eval_metrics:
        lines.append("Test split:")
        for label, m in eval_metrics.items():
            n = int(m.get("n") or 0)
            same = f" (nothing admitted: the {m['same_library_as']} episodes)" if m.get("same_library_as") else ""
            lines.append(f"  {label:22s} EM {_rate(m.get('em'), n)} (n={n}){same}")
        before = next((k for k in eval_metrics if k.endswith("_before")), None)
        if before and eval_dir is not None:
            after_label = before.removesuffix("_before")
            b = em_by_qid(next(eval_dir.rglob(f"{before}.jsonl"), Path("-")))
            a = em_by_qid(next(eval_dir.rglob(f"{after_label}.jsonl"), Path("-")))
            common = sorted(set(a) & set(b))
            if common:
                lines.append(f"  PF agent after - before (same questions): "
                             f"{paired_difference([b[q] for q in common], [a[q] for q in common])}")
        if "react" in eval_metrics and eval_dir is not None:
            lines += _over_react(eval_metrics, eval_dir)
    return lines


def _spend_lines(budget: dict[str, Any]) -> list[str]:
    """What the epoch spent (``hasp.evolve.budget``), why Phase C wrote fewer proposals than asked, and the
    budget's stop line."""
    total = budget.get("total")
    if not total:
        return []
    cost = f", cost {total['cost']:.4f}" if "cost" in total else ""
    lines = [f"Spend: {total.get('tokens', 0)} tokens, {total.get('calls', 0)} calls, "
             f"{float(total.get('wall_s', 0)):.1f} s{cost}"]
    short = ((budget.get("proposals") or {}).get("short") or {}).get("line")
    if short:
        lines.append(f"  proposals: {short}")
    if budget.get("stopped"):
        lines.append(f"  stopped: {budget['stopped']}")
    return lines


def _over_react(eval_metrics: dict[str, Any], eval_dir: Path) -> list[str]:
    """Each PF arm's paired EM gain over ReAct on the questions both answered, and, when the interval
    holds 0, the plain statement that this run shows no gain."""
    react = em_by_qid(next(eval_dir.rglob("react.jsonl"), Path("-")))
    out = []
    for label in eval_metrics:
        if label == "react" or eval_metrics[label].get("same_library_as"):
            continue
        arm = em_by_qid(next(eval_dir.rglob(f"{label}.jsonl"), Path("-")))
        common = sorted(set(react) & set(arm))
        if not common:
            continue
        d = paired_difference([react[q] for q in common], [arm[q] for q in common])
        verdict = " — no gain over ReAct shown at this n (the interval holds 0)" if d.lo <= 0.0 <= d.hi else ""
        out.append(f"  {label} - ReAct (same questions): {d}{verdict}")
    return out


def _num(v: Any) -> float | None:
    return round(float(v), 4) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def decision_rows(epoch_dir: Path) -> list[dict[str, Any]]:
    """One row per proposed candidate, the same facts as ``epoch_story`` in columns: the cluster it
    was written for, Phase D's Q_exec, the review, the val gate's EM before and after, and the
    admission decision with its reason. A phase that did not run leaves its cells empty (None)."""
    val = {r.get("skill_id"): r for r in (_load(epoch_dir / art.VALIDATION) or [])}
    rev = {r.get("skill_id"): r for r in (_load(epoch_dir / art.REVIEWS) or [])}
    gate = {r.get("skill_id"): r for r in (_load(epoch_dir / art.GATE) or [])}
    adm = {r.get("skill_id"): r for r in (_load(epoch_dir / art.ADMISSION) or [])}
    anchors = {r.get("skill_id"): r for r in (_load(epoch_dir / art.ANCHORS) or [])}
    rows = []
    for c in _load(epoch_dir / art.CANDIDATES) or []:
        sid = c.get("skill_id")
        v, r, g, a = val.get(sid, {}), rev.get(sid, {}), gate.get(sid, {}), adm.get(sid)
        if a is None:
            decision, reason = "not decided", str(c.get("parse_error") or "")
        elif a.get("admitted"):
            decision, reason = f"admitted v{a.get('version')}", str(a.get("reason", ""))
        else:
            decision, reason = "rejected", "; ".join(a.get("reasons") or [str(a.get("reason", ""))])
        rows.append({"name": str(sid), "cluster": str(c.get("cluster_category", "")),
                     "format": str(c.get("proposal_format", "code")),
                     "q_exec": _num(v.get("q_exec")),
                     "review": f"{r.get('decision')} (Q_skill {float(r.get('q_skill', 0)):.3f})" if r else None,
                     "val_em_before": _num(g.get("base_em")), "val_em_after": _num(g.get("em_val")),
                     "val_n": g.get("n"), "decision": decision, "reason": truncate(reason, 300)})
    return rows
