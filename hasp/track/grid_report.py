"""The post-training grid in MLflow: one parent run per grid, one child run per preset.

A child carries the tag ``hasp.experiment`` (the preset's name as the grid ran it), the preset's
loop and recipe, its resolved train knobs as params (and in the tag ``hasp.replaced_knobs`` the params-file
values the preset or ``train.overrides`` replaced), the per-step training curves of every phase
and round on one step axis (with ``phase`` and ``round`` logged beside them so the V2 phase
boundaries show as steps in those curves, and listed in the tag ``hasp.phase_boundaries``), the
evaluation of the trained policy with and without PFs (per hop count too), and the final adapter
as artifacts. The comparison table puts beside the arms the ceiling of the vocabulary answer
extractor on the test questions' gold support (an oracle row) and, per PF arm, how many correct
answers a vocabulary rewrite wrote. The parent holds the untrained agent's evaluation, the comparison table (markdown
and JSON) and a training-curves plot. Everything is read from the files the grid wrote, so a
cached grid logs the same runs it would have logged live.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hasp.config import Params
from hasp.provenance import Provenance, provenance as collect_provenance
from hasp.track.mlflow_run import dated_child_run, flatten, log_adapter, log_json_artifact, log_numeric, start_run

#: the trainer log keys that are not curves
NOT_CURVES = {"step", "epoch"}
#: cell-summary keys written by the evaluation (``hasp.eval.ceiling``; read here by name, as this
#: package sits below ``hasp.eval``)
CEILING_KEY = "extractor_ceiling"
VIA_REWRITE_KEY = "correct_via_vocabulary_rewrite"
ORACLE_EXPERIMENT, ORACLE_ARM = "oracle", "extractor | gold support"


def curves(experiment: Mapping[str, Any]) -> tuple[list[tuple[int, dict[str, float]]], list[int]]:
    """``[(global step, metrics)]`` over every phase and round of one preset, and the first global
    step of each phase. Each trainer counts from 1, so later trainers are shifted past the earlier ones."""
    points: list[tuple[int, dict[str, float]]] = []
    starts: list[int] = []
    offset = 0
    for ph in experiment.get("phases", []):
        starts.append(offset + 1)
        for r, path in enumerate(ph.get("train", {}).get("train_summaries", [])):
            p = Path(path)
            if not p.is_file():
                continue
            hist = json.loads(p.read_text(encoding="utf-8")).get("history", [])
            last = 0
            for h in hist:
                step = int(h.get("step", 0))
                last = max(last, step)
                m = {k: float(v) for k, v in h.items() if k not in NOT_CURVES and isinstance(v, (int, float))}
                points.append((offset + step, {**m, "phase": float(ph.get("phase", 0)), "round": float(r)}))
            offset += last
    return points, starts


def comparison_rows(grid: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per (policy, PFs on/off): the untrained agent, then each preset's trained policy, then
    the extractor's ceiling on gold support (when the evaluation recorded one)."""
    rows = []
    ceiling: Mapping[str, Any] | None = None

    def add(experiment: str, label: str, s: Mapping[str, Any], wall: float | None) -> None:
        nonlocal ceiling
        rows.append({"experiment": experiment, "arm": label, "n": s.get("n"), "n_failed": s.get("n_failed", 0),
                     "em": s.get("em"), "f1": s.get("f1"), "em_by_hops": s.get("em_by_hops", {}),
                     "em_by_template": s.get("em_by_template", {}), "wall_s": wall,
                     "via_rewrite": s.get(VIA_REWRITE_KEY)})
        if ceiling is None and isinstance(s.get(CEILING_KEY), Mapping):
            ceiling = s[CEILING_KEY]

    for label, s in (grid.get("untrained") or {}).items():
        add("untrained", label, s, None)
    for name, e in (grid.get("experiments") or {}).items():
        if e.get("error"):
            rows.append({"experiment": name, "arm": f"failed: {e['error']}"[:200], "n": None, "n_failed": None,
                         "em": None, "f1": None, "em_by_hops": {}, "wall_s": None})
        for label, s in (e.get("eval") or {}).items():
            add(name, label, s, e.get("wall_s"))
    if ceiling is not None:
        rows.append(oracle_row(ceiling))
    return rows


def oracle_row(ceiling: Mapping[str, Any]) -> dict[str, Any]:
    """The comparison row of the extractor on gold support: n, EM with its 95 % interval, F1."""
    missing = int(ceiling.get("no_support") or 0)
    arm = ORACLE_ARM + (f" ({missing} without support)" if missing else "")
    n = ceiling.get("n") or 0
    return {"experiment": ORACLE_EXPERIMENT, "arm": arm, "n": n, "n_failed": None,
            "em": ceiling.get("em") if n else None, "em_ci95": ceiling.get("em_ci95"),
            "f1": ceiling.get("f1") if n else None, "em_by_hops": {}, "wall_s": None, "via_rewrite": None,
            "em_by_template": {g: {"mean": c.get("em"), "ci95": c.get("em_ci95"), "n": c.get("n")}
                               for g, c in (ceiling.get("by_template") or {}).items() if c.get("n")}}


