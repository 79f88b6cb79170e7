"""The evolution epoch as a Prefect flow: data → A … H → LoRA SFT → evaluation → MLflow.

Runs without a server (ephemeral Prefect). Every task is cached on content hashes,
so re-running an unchanged epoch replays summaries from the cache and skips the
model entirely (the model server is started lazily, only if a task needs it).
For a schedule, see ``flows/serve.py``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from prefect import flow

from dataclasses import asdict

from hasp.config import load_params
from hasp.evolve.epoch import history_before
from hasp.llm.endpoints import teacher_client
from hasp.llm.lazy import LazyPolicy
from tasks import phases
from tasks.cache import content_hash, key_of

# Every hasp module an epoch executes; their sources (plus the prompt files) are the code part of
# each cache key, so editing an unrelated domain package does not invalidate the epoch's cache.
EPOCH_MODULES = ("hasp.evolve.epoch", "hasp.evolve.detectors", "hasp.evolve.cluster", "hasp.evolve.propose",
                 "hasp.evolve.validate", "hasp.evolve.review", "hasp.evolve.admit", "hasp.signals.coarse",
                 "hasp.train.data", "hasp.train.sft", "hasp.domains.search.task", "hasp.pf.sandbox",
                 "hasp.pf.sandbox_worker", "hasp.pf.sandbox_policy", "hasp.track.epoch_report",
                 "hasp.llm.endpoints")


def code_version() -> str:
    import importlib
    import sys

    for name in EPOCH_MODULES:
        importlib.import_module(name)
    files = sorted({Path(m.__file__) for n, m in list(sys.modules.items())
                    if (n == "hasp" or n.startswith("hasp.")) and getattr(m, "__file__", None)})
    files += sorted((Path(__file__).resolve().parents[1] / "hasp" / "agent" / "prompts").glob("*.yaml"))
    return key_of(*[(f.name, content_hash(f)) for f in files])


def _model_identity(params: Any) -> str:
    if params.llm.base_url:
        return f"{params.llm.base_url}|{params.llm.model}"
    from hasp.llm.model_prep import prepare_model

    folder = prepare_model()
    marker = next((p for p in sorted(folder.glob("*")) if p.name.startswith(".") or p.suffix == ".json"), None)
    return content_hash(folder / "config.json") + (content_hash(marker) if marker else "")


def _fresh(*paths: Path) -> bool:
    """True when an output is missing: then the task must run even if its key is cached."""
    return not all(p.exists() for p in paths)


@flow(name="hasp-evolve-epoch", log_prints=True)
def evolve_epoch_flow(params_path: str = "params.yaml", out_root: str = "outputs",
                      library: str = "skills/search", epoch: int = 0) -> dict[str, Any]:
    p = load_params(params_path)
    out, lib = Path(out_root), Path(library)
    data_dir, ep_dir = out / "data", out / f"epoch_{epoch}"
    ep_dir.mkdir(parents=True, exist_ok=True)
    history = out / "proposal_history.jsonl"
    code = code_version()
    model_id = _model_identity(p)
    teacher = teacher_client(p.teacher, p.llm)
    teacher_id = f"{p.teacher.base_url}|{p.teacher.model}"
    policy = LazyPolicy(p.llm, max_tokens=p.agent.max_tokens)
    student = LazyPolicy(p.llm, port=p.llm.port + 2, max_tokens=p.evolve.proposal_max_tokens,
                         temperature=p.evolve.proposal_temperature)
    trained_dir = out / "train" / "merged"
    trained = LazyPolicy(p.llm.model_copy(update={"base_url": None}), model_dir=trained_dir,
                         port=p.llm.port + 1, max_tokens=p.agent.max_tokens)
    phase_out: dict[str, Any] = {}
    try:
        k = key_of(code, p.section_hash("data"))
        phase_out["data"] = phases.prepare_data.with_options(refresh_cache=_fresh(data_dir / "test.jsonl"))(
            k, p, data_dir)
        data_h, lib_h = content_hash(data_dir), content_hash(lib)

        k = key_of(code, data_h, lib_h, p.section_hash("agent", "llm"), model_id, teacher_id)
        phase_out["rollout"] = phases.rollout.with_options(refresh_cache=_fresh(ep_dir / "rollout.jsonl"))(
            k, p, data_dir, lib, ep_dir / "rollout.jsonl", policy=policy, teacher=teacher)
        roll_h = content_hash(ep_dir / "rollout.jsonl")

        k = key_of(code, roll_h, lib_h, p.section_hash("evolve"))
        phase_out["analyse"] = phases.analyse.with_options(refresh_cache=_fresh(ep_dir / "clusters.json"))(
            k, ep_dir / "rollout.jsonl", lib, p, ep_dir)

        k = key_of(code, content_hash(ep_dir / "clusters.json"), lib_h, p.section_hash("evolve"), model_id,
                   [asdict(x) for x in history_before(history, epoch).entries], epoch)
        phase_out["propose"] = phases.propose.with_options(refresh_cache=_fresh(ep_dir / "candidates.json"))(
            k, ep_dir / "clusters.json", lib, p, ep_dir / "candidates.json", student=student, epoch=epoch,
            history_path=history)
        student.close()  # free its memory before the next model-heavy phases
        cand_h = content_hash(ep_dir / "candidates.json")

        k = key_of(code, cand_h)
        phase_out["validate"] = phases.validate.with_options(refresh_cache=_fresh(ep_dir / "validation.json"))(
            k, ep_dir / "candidates.json", ep_dir / "validation.json")

        k = key_of(code, cand_h, content_hash(ep_dir / "validation.json"), content_hash(ep_dir / "clusters.json"),
                   roll_h, lib_h, p.section_hash("evolve"), teacher_id)
        phase_out["review"] = phases.review.with_options(refresh_cache=_fresh(ep_dir / "reviews.json"))(
            k, ep_dir, lib, p, teacher=teacher)

        k = key_of(code, cand_h, content_hash(ep_dir / "reviews.json"), lib_h, p.section_hash("evolve"), epoch)
        phase_out["admit"] = phases.admit.with_options(
            refresh_cache=_fresh(ep_dir / "library" / "library_history.json"))(
            k, ep_dir, lib, p, epoch=epoch, history_path=history)
        evolved = ep_dir / "library"

        k = key_of(code, roll_h, p.section_hash("signals"))
        phase_out["build_data"] = phases.build_data.with_options(refresh_cache=_fresh(ep_dir / "sft.jsonl"))(
            k, ep_dir / "rollout.jsonl", p, ep_dir)

        train_key = key_of(code, content_hash(ep_dir / "sft.jsonl"), p.section_hash("train"), model_id)
        phase_out["train"] = phases.train.with_options(
            refresh_cache=p.train.enabled and _fresh(trained_dir / "config.json"))(
            train_key, ep_dir / "sft.jsonl", p, out / "train")
        has_trained = (trained_dir / "config.json").exists()

        k = key_of(code, data_h, content_hash(evolved), p.section_hash("agent", "llm"), model_id,
                   train_key if has_trained else None, teacher_id)
        eval_res = phases.evaluate.with_options(refresh_cache=_fresh(out / "eval" / "metrics.json"))(
            k, p, data_dir, evolved, out / "eval", policy=policy,
            trained_policy=trained if has_trained else None, teacher=teacher)
    finally:
        servers_started = policy.started or trained.started or student.started
        for lazy in (policy, student, trained):
            lazy.close()
    for name, summary in phase_out.items():
        if name not in ("data", "train"):
            phases_write_summary(ep_dir, name, summary)
    k = key_of(code, {n: s for n, s in phase_out.items() if n != "train"}, eval_res,
               p.model_dump(mode="json"), os.environ.get("MLFLOW_TRACKING_URI", str(Path.cwd())))
    run_id = phases.track(k, out, p, epoch)
    return {"phases": phase_out, "eval": eval_res, "run_id": run_id, "model_used": servers_started}


def phases_write_summary(ep_dir: Path, name: str, summary: dict[str, Any]) -> None:
    from hasp.evolve.epoch import write_json

    write_json(summary, ep_dir / f"summary_{name}.json")
