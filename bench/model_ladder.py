"""The model ladder: each embedded policy with and without an embedded teacher, on every benchmark tier.

Why: the embedded policy bounds every effect this project can show, and the two embedded models differ
(SmolLM2-135M-Instruct reads worse, Gemma-3-270M base follows a format worse). Defaults are chosen from
this table, not assumed: policy in ``--policy`` x teacher in ``--teacher`` x the agents react, pf and (with
a teacher) pf_teacher, on benchmark v1 one-hop, v2 seen and held-out templates, and the real HotpotQA,
2Wiki and MuSiQue samples; EM, F1, paired gains over react, the extractor ceiling beside each column
(``bench/main_table.py`` renders it), and seconds per agent step per cell.

One command, resumable: each (policy, teacher) cell set is a ``hasp eval`` into its own folder under
``--out``; a folder whose ``metrics.json`` holds every dataset and variant is not run again, and an
interrupted one resumes from its episode journals (``hasp eval`` does, for the same code).

    python bench/model_ladder.py --out /tmp/ladder --limit 30
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import main_table  # noqa: E402 - bench/ is the script directory

SHARED = ROOT.parent / "shared" / "data"
REAL = {"hotpotqa": ("HotpotQA", "hotpotqa/hotpot_dev_distractor_sample_a.jsonl"),
        "2wiki": ("2Wiki", "2wiki/2wiki_dev_sample.jsonl"),
        "musique": ("MuSiQue", "musique/musique_ans_dev_sample.jsonl")}


def hasp(*args: str, env: dict[str, str] | None = None) -> None:
    cmd = [str(Path(sys.executable).with_name("hasp")), *args]
    print("+ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT, env=env)


def write_params(path: Path, base: Path, overrides: dict[str, Any]) -> Path:
    """``base`` with ``overrides`` (``section.key``) applied and validated, as a params file."""
    from hasp.config import load_params

    p = load_params(base, overrides)
    path.write_text(yaml.safe_dump(p.model_dump(mode="json"), sort_keys=False))
    return path


def data_sets(out: Path, base: Path, n_test: int) -> tuple[Path, Path]:
    """The generated benchmarks: v1 one-hop and v2 (one- and two-hop, seen and held-out templates)."""
    v1, v2 = out / "data-v1", out / "data-v2"
    if not (v1 / "test.jsonl").is_file():
        hasp("data", "prepare", "--out", str(v1), "--params", str(write_params(
            out / "params-data-v1.yaml", base, {"data.version": 1, "data.hop_weights": {1: 1.0},
                                               "data.n_questions": max(60, 2 * n_test),
                                               "data.fractions": [0.25, 0.25, 0.5]})))
    if not (v2 / "test.jsonl").is_file():
        hasp("data", "prepare", "--out", str(v2), "--params", str(write_params(
            out / "params-data-v2.yaml", base, {"data.version": 2, "data.hop_weights": {1: 0.7, 2: 0.3},
                                               "data.n_questions": max(60, 2 * n_test),
                                               "data.fractions": [0.25, 0.25, 0.5]})))
    return v1, v2


def seconds_per_step(folder: Path) -> dict[str, float]:
    """``dataset/variant -> seconds per agent step`` of one evaluation (episode wall over its steps)."""
    out = {}
    for ds, cells in json.loads((folder / "metrics.json").read_text()).items():
        for v, c in (cells or {}).items() if isinstance(cells, dict) else ():
            if isinstance(c, dict) and c.get("n") and c.get("mean_steps"):
                out[f"{ds}/{v}"] = float(c.get("wall_s_sum", 0.0)) / (c["mean_steps"] * c["n"])
    return out


def finished(folder: Path, n_datasets: int, variants: list[str]) -> bool:
    """Whether ``folder``'s evaluation holds every dataset with every variant: ``hasp eval`` rewrites
    ``metrics.json`` after each cell, so its presence alone marks an interrupted run as done."""
    try:
        m = json.loads((folder / "metrics.json").read_text())
    except (OSError, ValueError):
        return False
    done = [ds for ds, cells in m.items() if isinstance(cells, dict) and all(isinstance(cells.get(v), dict)
                                                                           for v in variants)]
    return len(done) >= n_datasets


def add_configuration_args(ap: argparse.ArgumentParser) -> None:
    """The ladder's configuration options (shared with ``bench/ladder_epochs.py``)."""
    ap.add_argument("--params", type=Path, default=ROOT / "params.yaml")
    ap.add_argument("--policy", action="append", default=None, help="embedded policy (repeatable; default both)")
    ap.add_argument("--teacher", action="append", default=None,
                    help="embedded teacher or 'none' (repeatable; default none and gemma3-270m)")