def _ci(h: Mapping[str, Any]) -> tuple[float, float]:
    ci = h.get("ci95") or (0.0, 0.0)
    return float(ci[0]), float(ci[1])


def table_markdown(rows: list[dict[str, Any]]) -> str:
    def hops(h: Mapping[str, Any], unit: str = "-hop") -> str:
        return "; ".join(f"{k}{unit} {v.get('mean', 0):.2f} [{_ci(v)[0]:.2f}, {_ci(v)[1]:.2f}] n={v.get('n')}"
                         for k, v in sorted(h.items())) or "-"

    def em(r: Mapping[str, Any]) -> str:
        if not isinstance(r["em"], (int, float)):
            return "-"
        ci = r.get("em_ci95")
        return f"{r['em']:.3f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")

    def via(r: Mapping[str, Any]) -> str:
        v = r.get("via_rewrite")
        return f"{v['k']}/{v['n']}" if isinstance(v, Mapping) else "-"

    lines = ["| experiment | arm | n | failed | EM | F1 | EM per hop count (95% CI) | EM seen / unseen templates "
             "(95% CI) | correct via vocab rewrite | wall s |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        f1 = f"{r['f1']:.3f}" if isinstance(r["f1"], (int, float)) else "-"
        wall = f"{r['wall_s']:.0f}" if isinstance(r["wall_s"], (int, float)) else "-"
        failed = "-" if r["n_failed"] is None else r["n_failed"]
        arm = str(r["arm"]).replace("|", "\\|")  # a pipe in a label would split its Markdown cell
        lines.append(f"| {r['experiment']} | {arm} | {r['n']} | {failed} | {em(r)} | {f1} | "
                     f"{hops(r['em_by_hops'])} | {hops(r.get('em_by_template') or {}, '')} | {via(r)} | {wall} |")
    return "\n".join(lines) + "\n"


def gains_markdown(grid: Mapping[str, Any]) -> str:
    """Each preset's trained arms minus the untrained arms (and, for V2, the evolved library minus the
    starting one under the trained policy; for GRPO and SAGE, each arm minus the same arm of the preset
    whose checkpoint they start from), question by question on the test split (paired bootstrap
    95 % interval), overall, per hop count and, on benchmark v2, per seen / unseen template."""
    def groups(by: Mapping[str, Any], unit: str) -> str:
        return "; ".join(f"{k}{unit} {v.get('mean', 0):+.3f} [{_ci(v)[0]:+.3f}, {_ci(v)[1]:+.3f}] n={v.get('n')}"
                         for k, v in by.items()) or "-"

    lines = ["| experiment | comparison | ΔEM (95% CI) | n | per hop count | seen / unseen templates |",
             "|---|---|---|---|---|---|"]
    for name, e in (grid.get("experiments") or {}).items():
        for pair, g in (e.get("gains") or {}).items():
            lo, hi = _ci(g)
            lines.append(f"| {name} | {pair} | {g.get('mean', 0):+.3f} [{lo:+.3f}, {hi:+.3f}] | {g.get('n')} | "
                         f"{groups(g.get('by_hops') or {}, '-hop')} | {groups(g.get('by_template') or {}, '')} |")
    return "\n".join(lines) + "\n"


def _log_gains(mlflow: Any, gains: Mapping[str, Mapping[str, Any]]) -> None:
    for pair, g in gains.items():
        lo, hi = _ci(g)
        log_numeric(mlflow, {"gain": {pair.replace(" - ", "_vs_"): {"mean": g.get("mean", 0.0), "n": g.get("n", 0),
                                                                     "lo": lo, "hi": hi}}})


def _curves_png(per_experiment: Mapping[str, list[tuple[int, dict[str, float]]]], path: Path) -> bool:
    """Training loss of every preset on one plot; False (no file) when no preset has a loss curve."""
    if not any("loss" in m for pts in per_experiment.values() for _, m in pts):
        return False
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, pts in per_experiment.items():
        xs = [s for s, m in pts if "loss" in m]
        if xs:
            ax.plot(xs, [m["loss"] for _, m in pts if "loss" in m], label=name)
    ax.set_xlabel("optimizer step (all phases and rounds)")
    ax.set_ylabel("training loss")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def _log_eval(mlflow: Any, summaries: Mapping[str, Mapping[str, Any]]) -> None:
    for label, s in summaries.items():
        log_numeric(mlflow, {label: {k: v for k, v in s.items() if k in ("em", "f1", "n", "n_failed", "answered_rate",
                                                                         "pf_fires_total", "mean_steps")}})
        for key, prefix in (("em_by_hops", "em_hops"), ("em_by_template", "em_template")):
            for group, h in (s.get(key) or {}).items():
                lo, hi = _ci(h)
                log_numeric(mlflow, {f"{label}.{prefix}_{group}": {"mean": h.get("mean", 0.0), "n": h.get("n", 0),
                                                                   "lo": lo, "hi": hi}})


def log_grid(out_root: Path, params: Params, grid: Mapping[str, Any], *, run_name: str | None = None,
             spans: Mapping[str, tuple[float, float]] | None = None,
             provenance: Provenance | None = None) -> dict[str, Any]:
    """Log ``grid`` (what the experiment flow returned) as a parent run with a child per preset;
    returns ``{"parent_run_id": ..., "child_run_ids": {preset: run id}}``.

    ``spans`` = ``{"grid" | preset: (start, end)}`` in seconds since the epoch: when the grid and each
    preset ran in this command, so the runs' durations in the UI are theirs (a preset served from the
    cache took seconds; its ``wall_s`` metric keeps the time of the run that did the work).
    ``provenance`` (the grid's base model, data, library, params; default: code, environment and
    params) tags the parent and every child."""
    import tempfile

    names = list((grid.get("experiments") or {}).keys())
    name = run_name or f"grid-{'-'.join(names)}"
    children: dict[str, str] = {}
    all_curves: dict[str, list[tuple[int, dict[str, float]]]] = {}
    spans = spans or {}
    grid_span = spans.get("grid")
    prov = provenance if provenance is not None else collect_provenance(params=params)
    with start_run(params.tracking.experiment, name, tags={"hasp.grid": ",".join(names)},
                   start_time=grid_span[0] if grid_span else None, provenance=prov) as mlflow:
        parent = mlflow.active_run().info.run_id
        mlflow.log_params({"presets": ",".join(names), "base_model": str(grid.get("base_model", ""))})
        _log_eval(mlflow, grid.get("untrained") or {})
        for e_name, e in (grid.get("experiments") or {}).items():
            preset = e.get("preset", {})
            loop = preset.get("loop", {})
            tags = {**prov.tags(), "hasp.experiment": e_name, "hasp.recipe": str(e.get("recipe")),
                    "hasp.loop": str(loop.get("kind")), "hasp.evolve_mode": str(loop.get("evolve_mode"))}
            if e.get("error"):
                tags["hasp.error"] = str(e["error"])[:4000]
            if e.get("replaced"):  # params-file values the preset (or train.overrides) replaced
                tags["hasp.replaced_knobs"] = "; ".join(f"{k}: {a} -> {b}" for k, (a, b) in
                                                        sorted(e["replaced"].items()))[:4000]
            with dated_child_run(mlflow, e_name, tags=tags, span=spans.get(e_name)) as child:
                children[e_name] = child.info.run_id
                mlflow.log_params({k: str(v)[:500] for k, v in flatten(e.get("train", {}), "train.").items()})
                mlflow.log_params({"loop.kind": loop.get("kind"), "loop.phases": loop.get("phases"),
                                   "loop.evolve_mode": loop.get("evolve_mode")})
                pts, starts = curves(e)
                all_curves[e_name] = pts
                for step, m in pts:
                    mlflow.log_metrics(m, step=step)
                mlflow.set_tag("hasp.phase_boundaries", ",".join(map(str, starts)))
                _log_eval(mlflow, e.get("eval") or {})
                _log_gains(mlflow, e.get("gains") or {})
                if isinstance(e.get("wall_s"), (int, float)):
                    mlflow.log_metric("wall_s", float(e["wall_s"]))
                for i, ph in enumerate(e.get("phases", [])):
                    ev = ph.get("evolve")
                    if ev:
                        log_numeric(mlflow, {"evolve": {k: v for k, v in ev.items() if k != "mode"}}, step=i)
                    # the phase's SFT/DPO rows (a recipe that samples its own has none): their count per
                    # target action type shows a set that never teaches an answer
                    log_numeric(mlflow, {"data": ph.get("build_data") or {}}, step=i)
                    skipped = (ph.get("train") or {}).get("skipped")
                    if skipped:  # a closed-loop phase that kept its start checkpoint says so in the UI
                        mlflow.set_tag(f"hasp.phase_{i}.train_skipped", str(skipped)[:5000])
                log_adapter(mlflow, Path(str(e.get("adapter_dir") or "-")))  # a failed preset has none
                log_json_artifact(mlflow, e, "experiment.json")
        rows = comparison_rows(grid)
        log_json_artifact(mlflow, rows, "comparison.json")
        with tempfile.TemporaryDirectory() as d:
            md = Path(d) / "comparison.md"
            md.write_text(table_markdown(rows) + "\n" + gains_markdown(grid), encoding="utf-8")
            mlflow.log_artifact(str(md))
            png = Path(d) / "training_curves.png"
            if _curves_png(all_curves, png):
                mlflow.log_artifact(str(png))
    return {"parent_run_id": parent, "child_run_ids": children}
