"""Chaos run: SIGKILL an evolution epoch (training on) at random points, rerun after each kill, and
check that nothing was lost.

Why: a run that is killed (OOM killer, ``kill -9``, a preempted node) must resume from the task
cache with every artifact whole, end with the same results as a run that was never interrupted,
and leave no process or temp folder behind. This drives ``hasp demo`` (one epoch: data, phases
A-H, val gate, LoRA SFT, evaluation, MLflow) as a user would, in a project folder of its own:

1. a reference project runs the epoch once, uninterrupted (its wall time bounds the kill times);
2. a chaos project starts the same epoch ``--kills`` times, each SIGKILLed (the main process only,
   as the kernel's OOM killer does) at a random moment; after each kill every JSON / JSONL file of
   the project is parsed. A run that reaches the end before its kill time is checked like the last
   run, and the project then starts over fresh, so every kill lands in work not yet cached (not in a
   replay of a finished epoch);
3. a last run goes to the end; then the checks: exit code 0, every artifact parses, the final
   metrics (evaluation cells without timings, admissions, library size) equal the reference's,
   no process of the project is left (Prefect API server, model servers, sandbox workers: found by
   a marker in their environment or by their working folder), and no temp folder is left
   (``hasp_*`` sandbox folders in the project's TMPDIR, ``valgate-*`` / ``.tmp-*`` in the outputs).

The model is the scripted fake OpenAI-compatible endpoint of the test suite (``tests/doubles.py``,
deterministic replies, one server for every run so cache keys stay stable) or, with
``--model embedded``, the embedded SmolLM2 server each run starts itself. Training always uses
the embedded model's weights. Leftover processes are listed, then killed by pid.

    python bench/chaos.py [--kills 20] [--model fake|embedded] [--seed 0] [--no-train] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the scripted endpoint double

from hasp.atomic import json_file_error  # noqa: E402
from hasp.provenance import without_provenance  # noqa: E402
from results import Report  # noqa: E402 - bench/ is the script directory

REPORT = Report("Chaos: SIGKILLs during an evolution epoch with training")
MARKER = "HASP_CHAOS_RUN"
#: summary keys that measure time or machine load, not results
TIMING = ("wall", "_s", "latency", "eta")


# ----------------------------------------------------------------------------- the fake endpoint
def fake_reply(body: dict[str, Any]) -> str:
    """Deterministic replies: the policy (its calls stop at "Observation:") searches once, then
    answers with the first capitalised words it saw; the student's menu questions get option 1, so
    declared candidates go through validation, the val gate and admission; every other caller (the
    summarizer) gets one well-formed failure summary."""
    msgs = body.get("messages") or []
    if body.get("stop"):
        steps = sum(1 for m in msgs if m.get("role") == "assistant")
        last = str(msgs[-1].get("content", "")) if msgs else ""
        if steps == 0:
            question = last.split("Question:", 1)[-1].strip().splitlines()[0][:80] if last else "x"
            return f"Thought: I should look this up.\nAction: SEARCH[{question}]"
        words = [w.strip(".,;:()[]\"'") for w in last.split()]
        caps = [w for w in words if w[:1].isupper() and w.isalpha() and w not in ("Observation", "Thought")]
        return f"Thought: I can answer.\nAction: FINAL[{' '.join(caps[:2]) or 'unknown'}]"
    system = str(msgs[0].get("content", "")) if msgs else ""
    if "number of one option" in system:  # the student's menu questions (declared proposals): the first option
        return "1"
    return json.dumps({"category": "stale_evidence", "abstraction": "The agent answers from the first search "
                       "result without reading it.", "trigger": "FINAL right after one SEARCH",
                       "intervention_hint": "read the top document before answering"})


# ----------------------------------------------------------------------------- a project
def make_project(path: Path, base_url: str | None, *, train: bool, port: int) -> Path:
    import yaml

    path.mkdir(parents=True, exist_ok=True)
    (path / "tmp").mkdir(exist_ok=True)
    p = yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))
    # the smallest epoch that still has every phase: 3 train / 2 val / 3 test questions, two steps each
    # (the trained model's evaluation runs on the real embedded weights, the slowest part of a run)
    p["data"].update(n_questions=8)
    p["agent"].update(max_steps=2, max_tokens=48)
    p["llm"].update(base_url=base_url, model="policy-double" if base_url else None, max_concurrency=4,
                    port=port,  # the embedded server, the trained model's (+1) and the student's (+2)
                    timeout_s=1800)  # a loaded machine is slow, not broken: no timeout may change a result
    p["harness"].update(timeout_seconds=3600)
    p["evolve"].update(max_candidates=2, min_cluster_size=2, proposal_max_tokens=160,
                       structured_output="choices",  # menus the fake student answers with option 1
                       val_rule="no_drop")  # an unchanged val EM admits: the library changes, as in a real epoch
    p["train"].update(enabled=train, max_steps=2, max_length=512, per_device_train_batch_size=2)
    p["tracking"]["experiment"] = "hasp-chaos"
    p.pop("demo", None)  # the settings above are the run's scale; `hasp demo` must not rescale them
    (path / "params.yaml").write_text(yaml.safe_dump(p), encoding="utf-8")
    if not (path / "skills" / "search").exists():
        shutil.copytree(ROOT / "hasp" / "skills" / "search", path / "skills" / "search",
                        ignore=shutil.ignore_patterns("__pycache__"))
    return path


def start(project: Path, token: str, log_path: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PREFECT_HOME": str(project / ".prefect"),
           "MLFLOW_TRACKING_URI": f"sqlite:///{project / 'mlflow.db'}", "TMPDIR": str(project / "tmp"),
           "HF_HUB_OFFLINE": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false", MARKER: token}
    env.pop("PREFECT_API_URL", None)
    cmd = [sys.executable, "-m", "hasp.cli", "demo", "--out", "outputs", "--params", "params.yaml",
           "--library", "hasp/skills/search"]
    with open(log_path, "ab") as log:
        return subprocess.Popen(cmd, cwd=project, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)


# ----------------------------------------------------------------------------- checks
def bad_artifacts(project: Path) -> list[str]:
    """JSON / JSONL files of the project's outputs and library that do not parse."""
    bad = []
    for root in (project / "outputs", project / "skills"):
        for f in sorted(root.rglob("*")):
            if f.suffix in (".json", ".jsonl") and f.is_file() and (err := json_file_error(f)):
                bad.append(f"{f.relative_to(project)}: {err}"[:200])
    return bad


