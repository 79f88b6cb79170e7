"""A grid preset run twice at a tiny scale: are the sampled rollouts, the trained adapters and the
metrics the same?

Why: a result a user cannot repeat is not one. Each run gets its own output folder, Prefect home and
MLflow store, so nothing is served from the first run's caches; the model is the embedded one on one
llama.cpp slot, one request at a time (greedy steps and seeded samples then depend on their prompt
alone; see ``hasp.episode.spec.Seeded``). What is compared: every ``metrics.json`` (timing keys left
out), every trajectory file's replies, observations and predictions, and the bytes of every trained
adapter's weights.

    python bench/reproducibility.py --preset E2_cpu --questions 12 --out /tmp/repro
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from results import Report  # noqa: E402 - bench/ is the script directory

REPORT = Report("A grid preset run twice at a tiny scale")
#: keys of a metrics file that measure time, not behaviour
TIMING = ("wall", "_s", "elapsed", "started", "finished", "time")


def tiny_params(out: Path, questions: int, train_steps: int, port: int) -> Path:
    p = yaml.safe_load((ROOT / "params.yaml").read_text())
    p["data"].update(n_questions=questions, hop_weights={1: 1.0})
    p["llm"].update(port=port, max_concurrency=1)
    p["llm"]["llamacpp"]["parallel"] = 1
    p["train"]["overrides"] = {"max_steps": train_steps, "max_length": 512}
    out.mkdir(parents=True, exist_ok=True)
    path = out / "params.yaml"
    path.write_text(yaml.safe_dump(p))
    return path


def run_once(preset: str, params: Path, out: Path) -> float:
    env = {**os.environ, "PREFECT_HOME": str(out / ".prefect"), "MLFLOW_TRACKING_URI": f"sqlite:///{out / 'mlflow.db'}",
           "PYTHONPATH": str(ROOT)}
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with open(out / "run.log", "w") as log:
        subprocess.run([sys.executable, "-m", "hasp.cli", "experiment", "run", preset, "--params", str(params),
                        "--out", str(out / "grid"), "--library", str(ROOT / "hasp" / "skills" / "search")],
                       env=env, cwd=out, stdout=log, stderr=subprocess.STDOUT, check=True)
    return time.perf_counter() - t0


def _untimed(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _untimed(v) for k, v in x.items() if not any(t in k for t in TIMING)}
    if isinstance(x, list):
        return [_untimed(v) for v in x]
    return x


def _behaviour(path: Path) -> list[Any]:
    """Replies, observations and predictions of a trajectory file, in order."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        t = json.loads(line)
        if isinstance(t, dict) and "steps" in t:
            out.append([(s.get("raw_output"), s.get("observation")) for s in t["steps"]] + [t.get("prediction")])
    return out


def compare(a: Path, b: Path) -> list[tuple[str, str, bool]]:
    """(kind, relative path, same) for every compared file of run ``a`` and its twin in run ``b``."""
    rows = []
    for f in sorted(a.rglob("*")):
        rel = f.relative_to(a)
        twin = b / rel
        if f.name == "metrics.json":
            same = twin.is_file() and _untimed(json.loads(f.read_text())) == _untimed(json.loads(twin.read_text()))
            rows.append(("metrics", str(rel), same))
        elif f.suffix == ".jsonl" and ("rollout" in f.name or any(x.startswith("eval") for x in rel.parts)):
            beh = _behaviour(f)
            if beh:
                rows.append(("trajectories", str(rel), twin.is_file() and beh == _behaviour(twin)))
        elif f.name == "adapter_model.safetensors":
            digest = hashlib.sha256(f.read_bytes()).hexdigest()
            rows.append(("adapter", str(rel),
                         twin.is_file() and hashlib.sha256(twin.read_bytes()).hexdigest() == digest))
    return rows


def distinct_samples(run: Path) -> tuple[int, int]:
    """(questions whose samples in a training round differ from each other, questions sampled more than
    once), over every round's rollout: seeded samples must still differ."""
    differ = multi = 0
    for f in sorted(run.rglob("rollout.jsonl")):
        if "train" not in f.parts:
            continue
        by_q: dict[str, list[Any]] = {}
        for line in f.read_text(encoding="utf-8").splitlines():
            t = json.loads(line)
            by_q.setdefault(str(t.get("qid")), []).append([s.get("raw_output") for s in t.get("steps", [])])
        for samples in by_q.values():
            if len(samples) > 1:
                multi += 1
                differ += any(x != samples[0] for x in samples[1:])
    return differ, multi


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="E2_cpu")
    ap.add_argument("--questions", type=int, default=12, help="questions generated (split train/val/test)")
    ap.add_argument("--train-steps", type=int, default=2, help="LoRA steps per training round")
    ap.add_argument("--port", type=int, default=8890)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--reuse", action="store_true", help="compare the runs already in --out (no new runs)")
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args(argv)
    params = tiny_params(a.out, a.questions, a.train_steps, a.port)
    walls: dict[str, float | None] = {}
    for name in ("first", "second"):
        done = (a.out / name / "grid" / "metrics.json").is_file()
        walls[name] = None if a.reuse and done else run_once(a.preset, params, a.out / name)
    rows = compare(a.out / "first" / "grid", a.out / "second" / "grid")
    wall = " and ".join("(run before)" if w is None else f"{w:.0f} s" for w in walls.values())
    REPORT.line(f"{a.preset} twice, each from scratch (own output folder, Prefect home, MLflow store): "
                f"{a.questions} generated one-hop questions, {a.train_steps} LoRA steps per round, one llama.cpp "
                f"slot, one request at a time; walls {wall}")
    differ, multi = distinct_samples(a.out / "first" / "grid")
    REPORT.line(f"sampled questions whose samples in a round differ from each other: {differ}/{multi} "
                "(each sample has a seed of its own)")
    for kind in ("metrics", "trajectories", "adapter"):
        some = [r for r in rows if r[0] == kind]
        REPORT.line(f"{kind:13s} identical {sum(r[2] for r in some)}/{len(some)}")
        for _, rel, same in some:
            if not same:
                REPORT.line(f"  differs: {rel}")
    if not a.no_write:
        REPORT.write()
    return 0 if rows and all(r[2] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