def configurations(a: argparse.Namespace) -> list[tuple[str, str, str]]:
    """``(label, policy, teacher)`` of every configuration asked for, in the ladder's order."""
    return [(pol if t == "none" else f"{pol}+{t}", pol, t) for pol in a.policy or ["smollm2-135m", "gemma3-270m"]
            for t in a.teacher or ["none", "gemma3-270m"]]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder of the evaluations (resumable)")
    add_configuration_args(ap)
    ap.add_argument("--limit", type=int, default=30, help="questions per dataset")
    ap.add_argument("--library", type=Path, default=ROOT / "hasp" / "skills" / "search")
    ap.add_argument("--port", type=int, default=8981)
    ap.add_argument("--ran", action="append", default=[], help="what else ran on the machine (printed)")
    ap.add_argument("--render-only", action="store_true",
                    help="run nothing: tabulate the configurations whose evaluation finished, name the others")
    ap.add_argument("--section", default="Model ladder: embedded policies and teachers across benchmark tiers",
                    help="bench/RESULTS.md section this run's table replaces")
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args(argv)
    policies = a.policy or ["smollm2-135m", "gemma3-270m"]
    teachers = a.teacher or ["none", "gemma3-270m"]  # as configurations() reads them, for the printed command
    a.out.mkdir(parents=True, exist_ok=True)
    v1, v2 = data_sets(a.out, a.params, a.limit)
    datasets = [f"generated:{v1}", f"generated:{v2}"] + [f"{k}:{SHARED / f}" for k, (_, f) in REAL.items()]
    env = {**os.environ, "HASP_LLM_THREADS": os.environ.get("HASP_LLM_THREADS", "2")}
    evals: list[tuple[str, Path]] = []
    gains: list[tuple[str, str]] = []
    not_run: list[str] = []
    for label, pol, t in configurations(a):
        folder = a.out / label
        variants = "react,pf" if t == "none" else "pf_teacher"
        done = finished(folder, len(datasets), variants.split(","))
        if not done and a.render_only:
            not_run.append(label)
            continue
        if not done:  # an interrupted evaluation resumes from its episode journals
            over: dict[str, Any] = {"llm.embedded": pol, "llm.port": a.port, "tracking.experiment": "hasp-ladder"}
            if t != "none":
                over |= {"teacher.embedded": t, "teacher.port": a.port + 1}
            params = write_params(a.out / f"params-{label}.yaml", a.params, over)
            hasp("eval", "--params", str(params), "--variants", variants, "--library", str(a.library),
                 "--limit", str(a.limit), "--out", str(folder), "--no-traces", "--no-progress",
                 "--run-name", f"ladder {label}", *[x for d in datasets for x in ("--dataset", d)], env=env)
        evals.append((label, folder))
        if t == "none":
            gains.append((f"{pol}/pf", f"{pol}/react"))
        else:
            gains += [(f"{label}/pf_teacher", f"{pol}/react"), (f"{label}/pf_teacher", f"{pol}/pf")]
    if not evals:
        print(f"no configuration has finished its evaluation under {a.out} (not run: {', '.join(not_run)})")
        return 1
    speed = []
    for label, folder in evals:
        speed += [f"{label}/{k} {v:.2f}" for k, v in sorted(seconds_per_step(folder).items())]
    ds_v1, ds_v2 = f"generated-{v1.name}", f"generated-{v2.name}"
    args = [x for label, f in evals for x in ("--eval", f"{label}={f}")]
    args += ["--column", f"v1 one-hop={ds_v1}", "--column", f"v2 seen={ds_v2}:seen",
             "--column", f"v2 held-out={ds_v2}:unseen"]
    args += [x for k, (title, f) in REAL.items() for x in ("--column", f"{title}={k}-{Path(f).stem}")]
    args += [x for after, before in gains for x in ("--gain", f"{after}={before}")]
    args += ["--split", f"{ds_v2}={v2 / 'test.jsonl'}"]
    args += ["--ran", f"python bench/model_ladder.py --out {a.out} --limit {a.limit} "
             + " ".join(f"--policy {p}" for p in policies) + " " + " ".join(f"--teacher {t}" for t in teachers)]
    args += ["--ran", f"each cell: hasp eval --limit {a.limit} on llama.cpp with the seed library, "
             "llm.constrained as in params.yaml, HASP_LLM_THREADS " + env["HASP_LLM_THREADS"]]
    args += ["--ran", "seconds per agent step (episode wall / steps): " + "; ".join(speed)]
    if not_run:
        args += ["--ran", "not run (no finished evaluation): " + ", ".join(not_run)]
    args += [x for r in a.ran for x in ("--ran", r)]
    args += ["--section", a.section]
    return main_table.main(args + (["--no-write"] if a.no_write else []))


if __name__ == "__main__":
    raise SystemExit(main())