def final_metrics(project: Path) -> dict[str, Any]:
    """What must not depend on interruptions: evaluation cells without timings, admissions, library size."""
    out = project / "outputs"
    metrics = without_provenance(json.loads((out / "eval" / "metrics.json").read_text(encoding="utf-8")))
    cells = {ds: {label: {k: v for k, v in s.items() if not any(t in k for t in TIMING)}
                  for label, s in arms.items()} for ds, arms in metrics.items()}
    admit = json.loads((out / "epoch_0" / "summary_admit.json").read_text(encoding="utf-8"))
    return {"eval": cells, "admitted": admit.get("admitted"), "library_size": admit.get("library_size")}


def diff(a: Any, b: Any, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b), key=str) for d in diff(a.get(k), b.get(k), f"{path}.{k}")]
    if isinstance(a, float) and isinstance(b, float) and abs(a - b) <= 1e-9:
        return []
    return [] if a == b else [f"{path.lstrip('.')}: {a!r} != {b!r}"]


def project_processes(token: str, folders: list[Path]) -> list[tuple[int, str]]:
    """Live processes of the runs: the marker in their environment, or a working folder inside one
    of ``folders`` (sandboxed children get a minimal environment but run in the project's TMPDIR)."""
    me, found = os.getpid(), []
    needle = f"{MARKER}={token}".encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == me:
            continue
        try:
            stat = (proc / "stat").read_text()
            if stat.rsplit(")", 1)[1].split()[0] == "Z":
                continue
            ours = needle in (proc / "environ").read_bytes().split(b"\0")
            if not ours:
                cwd = os.readlink(proc / "cwd")
                ours = any(cwd == str(f) or cwd.startswith(str(f) + os.sep) for f in folders)
            if ours:
                cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
                found.append((int(proc.name), cmd[:160]))
        except (OSError, IndexError):
            continue
    return found


def leftover_folders(project: Path) -> list[str]:
    tmp = [p.name for p in (project / "tmp").iterdir() if p.name.startswith("hasp_")]
    out = project / "outputs"
    scratch = [str(p.relative_to(project)) for pat in ("valgate-*", ".tmp-*") for p in out.rglob(pat)]
    return tmp + scratch


# ----------------------------------------------------------------------------- the run
def run_to_end(project: Path, token: str, log_path: Path, timeout_s: float) -> tuple[int, float]:
    t0 = time.monotonic()
    proc = start(project, token, log_path)
    try:
        rc = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        rc = proc.wait()
    return rc, time.monotonic() - t0


