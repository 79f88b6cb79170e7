"""Two evaluation cells on the same questions, compared question by question.

Why: whether a trained policy beats the untrained agent is a question about the same test items
under two policies. Two independent rates with their own intervals overlap long after the paired
difference (after − before per question, bootstrapped) has excluded zero, and a gain reported
without its interval is not a result. Episodes that failed for infrastructure reasons are left out
of both sides, as in every other evaluation metric.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from hasp.stats import paired_difference


def em_by_qid(path: Path) -> dict[str, float]:
    """``{question id: EM}`` of one trajectory file; a missing or unreadable file gives ``{}``
    (a report skips what is not there), an episode that ended in an error is left out."""
    out: dict[str, float] = {}
    try:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                d = json.loads(line)
                if d.get("terminated") != "error":
                    out[str(d.get("qid"))] = float(d.get("em") or 0.0)
    except (OSError, ValueError):
        return {}
    return out


def paired_gain(before: Mapping[str, float], after: Mapping[str, float],
                hops_of: Mapping[str, int] | None = None,
                template_of: Mapping[str, bool] | None = None) -> dict[str, Any]:
    """EM after − before over the questions both sides scored: ``{"mean", "n", "ci95", "by_hops"}``,
    ``by_hops`` holding the same per hop count (when ``hops_of`` knows the questions), and with
    ``template_of`` (benchmark v2: question id -> template seen in training) ``by_template`` per
    seen / unseen template."""
    common = sorted(set(before) & set(after))
    out: dict[str, Any] = paired_difference([before[q] for q in common], [after[q] for q in common]).to_dict()

    def by(group_of: Mapping[str, Any]) -> dict[str, Any]:
        groups: dict[Any, list[str]] = {}
        for q in common:
            if group_of.get(q) is not None:
                groups.setdefault(group_of[q], []).append(q)
        return {str(g): paired_difference([before[q] for q in qs], [after[q] for q in qs]).to_dict()
                for g, qs in sorted(groups.items())}

    out["by_hops"] = by({q: int(h) for q, h in (hops_of or {}).items() if h})
    if template_of:
        out["by_template"] = by({q: "seen" if s else "unseen" for q, s in template_of.items()})
    return out


def cell_file(eval_dir: Path, label: str) -> Path:
    """The trajectory file of arm ``label`` under an evaluation folder (``<dataset>/<label>.jsonl``)."""
    return next(Path(eval_dir).rglob(f"{label}.jsonl"), Path(eval_dir) / f"{label}.jsonl")


def gains_over(base_dir: Path, base_labels: list[str], eval_dir: Path, labels: list[str],
               hops_of: Mapping[str, int] | None = None,
               template_of: Mapping[str, bool] | None = None) -> dict[str, dict[str, Any]]:
    """Every arm of ``eval_dir`` against every arm of ``base_dir``: ``{"<arm> - <base arm>": gain}``.

    For the post-training grid: the trained policy with PFs against the untrained PF agent (the
    recipe's gain), without PFs against it (has the policy internalized the repairs?), and each
    against the untrained arm of its own kind."""
    base = {b: em_by_qid(cell_file(base_dir, b)) for b in base_labels}
    out: dict[str, dict[str, Any]] = {}
    for a in labels:
        after = em_by_qid(cell_file(eval_dir, a))
        for b, before in base.items():
            if after and before:
                out[f"{a} - {b}"] = paired_gain(before, after, hops_of, template_of)
    return out


#: label suffix of a closed-loop preset's extra arm: the trained policy with the library the grid started
#: from (``trained_pf`` runs the library evolution left), so the gain splits into training and library
START_LIBRARY = "_start_library"


def library_cells(eval_dir: Path, labels: list[str]) -> Iterator[tuple[str, str, dict[str, float], dict[str, float]]]:
    """``(arm with the evolved library, the same policy with the starting library, EM of the latter,
    EM of the former)`` among one preset's arms: their paired difference is what the evolved library
    adds to the trained policy."""
    for b in labels:
        a = b[: -len(START_LIBRARY)]
        if b.endswith(START_LIBRARY) and a in labels:
            before, after = em_by_qid(cell_file(eval_dir, b)), em_by_qid(cell_file(eval_dir, a))
            if before and after:
                yield a, b, before, after


def start_cells(grid_dir: Path, experiment: Mapping[str, Any], eval_dir: Path, labels: list[str]
                ) -> Iterator[tuple[str, str, dict[str, float], dict[str, float]]]:
    """``(arm, "<start preset>/<arm>", EM of the start preset's arm, EM of this preset's arm)`` for a preset
    that trains on from another preset's final checkpoint (GRPO and SAGE from E2): their paired difference
    is what the later recipe adds to the checkpoint it started from."""
    start = (experiment.get("preset") or {}).get("start")
    for a in labels if start else []:
        before, after = em_by_qid(cell_file(Path(grid_dir) / start / "eval", a)), em_by_qid(cell_file(eval_dir, a))
        if before and after:
            yield a, f"{start}/{a}", before, after


def add_grid_gains(grid_dir: Path, grid: Mapping[str, Any], hops_of: Mapping[str, int] | None = None,
                   template_of: Mapping[str, bool] | None = None) -> None:
    """Set ``gains`` on each preset of a grid that trained (``gains_over`` against the untrained arms,
    plus the evolved library against the starting one for the same trained policy, and a preset started from
    another preset's checkpoint against that preset's arms), read from the
    trajectory files under ``grid_dir`` so a cached or earlier grid is reported the same."""
    untrained = list(grid.get("untrained") or {})
    for name, e in (grid.get("experiments") or {}).items():
        if "error" not in e:
            ev, labels = Path(grid_dir) / name / "eval", list(e.get("eval") or {})
            e["gains"] = gains_over(Path(grid_dir) / "eval_untrained", untrained, ev, labels, hops_of, template_of)
            for a, b, before, after in [*library_cells(ev, labels), *start_cells(grid_dir, e, ev, labels)]:
                e["gains"][f"{a} - {b}"] = paired_gain(before, after, hops_of, template_of)


def seed_mean(cells: list[Mapping[str, float]]) -> dict[str, float]:
    """Per question, the mean EM over seeds, on the questions every seed scored."""
    common = set.intersection(*(set(c) for c in cells)) if cells else set()
    return {q: sum(c[q] for c in cells) / len(cells) for q in common}


def gains_over_seeds(grid_dirs: list[Path], grids: list[Mapping[str, Any]],
                     hops_of: Mapping[str, int] | None = None,
                     template_of: Mapping[str, bool] | None = None) -> dict[str, dict[str, dict[str, Any]]]:
    """``{preset: {"<arm> - <base arm>": gain}}`` over the repeats of a grid with different seeds.

    Each side is first averaged over seeds per question, so the interval (bootstrap over questions)
    covers which questions were drawn, while the seeds' spread enters through the per-question means;
    a preset counts only where it trained in at least two of the grids. Each gain says its ``seeds``."""
    cells: dict[tuple[str, str, str], list[tuple[dict[str, float], dict[str, float]]]] = {}
    for d, grid in zip(grid_dirs, grids):
        base = {b: em_by_qid(cell_file(Path(d) / "eval_untrained", b)) for b in grid.get("untrained") or {}}
        for name, e in (grid.get("experiments") or {}).items():
            if "error" in e:
                continue
            ev, labels = Path(d) / name / "eval", list(e.get("eval") or {})
            for a in labels:
                after = em_by_qid(cell_file(ev, a))
                for b, before in base.items():
                    if after and before:
                        cells.setdefault((name, a, b), []).append((before, after))
            for a, b, before, after in [*library_cells(ev, labels), *start_cells(d, e, ev, labels)]:
                cells.setdefault((name, a, b), []).append((before, after))
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for (name, a, b), pairs in cells.items():
        if len(pairs) >= 2:
            g = paired_gain(seed_mean([p[0] for p in pairs]), seed_mean([p[1] for p in pairs]), hops_of, template_of)
            out.setdefault(name, {})[f"{a} - {b}"] = {**g, "seeds": len(pairs)}
    return out