def wait_no_processes(token: str, folders: list[Path], grace_s: float) -> list[tuple[int, str]]:
    end = time.monotonic() + grace_s
    left = project_processes(token, folders)
    while left and time.monotonic() < end:
        time.sleep(1.0)
        left = project_processes(token, folders)
    return left


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=20, help="SIGKILLs before the last, uninterrupted run.")
    ap.add_argument("--model", choices=("fake", "embedded"), default="fake")
    ap.add_argument("--seed", type=int, default=0, help="Seed of the kill times.")
    ap.add_argument("--min-s", type=float, default=3.0, help="Earliest kill after a start (seconds).")
    ap.add_argument("--no-train", dest="train", action="store_false", help="Turn training off (a quicker run).")
    ap.add_argument("--work", type=Path, default=None, help="Working folder (default: a new temp folder).")
    ap.add_argument("--timeout", type=float, default=7200.0, help="Limit of one uninterrupted run (seconds).")
    ap.add_argument("--grace", type=float, default=60.0, help="How long children may take to end after a run.")
    ap.add_argument("--no-write", dest="write", action="store_false", help="Do not write bench/RESULTS.md.")
    args = ap.parse_args()

    work = (args.work or Path(tempfile.mkdtemp(prefix="hasp_chaos_"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    token = uuid.uuid4().hex
    rng = random.Random(args.seed)
    endpoint = None
    if args.model == "fake":
        from doubles import OpenAIEndpointDouble

        endpoint = OpenAIEndpointDouble(reply=fake_reply).__enter__()
    base_url = endpoint.base_url if endpoint is not None else None
    ref = make_project(work / "reference", base_url, train=args.train, port=8950)
    chaos = make_project(work / "chaos", base_url, train=args.train, port=8960)
    folders = [ref, chaos]
    REPORT.line(f"work folder {work}; model {args.model}; training {'on' if args.train else 'off'}; "
                f"{args.kills} kills, seed {args.seed}")
    t_all = time.monotonic()
    try:
        rc, t_ref = run_to_end(ref, token, work / "reference.log", args.timeout)
        REPORT.line(f"reference run: exit {rc}, {t_ref:.0f}s")
        if rc != 0:
            REPORT.line(f"the reference run failed; see {work / 'reference.log'}")
            return 1
        rows: list[tuple[int, float, float, str, int]] = []
        cycle_diffs: list[str] = []
        while sum(1 for r in rows if r[3] == "killed") < args.kills and len(rows) < 3 * args.kills:
            at = rng.uniform(min(args.min_s, t_ref), t_ref)  # kill times over an uninterrupted run's wall time
            t0 = time.monotonic()
            proc = start(chaos, token, work / "chaos.log")
            try:
                rc = proc.wait(timeout=at)
                # the epoch got to its end between kills: check it as the last run is checked, then start
                # over from a fresh project so that every later kill lands in work not yet cached
                d = diff(final_metrics(ref), final_metrics(chaos)) if rc == 0 else ["a run between kills failed"]
                cycle_diffs += [f"cycle {sum(1 for r in rows if r[3].startswith('finished')) + 1}: {x}" for x in d]
                outcome = f"finished (exit {rc}), fresh"
                wait_no_processes(token, [chaos], args.grace)
                shutil.rmtree(chaos)
                make_project(chaos, base_url, train=args.train, port=8960)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)  # the main process only, as the OOM killer does
                proc.wait()
                outcome = "killed"
            bad = bad_artifacts(chaos)
            rows.append((len(rows) + 1, at, time.monotonic() - t0, outcome, len(bad)))
            for b in bad:
                REPORT.line(f"  start {len(rows)}: invalid artifact {b}")
        rc, t_last = run_to_end(chaos, token, work / "chaos.log", args.timeout)
        left = wait_no_processes(token, folders, args.grace)
        bad = bad_artifacts(chaos)
        diffs = cycle_diffs + (diff(final_metrics(ref), final_metrics(chaos)) if rc == 0 else ["the last run failed"])
        folders_left = leftover_folders(chaos) + leftover_folders(ref)
    finally:
        if endpoint is not None:
            endpoint.__exit__(None, None, None)

    REPORT.line("")
    REPORT.line(f"{'run':>4} {'kill at s':>9} {'ran s':>7}  {'outcome':<22} {'invalid JSON':>12}")
    for n, at, ran, outcome, nbad in rows:
        REPORT.line(f"{n:>4} {at:>9.1f} {ran:>7.1f}  {outcome:<22} {nbad:>12}")
    REPORT.line(f"{'last':>4} {'-':>9} {t_last:>7.1f}  {f'exit {rc}':<22} {len(bad):>12}")
    REPORT.line("")
    killed = sum(1 for r in rows if r[3] == "killed")
    checks = [("SIGKILLs during the epoch", str(killed), killed == args.kills),
              ("last run exit code", str(rc), rc == 0),
              ("invalid JSON artifacts at the end", str(len(bad)), not bad),
              ("final metrics equal the reference's", "yes" if not diffs else f"{len(diffs)} differences", not diffs),
              ("processes left (Prefect, model, sandbox)", str(len(left)), not left),
              ("temp folders left", str(len(folders_left)), not folders_left)]
    for name, value, ok in checks:
        REPORT.line(f"{name:<44} {value:>16}  {'ok' if ok else 'FAIL'}")
    for d in diffs[:20]:
        REPORT.line(f"  differs: {d}")
    for pid, cmd in left:
        REPORT.line(f"  left running: pid {pid}: {cmd}")
    for f in folders_left[:20]:
        REPORT.line(f"  left folder: {f}")
    REPORT.line(f"total wall time {time.monotonic() - t_all:.0f}s (reference {t_ref:.0f}s)")
    for pid, _ in left:  # our own leftovers: report first (above), then end them
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if args.write:
        REPORT.write()
    return 0 if all(ok for _, _, ok in checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
